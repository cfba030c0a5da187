# SPDX-License-Identifier: GPL-3.0-or-later
"""``reservations-sync``: the approved reservations the portal lists and Slurm no longer holds, created again (issue
34: ``carme upgrade`` starts Slurm 24.11 with a fresh StateSaveLocation, which holds no reservation)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import select

from webui.extensions import db
from webui.models import ReservationRequest
from webui.models import utcnow
from webui.reservations.service import APPROVED
from webui.reservations.service import backend
from webui.reservations.service import create_in_slurm
from webui.slurm.errors import SlurmError

CREATED, PRESENT, FAILED = "created", "present", "failed"


@dataclass(frozen=True)
class Synced:
    """What became of one approved reservation: created, present (Slurm holds it) or failed (Slurm's words)."""

    request_id: int
    name: str
    outcome: str
    reason: str = ""


def sync_reservations(now: dt.datetime | None = None) -> list[Synced]:
    """Each approved request whose end is still ahead and whose reservation Slurm does not hold (by name) is created
    again, as its approval created it (:func:`webui.reservations.service.create_in_slurm`); one Slurm refuses is
    reported and the others are still tried. Reads Slurm's reservations afresh; a failed read is a
    :class:`SlurmError` before anything is created. The requests are not changed."""
    state = backend().state(max_age=0)
    if state.error:
        raise SlurmError(state.error)
    held = {r.name for r in state.reservations}
    now = now or utcnow()
    stmt = select(ReservationRequest).where(ReservationRequest.status == APPROVED, ReservationRequest.end_at > now)
    outcomes = []
    for row in db.session.execute(stmt.order_by(ReservationRequest.start_at, ReservationRequest.id)).scalars():
        name = row.name or f"carme-{row.username}-{row.id}"
        if name in held:
            outcomes.append(Synced(row.id, name, PRESENT))
            continue
        try:
            create_in_slurm(row)
        except SlurmError as exc:
            outcomes.append(Synced(row.id, name, FAILED, str(exc)))
        else:
            outcomes.append(Synced(row.id, name, CREATED))
    return outcomes
