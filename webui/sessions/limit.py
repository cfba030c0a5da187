# SPDX-License-Identifier: GPL-3.0-or-later
"""The per-user session limit under concurrent starts (security issue #27, item 7).

A start counts the user's sessions, submits the job to Slurm and records it. Counted in one request and recorded in
another, three concurrent starts beside one running session all saw one session and all started. Now the count is
taken again under the user's lock (:func:`webui.user_lock.lock_user`) together with the starts still in flight
(:class:`webui.models.SessionStart`), and a start that fits records itself as in flight before the lock is let go.
The submission stays outside any lock: concurrent starts that fit the limit still go to Slurm side by side.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass

from flask import current_app
from sqlalchemy import delete
from sqlalchemy import func
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from webui import forms
from webui.extensions import db
from webui.models import SessionStart
from webui.models import utcnow
from webui.user_lock import lock_user

#: a start in flight counts this long at most: its worker died between submission and record (the submission itself
#: is bounded by SLURM_TIMEOUT_SECONDS, a request by gunicorn's timeout)
CLAIM_SECONDS = 120.0


@dataclass(frozen=True)
class Claim:
    """A start in flight, from :func:`claimed`."""

    id: int

    def settle(self) -> None:
        """Delete the claim in the session's transaction, the one that records the session: from its commit on the
        session itself counts."""
        db.session.execute(delete(SessionStart).where(SessionStart.id == self.id))


@contextlib.contextmanager
def claimed(
    username: str, max_sessions: int | None, count_active: Callable[[], int], *, source: str = ""
) -> Iterator[Claim]:
    """A place within ``max_sessions`` (``None``: no limit) for one more start of ``username``, or a 400 naming the
    limit (and ``source``, where Slurm holds it).

    ``count_active`` counts the user's sessions from the database as the lock lets it be read; the starts in flight
    are added. Leaving the block by an exception rolls the session back and gives the place back; leaving it normally
    needs :meth:`Claim.settle` in the transaction that recorded the session.
    """
    lock_user(username)
    now = utcnow()
    # Stale claims are found by a plain read and deleted by primary key: a DELETE ... WHERE owner= would lock the
    # owner index's range, and a concurrent start settling its own claim (deleted by id, in the transaction that
    # records its session) locks the same entries the other way round: InnoDB found that deadlock in CI (1213).
    stale = select(SessionStart.id).where(
        SessionStart.owner == username, SessionStart.created_at < now - dt.timedelta(seconds=CLAIM_SECONDS)
    )
    stale_ids = list(db.session.scalars(stale))
    if stale_ids:
        db.session.execute(delete(SessionStart).where(SessionStart.id.in_(stale_ids)))
    starting = db.session.scalar(select(func.count()).select_from(SessionStart).where(SessionStart.owner == username))
    active = count_active() + (starting or 0)
    if max_sessions is not None and active >= max_sessions:
        db.session.rollback()
        of_them = f" ({starting} of them starting)" if starting else ""
        where = f" (Slurm: {source})" if source else ""
        raise forms.FieldError(
            "app", f"you already have {active} sessions{of_them}; the limit is {max_sessions}{where}"
        )
    row = SessionStart(owner=username, created_at=now)
    db.session.add(row)
    db.session.flush()
    claim = Claim(row.id)
    db.session.commit()
    try:
        yield claim
    except BaseException:
        try:  # nothing of a failed start is kept: its transaction may hold the claim's row (settled, not committed)
            db.session.rollback()
            db.session.execute(delete(SessionStart).where(SessionStart.id == claim.id))
            db.session.commit()
        except SQLAlchemyError:  # the database is gone: the claim counts until CLAIM_SECONDS, the error is the start's
            current_app.logger.exception("could not give back the session start %s of %s", claim.id, username)
            with contextlib.suppress(SQLAlchemyError):
                db.session.rollback()
        raise
