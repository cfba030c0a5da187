# SPDX-License-Identifier: GPL-3.0-or-later
"""Who is logged in: the server-side login behind the portal cookie, and the user it names.

The signed cookie (:mod:`webui.auth.login_cookie`) holds only ``login``: a random token. The row keyed by its SHA-256
says who is logged in, and whether as an admin. Logout deletes the row, so a copied cookie is void at once; the admin
flag is read from LDAP again every LOGIN_RECHECK_SECONDS, so removing someone from the admin group takes effect within
that time.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from flask import current_app
from flask import g
from flask import request
from flask import session
from sqlalchemy import bindparam
from sqlalchemy import delete
from sqlalchemy import select
from sqlalchemy import update
from sqlalchemy.exc import OperationalError

from webui.auth.ldap import LdapUnavailable
from webui.auth.ldap import directory_groups
from webui.extensions import db
from webui.models import AuditLog
from webui.models import Login
from webui.models import User
from webui.models import utcnow
from webui.tokens import new_token
from webui.tokens import token_hash


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


def login_key(token: str) -> str:
    """The key of the login row of the cookie's token: its SHA-256 (the token itself is never stored)."""
    return token_hash(token)


def start_login(user: User, *, is_admin: bool) -> str:
    """Record a new login of ``user``; returns the token for the cookie (``session["login"]``)."""
    now = utcnow()
    token = new_token()
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


def logged_in() -> CurrentUser:
    """The user of a view behind ``login_required`` (which has checked there is one)."""
    user = current_user()
    assert user is not None
    return user


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
    # the write below in a transaction of its own: MariaDB 11.8 (innodb_snapshot_isolation) refuses to change a row
    # that another request changed after this transaction first read it (error 1020), as two requests of one login
    # that recheck at once would
    db.session.rollback()
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
        ended = AuditLog(actor="-", action="login.ended", target=username, details={"why": "group"}, time=now)
        _write_recheck(username, delete(Login).where(Login.id == key), ended)
        return None
    is_admin = groups is not None and str(cfg["LDAP_ADMIN_GROUP"]) in groups
    values = {"is_admin": is_admin, "checked_at": now, "expires_at": now + current_app.permanent_session_lifetime}
    _write_recheck(username, update(Login).where(Login.id == key).values(**values))
    return is_admin


def _write_recheck(username: str, statement: Any, audit: AuditLog | None = None) -> None:
    """Write a recheck's outcome; a conflict with another request of the same login, which rechecked at the same
    moment and wrote the same, is not this request's failure (it goes on with what it read from LDAP)."""
    try:
        db.session.execute(statement)
        if audit is not None:
            db.session.add(audit)
        db.session.commit()
    except OperationalError as exc:
        db.session.rollback()
        current_app.logger.info("group recheck for %s: written by another request meanwhile (%s)", username, exc.orig)
