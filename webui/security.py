"""Login state, role checks, lockout bookkeeping, TOTP and the audit log."""

from __future__ import annotations

import datetime as dt
import functools
import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from typing import ParamSpec
from typing import TypeVar

import pyotp
import segno
from flask import abort
from flask import current_app
from flask import g
from flask import redirect
from flask import request
from flask import session
from flask import url_for
from sqlalchemy import bindparam
from sqlalchemy import select
from werkzeug.exceptions import BadRequest

from webui.extensions import db
from webui.models import AuditLog
from webui.models import User
from webui.models import utcnow

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class CurrentUser:
    username: str
    is_admin: bool


def valid_username(name: str) -> bool:
    return bool(re.fullmatch(str(current_app.config["USERNAME_PATTERN"]), name))


def get_user(username: str, *, create: bool = False) -> User | None:
    user = db.session.execute(select(User).where(User.username == username)).scalar_one_or_none()
    if user is None and create:
        user = User(username=username, totp_confirmed=False, totp_last_step=0, failed_logins=0, session_version=1)
        db.session.add(user)
        db.session.flush()
    return user


# What every logged-in request checks, read fresh from the database each time (a bumped session_version or a
# lock ends open sessions at once): two columns, no ORM object, and a statement built once.
_LOGIN_STATE = select(User.session_version, User.locked_until).where(User.username == bindparam("username"))


def current_user() -> CurrentUser | None:
    """The fully logged-in user (password and TOTP), or None."""
    if "carme_user" in g:
        cached: CurrentUser | None = g.carme_user
        return cached
    result: CurrentUser | None = None
    name = session.get("user")
    if isinstance(name, str):
        row = db.session.execute(_LOGIN_STATE, {"username": name}).one_or_none()
        if row is not None and row.session_version == session.get("ver") and not _locked(row.locked_until):
            result = CurrentUser(username=name, is_admin=bool(session.get("admin")))
        else:
            session.clear()
    g.carme_user = result
    return result


def login_required(view: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(view)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        if current_user() is None:
            if request.blueprint == "api" or request.accept_mimetypes.best == "application/json":
                abort(401)
            return redirect(url_for("auth.login", next=request.full_path))  # type: ignore[return-value]
        return view(*args, **kwargs)

    return wrapped


def admin_required(view: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(view)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        user = current_user()
        if user is None:
            return redirect(url_for("auth.login", next=request.full_path))  # type: ignore[return-value]
        if not user.is_admin:
            abort(403)
        return view(*args, **kwargs)

    return wrapped


def audit(action: str, target: str = "", **details: Any) -> None:
    """Record an action by the current user; committed with the caller's transaction."""
    user = current_user()
    actor = user.username if user else "-"
    db.session.add(AuditLog(actor=actor, action=action, target=target, details=details, time=utcnow()))


# --- lockout and backoff ----------------------------------------------------


def is_locked(user: User, now: dt.datetime | None = None) -> bool:
    return _locked(user.locked_until, now)


def _locked(locked_until: dt.datetime | None, now: dt.datetime | None = None) -> bool:
    return locked_until is not None and locked_until > (now or utcnow())


def backoff_remaining(user: User, now: dt.datetime | None = None) -> float:
    """Seconds before the next attempt is accepted (grows with failures)."""
    now = now or utcnow()
    if is_locked(user, now):
        assert user.locked_until is not None
        remaining: float = (user.locked_until - now).total_seconds()
        return remaining
    if user.failed_logins < 3 or user.last_failure_at is None:
        return 0.0
    cfg = current_app.config
    delay = min(
        float(cfg["LOGIN_BACKOFF_BASE_SECONDS"]) * 2.0 ** (user.failed_logins - 3),
        float(cfg["LOGIN_BACKOFF_MAX_SECONDS"]),
    )
    waited = (now - user.last_failure_at).total_seconds()
    return max(0.0, delay - waited)


def record_failure(user: User) -> None:
    cfg = current_app.config
    now = utcnow()
    user.failed_logins += 1
    user.last_failure_at = now
    if user.failed_logins >= int(cfg["LOGIN_MAX_FAILURES"]):
        user.locked_until = now + dt.timedelta(seconds=int(cfg["LOGIN_LOCKOUT_SECONDS"]))
        user.failed_logins = 0
        user.session_version += 1  # a locked account loses its open sessions too
        db.session.add(AuditLog(actor="-", action="login.locked", target=user.username, details={}, time=now))


def record_success(user: User) -> None:
    user.failed_logins = 0
    user.last_failure_at = None
    user.locked_until = None
    user.last_login_at = utcnow()


def pad_response(started: float) -> None:
    """Make failed attempts take a similar time whatever failed (name, password, TOTP)."""
    floor = float(current_app.config["LOGIN_MIN_RESPONSE_SECONDS"])
    spent = time.monotonic() - started
    if spent < floor:
        time.sleep(floor - spent)


# --- TOTP -------------------------------------------------------------------


def totp_for(user: User) -> pyotp.TOTP:
    if not user.totp_secret:
        raise BadRequest("TOTP is not set up for this account")
    return pyotp.TOTP(user.totp_secret, issuer=str(current_app.config["TOTP_ISSUER"]))


def verify_totp(user: User, code: str, now: float | None = None) -> str | None:
    """Check a code; on success store its time step. Returns an error text or None.

    A code whose step is not newer than the last accepted one is refused, so a
    code seen once (shoulder, proxy log, phishing relay) cannot be used again.
    """
    code = code.strip().replace(" ", "")
    if not re.fullmatch(r"\d{6}", code):
        return "The code must be 6 digits."
    totp = totp_for(user)
    now = time.time() if now is None else now
    window = int(current_app.config["TOTP_VALID_WINDOW"])
    matched: int | None = None
    for offset in range(-window, window + 1):
        at = now + offset * totp.interval
        if hmac.compare_digest(totp.at(int(at)), code):
            matched = int(at // totp.interval)
    if matched is None:
        return "Wrong code."
    if matched <= user.totp_last_step:
        return "This code was already used; wait for the next one."
    user.totp_last_step = matched
    return None


def new_totp_secret() -> str:
    return pyotp.random_base32()


def provisioning_svg(user: User) -> str:
    uri = totp_for(user).provisioning_uri(name=user.username, issuer_name=str(current_app.config["TOTP_ISSUER"]))
    qr = segno.make(uri, error="m")
    svg: str = qr.svg_inline(scale=4, border=2, dark="#000", light="#fff", omitsize=False)
    return svg
