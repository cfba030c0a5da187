# SPDX-License-Identifier: GPL-3.0-or-later
"""Start, stop and connect to interactive sessions: the ``sessions`` blueprint (``/sessions``)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint
from flask import abort
from flask import current_app
from flask import flash
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for
from werkzeug.exceptions import BadRequest
from werkzeug.wrappers import Response

from webui.auth.access import login_required
from webui.auth.logins import current_user
from webui.auth.logins import login_key_of_request
from webui.extensions import db
from webui.forms import FieldError
from webui.projects.service import member_projects
from webui.reservations.service import active_reservations
from webui.sessions import app_origin
from webui.sessions import storage
from webui.sessions.catalog import available_apps
from webui.sessions.catalog import catalog
from webui.sessions.catalog import form_limits
from webui.sessions.profiles import default_profile
from webui.sessions.profiles import offered_profiles
from webui.sessions.records import get_portal_session
from webui.sessions.records import parse_job_id
from webui.sessions.records import proxy_path
from webui.sessions.service import start_session
from webui.sessions.service import stop_session
from webui.sessions.status import session_views
from webui.slurm.errors import SlurmError
from webui.slurm.scheduler import current_scheduler
from webui.slurm.scheduler import default_partition

bp = Blueprint("sessions", __name__, url_prefix="/sessions")


#: the start form's label of each field, as its errors name them (the API's errors keep the field's name)
LABELS = {
    "profile": "Profile",
    "app": "App",
    "image": "Image",
    "gpus": "GPUs",
    "cpus": "CPUs",
    "mem_gib": "Memory (GiB)",
    "mem_mb": "Memory (MB)",
    "time_minutes": "Time (minutes)",
    "nodes": "Nodes",
    "partition": "Partition",
    "reservation": "Reservation",
    "project": "Project",
    "logdir": "TensorBoard log directory",
}


def labelled(exc: FieldError) -> str:
    """``exc``'s message with the label the form shows for its field ("Time (minutes): must be between 1 and 480")."""
    label = LABELS.get(exc.field, exc.field)
    message = str(exc.description).removeprefix(f"{exc.field}: ")
    if message.startswith(label):  # it names the label itself (webui.forms.absolute_path)
        return message
    return f"{label}: {message}"


def _form_context(username: str) -> dict[str, Any]:
    state = current_scheduler().state()
    images = catalog()
    partition = default_partition(state)
    offered = offered_profiles(images)
    return {
        "state": state,
        "images": images,
        "profiles": offered,
        "chosen": default_profile(username, offered),
        "apps": available_apps(images),
        "partitions": state.partitions,
        "default_partition": partition,
        "limits": form_limits(username, state, partition),
        "datasets": storage.datasets(),
        "reservations": active_reservations(username),
        "projects": member_projects(username),
    }


@bp.route("/new", methods=["GET"])
@login_required
def new() -> Any:
    user = current_user()
    assert user is not None
    return render_template("sessions/new.html", **_form_context(user.username))


@bp.route("/new", methods=["POST"])
@login_required
def start() -> Any:
    user = current_user()
    assert user is not None
    try:
        record = start_session(user, request.form)
    except FieldError as exc:
        ctx = _form_context(user.username)
        return render_template("sessions/new.html", error=labelled(exc), form=request.form, **ctx), 400
    except SlurmError as exc:
        ctx = _form_context(user.username)
        return render_template("sessions/new.html", error=str(exc), form=request.form, **ctx), 503
    flash(f"Session {record.job_id} submitted; the Connect button appears once {record.app} answers.")
    return redirect(url_for("dashboard.index"))


def stop_and_flash(job_id: str) -> None:
    """Stop a session as the logged-in user (the service checks owner or admin) and say how it went."""
    user = current_user()
    assert user is not None
    jid = parse_job_id(job_id)
    try:
        stop_session(user, jid)
    except SlurmError as exc:
        flash(f"Could not stop session {jid}: {exc}")
    else:
        flash(f"Session {jid} is stopping.")


@bp.route("/<job_id>/stop", methods=["POST"])
@login_required
def stop(job_id: str) -> Response:
    stop_and_flash(job_id)
    back = url_for("admin.index") if request.form.get("from") == "admin" else url_for("dashboard.index")
    return redirect(back)


@bp.route("/<job_id>/connect")
@login_required
def connect(job_id: str) -> Response:
    user = current_user()
    assert user is not None
    jid = parse_job_id(job_id)
    record = get_portal_session(jid)
    if record is None:
        abort(404)
    if record.owner != user.username:
        abort(403)
    sched = current_scheduler()
    state = sched.state()
    views = session_views(state, [record])
    if not views or not views[0]["ready"]:
        # Another worker (its own snapshot, its own probes) may have offered this Connect already: look again with a
        # fresher snapshot (at most one query per PROXY_RECHECK_SECONDS per worker, as the proxy does) and a patient
        # probe of the app (a 1-s probe that failed under load is remembered by this worker) before refusing.
        fresh = sched.state(max_age=float(current_app.config["PROXY_RECHECK_SECONDS"]))
        views = session_views(fresh, [record], patient=True)
    if not views or not views[0]["ready"]:
        flash(f"Session {jid} is not ready yet.")
        return redirect(url_for("dashboard.index"))
    if not app_origin.enabled():
        return redirect(proxy_path(jid))
    # To the session's own origin: first for a bind cookie there, then back here with its hash for a one-time ticket
    # that only that browser can trade for the session's apps cookie (webui.sessions.app_origin).
    bind = request.args.get("bind", "")
    if not bind:
        resp = redirect(app_origin.start_url(jid))
    else:
        if not app_origin.BIND_HASH.fullmatch(bind):
            raise BadRequest("bind: not a browser binding")
        key = login_key_of_request()
        assert key is not None  # login_required: the cookie carries a valid login
        ticket = app_origin.issue_ticket(key, jid, bind)
        db.session.commit()
        resp = redirect(app_origin.enter_url(jid, ticket))
    resp.headers["Cache-Control"] = "no-store"
    return resp
