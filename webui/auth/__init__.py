"""Login: LDAP password, then TOTP (enrolment at first login)."""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint
from flask import current_app
from flask import flash
from flask import redirect
from flask import render_template
from flask import request
from flask import session
from flask import url_for
from werkzeug.wrappers import Response

from webui import forms
from webui.extensions import db
from webui.ldapauth import LdapUnavailable
from webui.ldapauth import authenticate
from webui.models import AuditLog
from webui.models import utcnow
from webui.security import backoff_remaining
from webui.security import get_user
from webui.security import is_locked
from webui.security import new_totp_secret
from webui.security import pad_response
from webui.security import provisioning_svg
from webui.security import record_failure
from webui.security import record_success
from webui.security import valid_username
from webui.security import verify_totp

bp = Blueprint("auth", __name__, url_prefix="/auth")

LOCKED_MESSAGE = "Too many failed attempts. Try again in {seconds} seconds."


def _safe_next(target: str | None) -> str:
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return url_for("dashboard.index")


def _refuse(template: str, message: str, status: int, started: float, **ctx: Any) -> tuple[str, int]:
    db.session.commit()
    pad_response(started)
    return render_template(template, error=message, **ctx), status


@bp.route("/login", methods=["GET", "POST"])
def login() -> Any:
    if request.method == "GET":
        return render_template("auth/login.html", next=request.args.get("next", ""))
    started = time.monotonic()
    username = forms.text(request.form, "username", max_len=64)
    password = forms.text(request.form, "password", max_len=1024)
    next_url = request.form.get("next", "")
    if not valid_username(username):
        raise forms.FieldError("username", "is not a valid user name")
    user = get_user(username, create=True)
    assert user is not None
    wait = backoff_remaining(user)
    if wait > 0:
        message = LOCKED_MESSAGE.format(seconds=int(wait) + 1)
        return _refuse("auth/login.html", message, 429, started, next=next_url, username=username)
    try:
        identity = authenticate(current_app.config, username, password)
    except LdapUnavailable as exc:
        current_app.logger.error("LDAP unavailable: %s", exc)
        db.session.commit()
        return render_template(
            "auth/login.html",
            error="The login service is unavailable right now. Please try again in a minute.",
            next=next_url,
            username=username,
        ), 503
    if identity is None:
        record_failure(user)
        if is_locked(user):
            message = LOCKED_MESSAGE.format(seconds=int(backoff_remaining(user)) + 1)
            return _refuse("auth/login.html", message, 429, started, next=next_url, username=username)
        return _refuse(
            "auth/login.html", "Wrong user name or password.", 401, started, next=next_url, username=username
        )
    session.clear()
    session["pending"] = {"user": username, "admin": identity.is_admin, "at": time.time(), "next": next_url}
    db.session.commit()
    return redirect(url_for("auth.totp"))


def _pending() -> dict[str, Any] | None:
    pending = session.get("pending")
    if not isinstance(pending, dict):
        return None
    if time.time() - float(pending.get("at", 0)) > float(current_app.config["LOGIN_PENDING_SECONDS"]):
        session.pop("pending", None)
        return None
    return pending


@bp.route("/totp", methods=["GET", "POST"])
def totp() -> Any:
    pending = _pending()
    if pending is None:
        flash("Please log in again.")
        return redirect(url_for("auth.login"))
    user = get_user(str(pending["user"]))
    if user is None or is_locked(user):
        session.clear()
        flash("Please log in again.")
        return redirect(url_for("auth.login"))
    enrolling = not user.totp_confirmed
    if enrolling and not user.totp_secret:
        user.totp_secret = new_totp_secret()
        db.session.commit()
    template = "auth/enrol.html" if enrolling else "auth/totp.html"
    ctx: dict[str, Any] = {}
    if enrolling:
        ctx = {"qr_svg": provisioning_svg(user), "secret": user.totp_secret, "username": user.username}
    if request.method == "GET":
        return render_template(template, **ctx)

    started = time.monotonic()
    code = forms.text(request.form, "code", max_len=16)
    wait = backoff_remaining(user)
    if wait > 0:
        return _refuse(template, LOCKED_MESSAGE.format(seconds=int(wait) + 1), 429, started, **ctx)
    error = verify_totp(user, code)
    if error is not None:
        record_failure(user)
        if is_locked(user):
            session.clear()
            flash(LOCKED_MESSAGE.format(seconds=int(backoff_remaining(user)) + 1))
            db.session.commit()
            pad_response(started)
            return redirect(url_for("auth.login"))
        return _refuse(template, error, 401, started, **ctx)
    if enrolling:
        user.totp_confirmed = True
        db.session.add(
            AuditLog(actor=user.username, action="totp.enrol", target=user.username, details={}, time=utcnow())
        )
    record_success(user)
    next_url = _safe_next(str(pending.get("next") or ""))
    session.clear()
    session.permanent = True
    session["user"] = user.username
    session["admin"] = bool(pending.get("admin"))
    session["ver"] = user.session_version
    db.session.commit()
    return redirect(next_url)


@bp.route("/logout", methods=["POST"])
def logout() -> Response:
    session.clear()
    flash("You are logged out.")
    return redirect(url_for("auth.login"))
