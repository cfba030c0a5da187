"""Login state, role checks, lockout bookkeeping, TOTP and the audit log."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import hmac
import math
import re
import secrets
import time
import warnings
from collections.abc import Callable
from collections.abc import Mapping
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
from sqlalchemy import delete
from sqlalchemy import select
from sqlalchemy import update
from werkzeug.exceptions import BadRequest

from webui.extensions import db
from webui.ldapauth import LdapUnavailable
from webui.ldapauth import _server as ldap_server
from webui.ldapauth import close as close_ldap
from webui.ldapauth import group_names
from webui.models import AuditLog
from webui.models import Login
from webui.models import LoginAttempt
from webui.models import User
from webui.models import utcnow

with warnings.catch_warnings():  # as in webui.ldapauth: ldap3 imports names pyasn1 >= 0.6 deprecates
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"ldap3(\.|$)")
    warnings.filterwarnings("ignore", r".*(tagMap|typeMap) is deprecated", DeprecationWarning)
    import ldap3  # type: ignore[import-untyped]
    from ldap3.core.exceptions import LDAPException  # type: ignore[import-untyped]
    from ldap3.utils.conv import escape_filter_chars  # type: ignore[import-untyped]
    from ldap3.utils.dn import escape_rdn  # type: ignore[import-untyped]

P = ParamSpec("P")
R = TypeVar("R")


LOCKED_MESSAGE = "Too many failed attempts. Try again in {seconds} seconds."
USER_LIMIT_MESSAGE = (
    "Too many failed attempts for this account from several addresses. Try again in {seconds} seconds, "
    "or from a computer you have logged in from before."
)


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


def client_address() -> str:
    """The client's address: nginx appends it to X-Forwarded-For, ProxyFix (PROXY_FIX_HOPS) takes it from there."""
    return (request.remote_addr or "")[:64]


# --- logins (server side) -----------------------------------------------------
#
# The signed cookie holds only ``login``: a random token. The row keyed by its SHA-256 says who is logged in, and
# whether as an admin. Logout deletes the row, so a copied cookie is void at once; the admin flag is read from LDAP
# again every LOGIN_RECHECK_SECONDS, so removing someone from the admin group takes effect within that time.


