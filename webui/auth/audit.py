# SPDX-License-Identifier: GPL-3.0-or-later
"""The audit log: who did what, written in the transaction of what it records."""

from __future__ import annotations

from typing import Any

from flask import has_request_context

from webui.auth.logins import current_user
from webui.extensions import db
from webui.models import AuditLog
from webui.models import utcnow


def audit(action: str, target: str = "", **details: Any) -> None:
    """Record an action by the current user ("-" for none, e.g. the tick); committed with the caller's
    transaction."""
    user = current_user() if has_request_context() else None
    actor = user.username if user else "-"
    db.session.add(AuditLog(actor=actor, action=action, target=target, details=details, time=utcnow()))
