# SPDX-License-Identifier: GPL-3.0-or-later
"""Recording notifications (each event once per user) and what a user's pages show of them."""

from __future__ import annotations

from collections.abc import Iterable

from flask import current_app
from sqlalchemy import func
from sqlalchemy import select
from sqlalchemy import update

from webui.extensions import db
from webui.models import utcnow
from webui.notifications.models import Notification

#: the kinds of notification, and what the list page calls them
KINDS = {
    "session_ready": "Session ready",
    "session_failed": "Session failed",
    "session_ending": "Session ending",
    "budget_80": "Budget at 80 %",
    "budget_100": "Budget used up",
    "allocation_decided": "Allocation request decided",
    "project_ended": "Project ended",
}

#: the notifications list shows this many, newest first
SHOWN = 50


def record(kind: str, event: str, usernames: Iterable[str], title: str, body: str = "", link: str | None = None) -> int:
    """Add the notification of ``event`` for each of ``usernames`` that has not got it yet (uncommitted: the caller
    commits, with the change it tells of); how many were added. Mail is to send where a relay is configured."""
    if kind not in KINDS:
        raise ValueError(f"unknown notification kind {kind!r}")
    wanted = sorted(set(usernames))
    if not wanted:
        return 0
    have = select(Notification.username).where(Notification.event == event, Notification.username.in_(wanted))
    known = set(db.session.scalars(have))
    mail_state = "pending" if current_app.config.get("MAIL_RELAY") else "none"
    new = [u for u in wanted if u not in known]
    for username in new:
        row = Notification(username=username, kind=kind, event=event, title=title[:200], body=body, link=link)
        row.mail_state, row.mail_tries, row.mail_error = mail_state, 0, ""
        db.session.add(row)
    return len(new)


def notifications_of(username: str, limit: int = SHOWN) -> list[Notification]:
    stmt = select(Notification).where(Notification.username == username)
    return list(db.session.scalars(stmt.order_by(Notification.id.desc()).limit(limit)))


def unread_count(username: str) -> int:
    stmt = select(func.count()).where(Notification.username == username, Notification.read_at.is_(None))
    return int(db.session.scalar(stmt) or 0)


def mark_read(username: str, notification_id: int | None = None) -> int:
    """Mark the user's notification ``notification_id`` read (None: all of them); how many were unread. Another
    user's notification is never touched (it counts as none)."""
    stmt = update(Notification).where(Notification.username == username, Notification.read_at.is_(None))
    if notification_id is not None:
        stmt = stmt.where(Notification.id == notification_id)
    done = db.session.execute(stmt.values(read_at=utcnow()))
    db.session.commit()
    return int(getattr(done, "rowcount", 0) or 0)
