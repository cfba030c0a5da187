# SPDX-License-Identifier: GPL-3.0-or-later
"""The Reservations page (week and month calendar, request form, feed link), the admin's decisions, and the
per-user iCalendar feed (issue 16): the ``reservations`` blueprint (``/reservations``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from flask import Blueprint
from flask import abort
from flask import flash
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for
from werkzeug.wrappers import Response

from webui import forms
from webui.auth.access import admin_required
from webui.auth.access import login_required
from webui.auth.logins import current_user
from webui.auth.logins import valid_username
from webui.extensions import db
from webui.models import ROW_ID
from webui.models import ReservationRequest
from webui.models import utcnow
from webui.reservations import calendar
from webui.reservations import maintenance
from webui.reservations import service as svc
from webui.slurm.errors import SlurmError
from webui.slurm.errors import flash_outcome

bp = Blueprint("reservations", __name__, url_prefix="/reservations")


def _first_day(view: str) -> dt.date:
    raw = request.args.get("date", "")
    try:
        date = dt.date.fromisoformat(raw) if raw else utcnow().astimezone(svc.zone()).date()
    except ValueError:
        abort(400, description="date: must be YYYY-MM-DD")
    if not dt.MINYEAR < date.year < dt.MAXYEAR:  # the grid and its previous/next links must stay inside the calendar
        abort(400, description=f"date: must lie between the years {dt.MINYEAR + 1} and {dt.MAXYEAR - 1}")
    if view == "month":
        return date.replace(day=1)
    return date - dt.timedelta(days=date.weekday())


def _context(view: str) -> dict[str, Any]:
    user = current_user()
    assert user is not None
    first = _first_day(view)
    state = svc.slurm_state()
    blocks = calendar.blocks(user, state)
    if view == "month":
        grid_start = first - dt.timedelta(days=first.weekday())
        nxt = (first + dt.timedelta(days=32)).replace(day=1)
        count = ((nxt - grid_start).days + 6) // 7 * 7
        days = calendar.days(blocks, grid_start, count, month=first.month)
        prev, following = (first - dt.timedelta(days=1)).replace(day=1), nxt
    else:
        days = calendar.days(blocks, first, 7)
        prev, following = first - dt.timedelta(days=7), first + dt.timedelta(days=7)
    weeks = [days[i : i + 7] for i in range(0, len(days), 7)]
    return {
        "view": view,
        "first": first,
        "weeks": weeks,
        "prev": prev,
        "next": following,
        "state": state,
        "requests": svc.requests_of(user.username),
        "policy": svc.policy(),
        "timezone": str(svc.zone()),
        "has_feed": calendar.has_calendar_token(user.username),
        "live": {r.name for r in state.reservations},
        "now": utcnow(),
    }


@bp.route("/")
@login_required
def index() -> Any:
    view = request.args.get("view", "week")
    if view not in ("week", "month"):
        abort(400, description="view: must be week or month")
    return render_template("reservations/index.html", **_context(view))


@bp.route("/request", methods=["POST"])
@login_required
def make_request() -> Any:
    user = current_user()
    assert user is not None
    try:
        row, message = svc.submit_request(user, request.form)
    except forms.FieldError as exc:
        db.session.rollback()
        ctx = _context("week")
        return render_template("reservations/index.html", error=exc.description, form=request.form, **ctx), 400
    except SlurmError as exc:
        db.session.rollback()
        ctx = _context("week")
        return render_template("reservations/index.html", error=str(exc), form=request.form, **ctx), 503
    if row.status == svc.FAILED:
        ctx = _context("week")
        return render_template("reservations/index.html", error=message, form=request.form, **ctx), 409
    flash(message)
    local = row.start_at.astimezone(svc.zone()).date().isoformat()
    return redirect(url_for("reservations.index", date=local))


def _row_or_404(request_id: int) -> ReservationRequest:
    row = db.session.get(ReservationRequest, request_id)
    if row is None:
        abort(404, description="No such reservation request.")
    return row


@bp.route(f"/<{ROW_ID}:request_id>/cancel", methods=["POST"])
@login_required
def cancel(request_id: int) -> Response:
    user = current_user()
    assert user is not None
    row = _row_or_404(request_id)
    if row.username != user.username and not user.is_admin:
        abort(403, description="Only the owner or an administrator may cancel this reservation.")
    if row.status not in (svc.PENDING, svc.APPROVED):
        abort(409, description=f"The request is {row.status} already.")
    try:
        svc.cancel(row, user)
    except SlurmError as exc:
        flash(f"Slurm refused to delete the reservation: {exc}")
    else:
        flash(f"Request {row.id} cancelled.")
    return redirect(url_for("reservations.index"))


@bp.route("/feed", methods=["POST"])
@login_required
def feed() -> Any:
    """A new feed URL (the old one stops working), or ``revoke=1``: none."""
    user = current_user()
    assert user is not None
    if forms.flag(request.form, "revoke"):
        calendar.revoke_calendar_token(user.username)
        flash("Your calendar feed URL is revoked.")
        return redirect(url_for("reservations.index"))
    token = calendar.new_calendar_token(user.username)
    url = url_for("reservations.ical", username=user.username, token=token, _external=True)
    ctx = _context("week")
    return render_template("reservations/index.html", feed_url=url, **ctx)


@bp.route("/ical/<username>/<token>.ics")
def ical(username: str, token: str) -> Response:
    """The user's reservations for their calendar app: no login, the token in the URL is the credential."""
    if not valid_username(username) or len(token) > 100 or not calendar.calendar_owner(username, token):
        abort(404)
    body = calendar.ical_feed(username, request.host.split(":")[0] or "carme")
    resp = Response(body, mimetype="text/calendar")
    resp.headers["Content-Disposition"] = 'inline; filename="carme-reservations.ics"'
    resp.headers["Cache-Control"] = "no-store"
    return resp


