# SPDX-License-Identifier: GPL-3.0-or-later
"""The dashboard's notices: the user's sessions that ended under them (stopped by an administrator, a node failure,
the time limit, an image refused) and that they have not dismissed (``end_seen``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select

from webui.auth.logins import current_user
from webui.extensions import db
from webui.history.reasons import NOTICE_REASONS
from webui.models import PortalSession
from webui.models import utcnow
from webui.sessions.catalog import app_spec

#: a notice older than this is not shown any more (the history keeps the session)
NOTICE_DAYS = 14
MAX_NOTICES = 10


def notice_text(ps: PortalSession) -> str:
    spec = app_spec(ps.app)
    what = f"session {ps.job_id} ({spec.title if spec is not None else ps.app})"
    if ps.end_reason == "admin":
        who = ps.stopped_by or "An administrator"
        return f"{who} stopped your {what}: {ps.stop_note}" if ps.stop_note else f"{who} stopped your {what}."
    if ps.end_reason == "node_failure":
        return f"Your {what} ended: its node failed."
    if ps.end_reason == "time_limit":
        return f"Your {what} reached its time limit and ended."
    return f"Your {what} did not start: its container image is missing on the node or does not match the catalogue."


def session_notices(username: str) -> list[dict[str, Any]]:
    """The user's notices, newest first."""
    stmt = (
        select(PortalSession)
        .where(
            PortalSession.owner == username,
            PortalSession.end_seen.is_(False),
            PortalSession.end_reason.in_(NOTICE_REASONS),
            PortalSession.ended_at >= utcnow() - dt.timedelta(days=NOTICE_DAYS),
        )
        .order_by(PortalSession.ended_at.desc())
        .limit(MAX_NOTICES)
    )
    return [{"job_id": ps.job_id, "text": notice_text(ps)} for ps in db.session.execute(stmt).scalars()]


def notices_context() -> dict[str, Any]:
    """For templates: ``session_notices()``, the current user's notices, asked only where a template calls it."""

    def notices() -> list[dict[str, Any]]:
        user = current_user()
        return session_notices(user.username) if user is not None else []

    return {"session_notices": notices}
