# SPDX-License-Identifier: GPL-3.0-or-later
"""The periodic check (``check()``, run by the portal's timer every minute, never by a page load): it reads Slurm
and the portal's records, records each new event once (:mod:`webui.notifications.events`), and mails what is
pending. Each step fails alone: an unreachable Slurm or relay is logged, and the next check tries again."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from flask import current_app
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from webui.auth.logins import CurrentUser
from webui.extensions import db
from webui.models import PortalSession
from webui.models import utcnow
from webui.notifications import events
from webui.notifications.mail import MailError
from webui.notifications.mail import send_pending
from webui.projects.service import this_month
from webui.projects.service import visible_projects
from webui.projects.terms import ended_accounts
from webui.sessions.records import open_sessions
from webui.sessions.status import session_views
from webui.slurm.errors import SlurmError
from webui.slurm.scheduler import current_scheduler

#: "ending soon": a running session with at most this much time left (one longer than this when it started)
ENDING_SECONDS = 15 * 60
#: the end reasons that make a session "failed"
FAILED_REASONS = ("failed", "image_refused", "node_failure", "out_of_memory")
#: a session that ended this long ago is still looked at for a failure (ended while no check ran)
FAILED_LOOKBACK = dt.timedelta(hours=1)
#: who reads every project (the check is no user)
WATCHER = CurrentUser("carme-notifications", is_admin=True)


def check() -> str:
    """One check: sessions, budgets, ended projects, then mail; what each step did (a count, or ``failed: ...``).
    Never raises for Slurm, the database, LDAP or the relay: the next check tries again."""
    steps: tuple[Callable[[], int], ...] = (check_sessions, check_budgets, check_ended, send_pending)
    done = []
    for step in steps:
        try:
            outcome = str(step())
            db.session.commit()
        except (SlurmError, SQLAlchemyError, MailError, OSError) as exc:
            current_app.logger.warning("notifications: %s failed: %s", step.__name__, exc)
            db.session.rollback()
            outcome = f"failed: {exc}"
        done.append(f"{step.__name__.replace('check_', '')} {outcome}")
    return ", ".join(done)


def check_sessions() -> int:
    """Ready, ending soon and failed sessions; how many notifications were recorded."""
    state = current_scheduler().state(max_age=0)
    if state.error:
        raise SlurmError(state.error)
    records = open_sessions()
    views = {v["job_id"]: v for v in session_views(state, records, probe=False)}  # records the ends it sees
    added = 0
    for ps in records:
        view = views.get(ps.job_id)
        if view is None:
            continue
        if view["ready"]:
            added += events.session_ready(ps)
        if _ending(ps, view):
            added += events.session_ending(ps, view)
        if view["failed"]:
            added += events.session_failed(ps, str(view["reason"]))
    for ps in _recently_failed():
        added += events.session_failed(ps, "")
    return added


def _ending(ps: PortalSession, view: dict[str, Any]) -> bool:
    left = view["seconds_left"]
    if view["state"] != "RUNNING" or not isinstance(left, int):
        return False
    return ps.time_minutes * 60 > ENDING_SECONDS and 0 < left <= ENDING_SECONDS


def _recently_failed() -> list[PortalSession]:
    since = utcnow() - FAILED_LOOKBACK
    stmt = select(PortalSession).where(PortalSession.ended_at >= since, PortalSession.end_reason.in_(FAILED_REASONS))
    return list(db.session.scalars(stmt))


def check_budgets() -> int:
    """Projects at 80 % and 100 % of this month's GPU budget; how many notifications were recorded."""
    month = this_month()
    return sum(events.budget_reached(view, month) for view in visible_projects(WATCHER, month))


def check_ended() -> int:
    """The managers of each portal project the tick has ended (webui.projects.terms.expire), told once."""
    ended = ended_accounts()
    if not ended:
        return 0
    projects = [p for p in current_scheduler().projects() if p.name in ended]
    return sum(events.project_ended(p, ended[p.name]) for p in projects)
