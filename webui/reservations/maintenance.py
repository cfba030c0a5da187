# SPDX-License-Identifier: GPL-3.0-or-later
"""Maintenance windows (issue 31): an administrator announces one in the portal and it becomes a Slurm reservation
of every node flagged ``MAINT`` (:func:`webui.reservations.slurm.maintenance_argv`), so Slurm itself holds any job
that would run into it, a plain ``sbatch`` too. The portal reads windows like every reservation (Slurm is the source
of truth: a ``MAINT`` reservation made with ``scontrol`` counts the same), shows the coming ones on the dashboard,
and refuses a session that would run into one with the time it may have instead."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

from webui import forms
from webui.auth.audit import audit
from webui.extensions import db
from webui.reservations.service import backend
from webui.reservations.service import parse_time
from webui.reservations.service import slurm_state
from webui.reservations.slurm import MAINTENANCE_NAME
from webui.reservations.slurm import Reservation
from webui.reservations.slurm import ReservationState
from webui.slurm.state import ClusterState

#: the dashboard shows windows that start within this many days
SHOWN_DAYS = 7
#: an announced window starts at most this many days ahead and lasts at most a week
MAX_DAYS_AHEAD, MAX_MINUTES = 365, 7 * 24 * 60


def upcoming(state: ReservationState, now: dt.datetime) -> list[Reservation]:
    """The maintenance windows (``MAINT`` reservations) not over yet, the soonest first."""
    return sorted((r for r in state.reservations if "MAINT" in r.flags and r.end > now), key=lambda r: r.start)


def shown(state: ReservationState, now: dt.datetime | None = None) -> list[Reservation]:
    """The windows the dashboard announces (those starting within :data:`SHOWN_DAYS`, and any under way)."""
    now = now or dt.datetime.now(dt.UTC)
    return [w for w in upcoming(state, now) if w.start <= now + dt.timedelta(days=SHOWN_DAYS)]


def _utc(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def refusal(windows: Iterable[Reservation], nodes: Iterable[str], now: dt.datetime, minutes: int) -> str | None:
    """Why a session of ``minutes`` on ``nodes`` (its partition's) cannot start now, with the time it may have; None
    when no window holding all those nodes is under way or starts before it would end."""
    wanted = set(nodes)
    for w in windows:
        if not wanted or not wanted <= set(w.nodes):
            continue
        if w.start <= now:
            return f"maintenance until {_utc(w.end)}: no session starts before then"
        if now + dt.timedelta(minutes=minutes) > w.start:
            left = int((w.start - now).total_seconds() // 60) - 1
            if left < 1:
                return f"a maintenance window starts at {_utc(w.start)}: start after {_utc(w.end)}"
            return f"a maintenance window starts at {_utc(w.start)}: at most {left} minutes now, or start after it"
    return None


def check_session(state: ClusterState, partition: str | None, minutes: int) -> None:
    """A 400 naming ``time_minutes`` when the session would run into a maintenance window (:func:`refusal`)."""
    nodes = next((p.nodes for p in state.partitions if p.name == partition), ())
    now = dt.datetime.now(dt.UTC)
    reason = refusal(upcoming(slurm_state(), now), nodes, now, minutes)
    if reason:
        raise forms.FieldError("time_minutes", reason)


def announce(form: Mapping[str, Any], now: dt.datetime | None = None) -> str:
    """Create the window the admin form asks for (``start``, ``minutes``); its name. Slurm's refusal is raised as
    :class:`webui.slurm.errors.SlurmError` (the caller shows it)."""
    now = now or dt.datetime.now(dt.UTC)
    start = parse_time(form, "start")
    minutes = forms.integer(form, "minutes", lo=10, hi=MAX_MINUTES)
    if start < now - dt.timedelta(minutes=1):
        raise forms.FieldError("start", "lies in the past")
    if start > now + dt.timedelta(days=MAX_DAYS_AHEAD):
        raise forms.FieldError("start", f"must be within {MAX_DAYS_AHEAD} days")
    name = f"maint-{start.astimezone(dt.UTC):%Y%m%d%H%M}"
    end = start + dt.timedelta(minutes=minutes)
    backend().create_maintenance(name, start, end)
    audit("maintenance.announce", name, start=start.isoformat(), end=end.isoformat())
    db.session.commit()
    return name


def withdraw(name: str) -> None:
    """Delete a window the portal made (``maint-…``); another reservation's name is a 400."""
    if not MAINTENANCE_NAME.fullmatch(name):
        raise forms.FieldError("name", "is not a maintenance window of the portal")
    backend().delete(name)
    audit("maintenance.withdraw", name)
    db.session.commit()
