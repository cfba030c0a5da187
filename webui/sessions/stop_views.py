# SPDX-License-Identifier: GPL-3.0-or-later
"""No lost work: Stop asks first, a session nearing its end can be extended, a failed one dismissed. Routes of the
``sessions`` blueprint (:mod:`webui.sessions.views`, which keeps the ``POST /sessions/<job>/stop`` itself):

* ``GET /sessions/<job>/stop``: the confirmation page (the dashboard's ``<dialog>`` does the same with JavaScript);
* ``POST /sessions/<job>/extend``: more time, within the user's limit (:mod:`webui.sessions.extend`);
* ``POST /sessions/<job>/dismiss``: a failed session leaves the dashboard (stopped in Slurm if it still runs)."""

from __future__ import annotations

from typing import Any

from flask import abort
from flask import flash
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for
from werkzeug.wrappers import Response

from webui.auth.access import login_required
from webui.auth.logins import current_user
from webui.extensions import db
from webui.forms import FieldError
from webui.sessions.extend import extend_session
from webui.sessions.records import get_portal_session
from webui.sessions.records import parse_job_id
from webui.sessions.service import stop_session
from webui.sessions.views import bp
from webui.slurm.errors import SlurmError


@bp.route("/<job_id>/stop", methods=["GET"])
@login_required
def confirm_stop(job_id: str) -> Any:
    """Ask before stopping: the app's unsaved work is lost. The POST button is the one the dashboard's form sends."""
    user = current_user()
    assert user is not None
    record = get_portal_session(parse_job_id(job_id))
    if record is None:
        abort(404)
    if record.owner != user.username and not user.is_admin:
        abort(403)
    return render_template("sessions/stop.html", record=record, ended=record.ended_at is not None)


@bp.route("/<job_id>/extend", methods=["POST"])
@login_required
def extend(job_id: str) -> Response:
    user = current_user()
    assert user is not None
    jid = parse_job_id(job_id)
    try:
        _record, new_limit = extend_session(user, jid, request.form)
    except FieldError as exc:
        flash(f"Session {jid} was not extended. {exc.description}")
    except SlurmError as exc:
        flash(f"Session {jid} was not extended: {exc}")
    else:
        flash(f"Session {jid} now has a time limit of {new_limit} minutes.")
    return redirect(url_for("dashboard.index"))


@bp.route("/<job_id>/dismiss", methods=["POST"])
@login_required
def dismiss(job_id: str) -> Response:
    """A failed session: stop what is left of it in Slurm (nothing if it ended) and hide it from the dashboard."""
    user = current_user()
    assert user is not None
    jid = parse_job_id(job_id)
    try:
        record = stop_session(user, jid)
    except SlurmError as exc:
        flash(f"Could not remove session {jid}: {exc}")
        return redirect(url_for("dashboard.index"))
    if record.owner == user.username:
        record.end_seen = True
        db.session.commit()
    flash(f"Session {jid} was removed from your dashboard.")
    return redirect(url_for("dashboard.index"))
