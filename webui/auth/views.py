# SPDX-License-Identifier: GPL-3.0-or-later
"""Login: LDAP password, then TOTP (enrolment at first login); logout. The ``auth`` blueprint (``/auth``)."""

from __future__ import annotations

import time
import unicodedata
from typing import Any
from urllib.parse import unquote
from urllib.parse import urlsplit

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
from webui.auth.ldap import LdapUnavailable
from webui.auth.ldap import authenticate
from webui.auth.lockout import login_refusal
from webui.auth.lockout import pad_response
from webui.auth.lockout import record_failure
from webui.auth.lockout import record_success
from webui.auth.logins import client_address
from webui.auth.logins import end_login
from webui.auth.logins import get_user
from webui.auth.logins import start_login
from webui.auth.logins import valid_username
from webui.auth.totp import new_totp_secret
from webui.auth.totp import provisioning_svg
from webui.auth.totp import verify_totp
from webui.extensions import db
from webui.models import AuditLog
from webui.models import utcnow

bp = Blueprint("auth", __name__, url_prefix="/auth")


NEXT_MAX_LENGTH = 512  # a local path; anything longer is not one we made (and would bloat the cookie and headers)


def _local_path(target: str) -> bool:
    """One form of ``next``: a path on this site, nothing a browser could read as another host or a new header."""
    if not target.startswith("/") or target.startswith(("//", "/\\")) or "\\" in target:
        return False
    if any(c.isspace() or unicodedata.category(c).startswith("C") for c in target):
        return False  # browsers drop tabs and newlines ("/\t/evil" is "//evil"); CR/LF would split the header
    parts = urlsplit(target)
    return not parts.scheme and not parts.netloc


def clean_next(target: str | None) -> str:
    """``target`` if it is a local path (also once and twice percent-decoded), else ``""``."""
    if not target or len(target) > NEXT_MAX_LENGTH:
        return ""
    decoded = target
    for _ in range(3):  # the raw value and its decodings (%2509 -> %09 -> tab) must all be local paths
        if not _local_path(decoded):
            return ""
        decoded = unquote(decoded)
    return target


def _safe_next(target: str | None) -> str:
    return clean_next(target) or url_for("dashboard.index")


def _refuse(template: str, message: str, status: int, started: float, **ctx: Any) -> tuple[str, int]:
    db.session.commit()
    pad_response(started)
    return render_template(template, error=message, **ctx), status


@bp.route("/login", methods=["GET", "POST"])
def login() -> Any:
    if request.method == "GET":
        return render_template("auth/login.html", next=clean_next(request.args.get("next")))
    started = time.monotonic()
    username = forms.text(request.form, "username", max_len=64)
    password = forms.text(request.form, "password", max_len=1024)
    next_url = clean_next(request.form.get("next"))
    if not valid_username(username):
        raise forms.FieldError("username", "is not a valid user name")
    source = client_address()
    user = get_user(username, create=True)
    assert user is not None
    refusal = login_refusal(username, source)
    if refusal is not None:
        return _refuse("auth/login.html", refusal.message, 429, started, next=next_url, username=username)
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
        refusal = record_failure(user, source)
        if refusal is not None:
            return _refuse("auth/login.html", refusal.message, 429, started, next=next_url, username=username)
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
    source = client_address()
    user = get_user(str(pending["user"]))
    refusal = login_refusal(user.username, source, backoff=False) if user is not None else None
    if user is None or refusal is not None:
        session.clear()
        flash(refusal.message if refusal is not None else "Please log in again.")
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
    refusal = login_refusal(user.username, source)
    if refusal is not None:
        return _refuse(template, refusal.message, 429, started, **ctx)
    error = verify_totp(user, code)
    if error is not None:
        refusal = record_failure(user, source)
        if refusal is not None:
            session.clear()
            flash(refusal.message)
            db.session.commit()
            pad_response(started)
            return redirect(url_for("auth.login"))
        return _refuse(template, error, 401, started, **ctx)
    if enrolling:
        user.totp_confirmed = True
        db.session.add(
            AuditLog(actor=user.username, action="totp.enrol", target=user.username, details={}, time=utcnow())
        )
    record_success(user, source)
    next_url = _safe_next(str(pending.get("next") or ""))
    token = start_login(user, is_admin=bool(pending.get("admin")))
    db.session.commit()
    session.clear()
    session.permanent = True
    session["login"] = token
    return redirect(next_url)


@bp.route("/logout", methods=["POST"])
def logout() -> Response:
    end_login()  # the login is void for every copy of the cookie, not just this browser's
    db.session.commit()
    session.clear()
    flash("You are logged out.")
    return redirect(url_for("auth.login"))
