# SPDX-License-Identifier: GPL-3.0-or-later
"""Failed login attempts: a lock per user and address, a limit per user, a growing backoff.

Why these numbers (settings.py has the defaults):

* LOGIN_MAX_FAILURES (10) failures of one user from one address within LOGIN_LOCKOUT_SECONDS (900) refuse that
  address for that user for 900 s after the last one. Someone guessing from one address gets at most 40 tries an
  hour, and locks out only themselves: the user from any other address is not affected.
* LOGIN_USER_MAX_FAILURES (15) failures of one user from all addresses within LOGIN_USER_WINDOW_SECONDS (900)
  (sliding) refuse every address the user has not logged in from in LOGIN_TRUSTED_SOURCE_DAYS (30), until the
  count drops below 15. That bounds a guesser with many addresses to 15 tries per 15 minutes (about 1,400 a day,
  and a TOTP code is still needed). The directory has no account lockout that others could trigger: it takes
  users' password binds only from the portal and login hosts (ldap_server_password_auth_peers, docs/identity.md).
  The user's own computers (addresses of a recent full login) are never refused by it.
* Failed attempts never end a user's open logins.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass

from flask import current_app
from sqlalchemy import delete
from sqlalchemy import select

from webui.extensions import db
from webui.models import AuditLog
from webui.models import LoginAttempt
from webui.models import User
from webui.models import utcnow

LOCKED_MESSAGE = "Too many failed attempts. Try again in {seconds} seconds."
USER_LIMIT_MESSAGE = (
    "Too many failed attempts for this account from several addresses. Try again in {seconds} seconds, "
    "or from a computer you have logged in from before."
)


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


def unlock(user: User) -> None:
    """Forget every failed attempt of ``user`` and the lock shown to admins (admin or CLI unlock); the caller audits
    and commits."""
    user.failed_logins = 0
    user.locked_until = None
    db.session.execute(delete(LoginAttempt).where(LoginAttempt.username == user.username, LoginAttempt.ok.is_(False)))


def pad_response(started: float) -> None:
    """Make failed attempts take a similar time whatever failed (name, password, TOTP)."""
    floor = float(current_app.config["LOGIN_MIN_RESPONSE_SECONDS"])
    spent = time.monotonic() - started
    if spent < floor:
        time.sleep(floor - spent)