# --- administrators ------------------------------------------------------------------------------------------------


@bp.route("/admin")
@admin_required
def admin() -> Any:
    return render_template(
        "reservations/admin.html",
        pending=svc.pending_requests(),
        decided=svc.recent_decisions(),
        timezone=str(svc.zone()),
        windows=maintenance.upcoming(svc.slurm_state(), dt.datetime.now(dt.UTC)),
    )


@bp.route("/admin/maintenance", methods=["POST"])
@admin_required
def announce_maintenance() -> Response:
    flash_outcome(
        lambda: maintenance.announce(request.form),
        lambda name: f"Maintenance window {name} announced: Slurm holds jobs that would run into it.",
        "Slurm refused the maintenance window",
    )
    return redirect(url_for("reservations.admin"))


@bp.route("/admin/maintenance/<name>/withdraw", methods=["POST"])
@admin_required
def withdraw_maintenance(name: str) -> Response:
    flash_outcome(
        lambda: maintenance.withdraw(name), lambda _: f"Maintenance window {name} withdrawn.", "Slurm refused"
    )
    return redirect(url_for("reservations.admin"))


@bp.route(f"/admin/<{ROW_ID}:request_id>/decide", methods=["POST"])
@admin_required
def decide(request_id: int) -> Response:
    user = current_user()
    assert user is not None
    row = _row_or_404(request_id)
    action, reason = forms.decision(request.form)
    if row.status != svc.PENDING:
        abort(409, description=f"The request is {row.status} already.")
    if action == "approve":
        svc.approve(row, decided_by=user.username, reason=reason or "approved by an administrator")
        if row.status == svc.FAILED:
            flash(f"Slurm refused request {row.id}: {row.reason}")
        else:
            flash(f"Request {row.id} approved: reservation {row.name} created.")
    else:
        svc.decline(row, decided_by=user.username, reason=reason)
        flash(f"Request {row.id} declined.")
    return redirect(url_for("reservations.admin"))
