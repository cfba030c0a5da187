# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``notifications`` blueprint: the logged-in user's notifications (``/notifications/``) and marking them read
(a CSRF-protected POST); the dashboard's small panel of the unread ones."""

from __future__ import annotations

from typing import Any

from flask import Blueprint
from flask import flash
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for
from werkzeug.wrappers import Response as BaseResponse

from webui import forms
from webui.auth.access import login_required
from webui.auth.logins import current_user
from webui.auth.logins import logged_in
from webui.models import ROW_ID
from webui.models import AllocationRequest
from webui.notifications import events
from webui.notifications import service
from webui.projects import allocations

bp = Blueprint("notifications", __name__, url_prefix="/notifications")

#: the dashboard's panel shows at most this many unread notifications
PANEL_SHOWN = 5


@bp.route("/")
@login_required
def index() -> str:
    username = logged_in().username
    return render_template(
        "notifications/index.html",
        notifications=service.notifications_of(username),
        unread=service.unread_count(username),
        kinds=service.KINDS,
    )


@bp.route("/read", methods=["POST"])
@bp.route(f"/<{ROW_ID}:notification_id>/read", methods=["POST"])
@login_required
def mark_read(notification_id: int | None = None) -> BaseResponse:
    done = service.mark_read(logged_in().username, notification_id)
    if notification_id is None:
        flash(f"{done} notification{'s' if done != 1 else ''} marked as read.")
    back = forms.text(request.form, "next", max_len=20, required=False)
    return redirect(url_for("dashboard.index") if back == "dashboard" else url_for("notifications.index"))


@bp.app_template_global("unread_notifications")
def unread_notifications() -> dict[str, Any]:
    """The logged-in user's unread notifications for the dashboard's panel (newest first) and how many there are."""
    user = current_user()
    if user is None:
        return {"items": [], "count": 0}
    items = [n for n in service.notifications_of(user.username, limit=PANEL_SHOWN) if n.read_at is None]
    return {"items": items, "count": service.unread_count(user.username)}


@allocations.DECIDED.connect
def _allocation_decided(row: AllocationRequest) -> None:
    """The requester of a decided allocation request is told, in the decision's transaction."""
    events.allocation_decided(row)