def login_key(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def start_login(user: User, *, is_admin: bool) -> str:
    """Record a new login of ``user``; returns the token for the cookie (``session["login"]``)."""
    now = utcnow()
    token = secrets.token_urlsafe(32)
    db.session.execute(delete(Login).where(Login.expires_at < now))  # expired logins of anyone, cheap (indexed)
    db.session.add(
        Login(
            id=login_key(token),
            username=user.username,
            session_version=user.session_version,
            is_admin=is_admin,
            checked_at=now,
            created_at=now,
            expires_at=now + current_app.permanent_session_lifetime,
            source=client_address(),
        )
    )
    return token


def end_login() -> None:
    """Revoke the login of this request's cookie (if any); the caller commits."""
    token = session.get("login")
    if isinstance(token, str):
        db.session.execute(delete(Login).where(Login.id == login_key(token)))
    g.carme_user = None


# What every logged-in request checks, read fresh from the database each time: one row, no ORM object, and a
# statement built once. A bumped session_version (TOTP reset) ends every older login too.
_LOGIN_STATE = (
    select(
        Login.username,
        Login.session_version,
        Login.is_admin,
        Login.checked_at,
        Login.expires_at,
        User.session_version.label("user_version"),
    )
    .join(User, User.username == Login.username)
    .where(Login.id == bindparam("key"))
)


def _login_state(key: str) -> Any:
    """The row of ``_LOGIN_STATE``, read in the request's transaction as ``db.session.execute`` would (pending changes
    flushed first), but run on its connection: the ORM's execution layer doubled the cost of this query, which every
    logged-in request and every proxied app request makes."""
    sess = db.session()
    if sess.autoflush:
        sess.flush()  # what ORM execution's autoflush does; nothing to do (and cheap) when nothing is pending
    return sess.connection().execute(_LOGIN_STATE, {"key": key}).one_or_none()


def current_user() -> CurrentUser | None:
    """The fully logged-in user (password and TOTP, login not revoked), or None."""
    if "carme_user" in g:
        cached: CurrentUser | None = g.carme_user
        return cached
    result: CurrentUser | None = None
    token = session.get("login")
    if isinstance(token, str) and len(token) <= 128:
        result = user_of_login(login_key(token))
    if result is None and session.get("login") is not None:
        session.clear()
    g.carme_user = result
    return result


def login_key_of_request() -> str | None:
    """The key (SHA-256) of the login this request's portal cookie carries, or None."""
    token = session.get("login")
    return login_key(token) if isinstance(token, str) and len(token) <= 128 else None


def user_of_login(key: str) -> CurrentUser | None:
    """Who the login with this key is, if it is still valid (not revoked, not expired, TOTP not reset)."""
    row = _login_state(key)
    now = utcnow()
    if row is None or row.session_version != row.user_version or row.expires_at <= now:
        return None
    is_admin: bool | None = row.is_admin
    if (now - row.checked_at).total_seconds() >= float(current_app.config["LOGIN_RECHECK_SECONDS"]):
        is_admin = _recheck(key, row.username, now)
    return None if is_admin is None else CurrentUser(username=row.username, is_admin=is_admin)


def _recheck(key: str, username: str, now: dt.datetime) -> bool | None:
    """Read the user's groups from LDAP again: the new admin flag, or None when the login must end.

    LDAP unreachable (or no groups readable): no admin rights until the next check (fail closed), the login goes on.
    """
    cfg = current_app.config
    try:
        groups: frozenset[str] | None = directory_groups(cfg, username)
    except LdapUnavailable as exc:
        current_app.logger.warning("group recheck for %s: LDAP unavailable: %s", username, exc)
        groups = None
    if not groups:
        # No group at all: more likely a directory that hides groups from this bind (set LDAP_BIND_DN) than a user
        # without any; treated like LDAP being down rather than as a removal from LDAP_USER_GROUP.
        current_app.logger.warning("group recheck for %s: no groups readable (LDAP_BIND_DN?)", username)
        groups = None
    required = cfg.get("LDAP_USER_GROUP")
    if groups is not None and required and required not in groups:
        db.session.execute(delete(Login).where(Login.id == key))
        db.session.add(AuditLog(actor="-", action="login.ended", target=username, details={"why": "group"}, time=now))
        db.session.commit()
        return None
    is_admin = groups is not None and str(cfg["LDAP_ADMIN_GROUP"]) in groups
    values = {"is_admin": is_admin, "checked_at": now, "expires_at": now + current_app.permanent_session_lifetime}
    db.session.execute(update(Login).where(Login.id == key).values(**values))
    db.session.commit()
    return is_admin


def directory_groups(config: Mapping[str, Any], username: str) -> frozenset[str]:
    """The user's groups, read without the user's password: bound as LDAP_BIND_DN, or anonymously when unset."""
    bind_dn = config.get("LDAP_BIND_DN") or None
    conn = ldap3.Connection(
        ldap_server(config),
        user=bind_dn,
        password=config.get("LDAP_BIND_PASSWORD") if bind_dn else None,
        auto_bind=ldap3.AUTO_BIND_NONE,
        receive_timeout=int(config["LDAP_TIMEOUT_SECONDS"]),
        raise_exceptions=False,
        read_only=True,
    )
    dn = str(config["LDAP_USER_DN_TEMPLATE"]).format(username=escape_rdn(username))
    search_filter = str(config["LDAP_GROUP_FILTER"]).format(
        username=escape_filter_chars(username), dn=escape_filter_chars(dn)
    )
    try:
        try:
            conn.open()
            if config["LDAP_START_TLS"] and not conn.start_tls():
                raise LdapUnavailable("StartTLS failed")
            if not conn.bind():
                raise LdapUnavailable(f"bind failed: {conn.result.get('description') if conn.result else '?'}")
            if not conn.search(str(config["LDAP_GROUP_BASE"]), search_filter, attributes=["cn"]):
                if conn.result and conn.result.get("result") not in (0, 32):  # success, noSuchObject
                    raise LdapUnavailable(f"search failed: {conn.result.get('description')}")
                return frozenset()
        except LDAPException as exc:
            raise LdapUnavailable(str(exc)) from exc
        return group_names(conn.response)
    finally:
        close_ldap(conn)


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


# --- failed attempts: per (user, address) lock, per-user limit, backoff ----------------------------------------
#
# Why these numbers (settings.py has the defaults):
# * LOGIN_MAX_FAILURES (10) failures of one user from one address within LOGIN_LOCKOUT_SECONDS (900) refuse that
#   address for that user for 900 s after the last one. Someone guessing from one address gets at most 40 tries an
#   hour, and locks out only themselves: the user from any other address is not affected.
# * LOGIN_USER_MAX_FAILURES (15) failures of one user from all addresses within LOGIN_USER_WINDOW_SECONDS (900)
#   (sliding) refuse every address the user has not logged in from in LOGIN_TRUSTED_SOURCE_DAYS (30), until the
#   count drops below 15. That bounds a guesser with many addresses to 15 tries per 15 minutes (about 1,400 a day,
#   and a TOTP code is still needed). The directory has no account lockout that others could trigger: it takes
#   users' password binds only from the portal and login hosts (ldap_server_password_auth_peers, docs/identity.md).
#   The user's own computers (addresses of a recent full login) are never refused by it.
# * Failed attempts never end a user's open logins.


def _failures(username: str, now: dt.datetime) -> list[tuple[str, dt.datetime]]:
    cfg = current_app.config
    horizon = max(int(cfg["LOGIN_LOCKOUT_SECONDS"]), int(cfg["LOGIN_USER_WINDOW_SECONDS"]))
    rows = db.session.execute(
        select(LoginAttempt.source, LoginAttempt.time).where(
            LoginAttempt.username == username,
            LoginAttempt.ok.is_(False),
            LoginAttempt.time > now - dt.timedelta(seconds=horizon),
        )
    )
    return [(r.source, r.time) for r in rows]


def trusted_source(username: str, source: str, now: dt.datetime | None = None) -> bool:
    """The user completed a login from this address within LOGIN_TRUSTED_SOURCE_DAYS."""
    now = now or utcnow()
    since = now - dt.timedelta(days=float(current_app.config["LOGIN_TRUSTED_SOURCE_DAYS"]))
    found = db.session.execute(
        select(LoginAttempt.id)
        .where(
            LoginAttempt.username == username,
            LoginAttempt.source == source,
            LoginAttempt.ok.is_(True),
            LoginAttempt.time > since,
        )
        .limit(1)
    ).first()
    return found is not None


@dataclass(frozen=True)
class Refusal:
    """An attempt refused before LDAP is asked: ``kind`` is locked (this address), backoff or limited (the user)."""

    kind: str
    seconds: int

    @property
    def message(self) -> str:
        template = USER_LIMIT_MESSAGE if self.kind == "limited" else LOCKED_MESSAGE
        return template.format(seconds=self.seconds)


def _seconds(delta: dt.timedelta) -> int:
    return max(1, math.ceil(delta.total_seconds()))


def login_refusal(
    username: str, source: str, *, backoff: bool = True, now: dt.datetime | None = None
) -> Refusal | None:
    """Why an attempt for ``username`` from ``source`` is refused now (answered with a 429), or None."""
    cfg = current_app.config
    now = now or utcnow()
    failures = _failures(username, now)
    lockout = dt.timedelta(seconds=int(cfg["LOGIN_LOCKOUT_SECONDS"]))
    mine = sorted(t for s, t in failures if s == source and t > now - lockout)
    if len(mine) >= int(cfg["LOGIN_MAX_FAILURES"]):
        return Refusal("locked", _seconds(mine[-1] + lockout - now))
    if backoff and len(mine) >= 3:
        delay = min(
            float(cfg["LOGIN_BACKOFF_BASE_SECONDS"]) * 2.0 ** (len(mine) - 3),
            float(cfg["LOGIN_BACKOFF_MAX_SECONDS"]),
        )
        wait = delay - (now - mine[-1]).total_seconds()
        if wait > 0:
            return Refusal("backoff", math.ceil(wait))
    window = dt.timedelta(seconds=int(cfg["LOGIN_USER_WINDOW_SECONDS"]))
    everyone = sorted(t for _, t in failures if t > now - window)
    limit = int(cfg["LOGIN_USER_MAX_FAILURES"])
    if len(everyone) >= limit and not trusted_source(username, source, now):
        return Refusal("limited", _seconds(everyone[-limit] + window - now))
    return None


def record_failure(user: User, source: str) -> Refusal | None:
    """Count a wrong password or code; returns the refusal when this failure locked ``source`` out."""
    now = utcnow()
    cfg = current_app.config
    horizon = max(int(cfg["LOGIN_LOCKOUT_SECONDS"]), int(cfg["LOGIN_USER_WINDOW_SECONDS"]))
    db.session.execute(  # this user's failures that no longer count
        delete(LoginAttempt).where(
            LoginAttempt.username == user.username,
            LoginAttempt.ok.is_(False),
            LoginAttempt.time <= now - dt.timedelta(seconds=horizon),
        )
    )
    db.session.add(LoginAttempt(username=user.username, source=source, ok=False, time=now))
    db.session.flush()
    user.last_failure_at = now
    refusal = login_refusal(user.username, source, backoff=False, now=now)
    if refusal is not None:
        # Shown to admins (users page); the lock itself is the attempts' table, it ends no login.
        user.locked_until = now + dt.timedelta(seconds=refusal.seconds)
        action = "login.locked" if refusal.kind == "locked" else "login.limited"
        db.session.add(AuditLog(actor="-", action=action, target=user.username, details={"source": source}, time=now))
    return refusal


def record_success(user: User, source: str) -> None:
    """A full login (password and TOTP) from ``source``: its failures are forgiven, the address is trusted."""
    now = utcnow()
    since = now - dt.timedelta(days=float(current_app.config["LOGIN_TRUSTED_SOURCE_DAYS"]))
    db.session.execute(
        delete(LoginAttempt).where(
            LoginAttempt.username == user.username,
            (LoginAttempt.source == source) | (LoginAttempt.ok.is_(True) & (LoginAttempt.time <= since)),
        )
    )
    db.session.add(LoginAttempt(username=user.username, source=source, ok=True, time=now))
    user.failed_logins = 0
    user.last_login_at = now


def clear_failures(username: str) -> None:
    """Forget every failed attempt of ``username`` (admin or CLI unlock); the caller commits."""
    db.session.execute(delete(LoginAttempt).where(LoginAttempt.username == username, LoginAttempt.ok.is_(False)))


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
