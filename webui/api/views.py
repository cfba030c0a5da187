# SPDX-License-Identifier: GPL-3.0-or-later
"""JSON API and the nginx ``auth_request`` endpoint.

Authentication is the portal session cookie. State-changing calls (POST,
DELETE) need the CSRF token in an ``X-CSRFToken`` header; scripts get it from
``GET /api/csrf-token`` (same-origin only: no CORS headers are ever sent).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any
from urllib.parse import unquote

from flask import Blueprint
from flask import Response
from flask import abort
from flask import current_app
from flask import jsonify
from flask import request
from flask_wtf.csrf import generate_csrf  # type: ignore[import-untyped]
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from carme_runtime.front import FRONT_HEADER
from webui.auth.access import login_required
from webui.auth.logins import current_user
from webui.auth.logins import login_key_of_request
from webui.auth.logins import user_of_login
from webui.dashboard.rows import with_row_fields
from webui.extensions import db
from webui.models import User
from webui.sessions import app_origin
from webui.sessions.proxy import authorise_proxy
from webui.sessions.records import JOB_ID
from webui.sessions.records import parse_job_id
from webui.sessions.records import proxy_path
from webui.sessions.service import start_session as start
from webui.sessions.service import stop_session as stop
from webui.sessions.status import wait_for_session_change
from webui.slurm.scheduler import current_scheduler

bp = Blueprint("api", __name__, url_prefix="/api")

PROXY_URI = re.compile(r"^/proxy/(\d{1,12})(?:/|$)")


_PROBE = select(User.id).limit(1)


def _database_answers() -> bool:
    try:
        db.session.execute(_PROBE).all()  # a real table: the schema is there too, not only the server
    except SQLAlchemyError as exc:
        current_app.logger.error("health: database error: %s", exc)
        with contextlib.suppress(SQLAlchemyError):
            db.session.rollback()
        return False
    return True


@bp.route("/health")
def health() -> Any:
    """200 while the portal can serve logins (its database answers); 503 with ``database: down`` otherwise.

    The scheduler's state is reported but does not fail the check: the portal shows a banner without Slurm.
    """
    database = _database_answers()
    state = current_scheduler().state()
    body = jsonify(ok=database, database="ok" if database else "down", scheduler="unavailable" if state.error else "ok")
    return body, 200 if database else 503


@bp.route("/csrf-token")
@login_required
def csrf_token() -> Any:
    return jsonify(csrf_token=generate_csrf())


@bp.route("/sessions", methods=["GET"])
@login_required
def list_sessions() -> Any:
    user = current_user()
    assert user is not None
    state, views, waited = wait_for_session_change(user.username, _wait_seconds())
    # with the words and flags of the dashboard's rows (webui/static/dashboard.js updates them in place)
    return jsonify(sessions=with_row_fields(views), scheduler_error=state.error, waited=waited)


def _wait_seconds() -> float:
    """``?wait=`` of ``GET /api/sessions``: how long the answer may wait for a pending or starting session to change
    (a long poll, ``webui.sessions.status.wait_for_session_change``), 0 (the default) to ``LONG_POLL_MAX_SECONDS``."""
    raw = request.args.get("wait", "0")
    limit = float(current_app.config.get("LONG_POLL_MAX_SECONDS", 10.0))
    try:
        wait = float(raw)
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= limit:  # also NaN
        abort(400, description=f"wait: seconds from 0 to {limit:g}")
    return wait


@bp.route("/sessions", methods=["POST"])
@login_required
def start_session() -> Any:
    user = current_user()
    assert user is not None
    try:
        body = request.get_json(silent=True)
    except RecursionError:  # nested deeper than the decoder goes: json.loads raises this, not a ValueError
        abort(400, description="body: the JSON is nested too deeply")
    form = body if isinstance(body, dict) else request.form
    record = start(user, form)
    return jsonify(job_id=record.job_id, app=record.app, gpus=record.gpus), 201


@bp.route("/sessions/<job_id>/stop", methods=["POST"])
@bp.route("/sessions/<job_id>", methods=["DELETE"])
@login_required
def stop_session(job_id: str) -> Any:
    user = current_user()
    assert user is not None
    record = stop(user, parse_job_id(job_id))
    return jsonify(job_id=record.job_id, stopped=True)


@bp.route("/cluster")
@login_required
def cluster() -> Any:
    state = current_scheduler().state()
    return jsonify(usage=state.gpu_usage(), scheduler_error=state.error)


@bp.route("/proxy-auth")
def proxy_auth() -> Response:
    """nginx ``auth_request`` target: may this request's login reach /proxy/<job_id>/...?

    nginx reaches it only through its ``internal`` locations; from outside, ``/api/proxy-auth`` is a 404 there.
    With ``APPS_ORIGIN`` set, only the apps' server block asks (``X-Carme-Via: apps``), only for the session whose
    host the request was sent to, and the login is the one that session's apps cookie names
    (``webui.sessions.app_origin``); the portal's own cookie authorises nothing there.
    """
    uri = request.headers.get("X-Original-URI", "")
    match = PROXY_URI.match(uri)
    path = unquote(uri.split("?", 1)[0])
    if match is None or any(seg in (".", "..") for seg in path.split("/")) or "\\" in path:
        abort(404)
    job_id = int(match.group(1))
    if app_origin.enabled():
        if request.headers.get(app_origin.VIA_HEADER) != "apps":
            abort(404)
        if app_origin.job_of_host(request.headers.get("Host", "")) != job_id:
            abort(404)  # another session's host, or a made-up one
        method = request.headers.get("X-Original-Method", "GET")
        if not app_origin.browser_may_send(method, request.headers, app_origin.session_origin(job_id)):
            abort(403, description="Cross-origin request refused: a session answers only its own pages.")
        key = app_origin.login_of_cookie(job_id)
        target = authorise_proxy(job_id, key, lambda: user_of_login(key) if key else None)
    else:
        target = authorise_proxy(job_id, login_key_of_request(), current_user)
    resp = Response(status=200)
    # Only what nginx uses (never the session secret itself): the proven endpoint of the session's front, the
    # front's key, and the Cookie header the app gets (none of Carme's cookies; "" drops the header).
    resp.headers["X-Carme-Upstream"] = f"{target.endpoint.host}:{target.endpoint.port}"
    resp.headers["X-Carme-Front"] = target.headers.get(FRONT_HEADER, "")
    resp.headers["X-Carme-Cookie"] = app_origin.upstream_cookies(request.headers.get("Cookie", ""))
    resp.headers["Cache-Control"] = "no-store"
    return resp


@bp.route("/app-enter")
def app_enter() -> Response:
    """``<session origin>/.carme/enter``: bind the browser, then trade its Connect ticket for the apps cookie.

    nginx passes only the apps' origin here (the portal's own server block answers 404 for this path). Without a
    ticket: a fresh bind cookie, and back to the portal's Connect with its hash. With one: redeemed only with the
    bind cookie of the browser that asked for it (``webui.sessions.app_origin``).
    """
    if not app_origin.enabled() or request.headers.get(app_origin.VIA_HEADER) != "apps":
        abort(404)
    raw_job = request.args.get("job", "")
    if not JOB_ID.fullmatch(raw_job):
        abort(400, description="job: not a job id")
    job_id = int(raw_job)
    if app_origin.job_of_host(request.headers.get("Host", "")) != job_id:
        abort(404)
    ticket = request.args.get("ticket", "")
    if not ticket:
        nonce = app_origin.new_bind_nonce()
        resp = redirect_to_portal(f"/sessions/{job_id}/connect?bind={app_origin.bind_hash(nonce)}")
        resp.set_cookie(app_origin.BIND_COOKIE, nonce, **app_origin.cookie_kwargs(app_origin.BIND_SECONDS))
        return resp
    nonce = request.cookies.get(app_origin.BIND_COOKIE, "")
    if not nonce:
        abort(
            403,
            description="This link was made for another browser: open the session from your own dashboard "
            "(or allow cookies for this site).",
        )
    login_id = app_origin.redeem_ticket(ticket, job_id, nonce)
    if login_id is None:
        # Used, expired, forged or another browser's: back to the portal, whose Connect link checks the owner first.
        return redirect_to_portal(f"/sessions/{job_id}/connect")
    resp = Response(status=302)
    resp.headers["Location"] = proxy_path(job_id)
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["Referrer-Policy"] = "no-referrer"
    resp.set_cookie(app_origin.COOKIE_NAME, app_origin.cookie_value(login_id, job_id), **app_origin.cookie_kwargs())
    resp.delete_cookie(app_origin.BIND_COOKIE, path="/", secure=True, httponly=True, samesite="Lax")
    return resp


def redirect_to_portal(path: str) -> Response:
    resp = Response(status=302)
    resp.headers["Location"] = str(current_app.config.get("PORTAL_URL") or "").rstrip("/") + path
    resp.headers["Cache-Control"] = "no-store"
    return resp
