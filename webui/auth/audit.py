# SPDX-License-Identifier: GPL-3.0-or-later
"""The audit log: who did what, written in the transaction of what it records."""

from __future__ import annotations

from typing import Any

from webui.auth.logins import current_user
from webui.extensions import db
from webui.models import AuditLog
from webui.models import utcnow


def audit(action: str, target: str = "", **details: Any) -> None:
    """Record an action by the current user; committed with the caller's transaction."""
    user = current_user()
    actor = user.username if user else "-"
    db.session.add(AuditLog(actor=actor, action=action, target=target, details=details, time=utcnow()))
