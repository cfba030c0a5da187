# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's login cookie (``__Host-carme_session``): Flask's signed-cookie session, which carries the login token
(:mod:`webui.auth.logins`) and the CSRF token, re-signed only when it changed or when its cookie is getting old.

Flask re-issues a permanent session's cookie on every response (``SESSION_REFRESH_EACH_REQUEST``) so that its
lifetime slides with the user's activity. Serialising, compressing and signing it was about a tenth of a dashboard
request's CPU time, and the dashboard reloads itself every 15 seconds. Here an unchanged session is re-issued only
when the cookie the browser sent was signed more than :data:`REFRESH_AFTER_SECONDS` ago (or a quarter of the
lifetime, if that is shorter): the lifetime still slides with activity, to within that many seconds. Everything
else (what is signed, with which key and salt, the expiry check, the cookie flags) is Flask's.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from flask import Flask
from flask import Request
from flask.sessions import SecureCookieSession
from flask.sessions import SecureCookieSessionInterface
from flask.sessions import SessionMixin
from itsdangerous import BadSignature
from itsdangerous import URLSafeTimedSerializer

REFRESH_AFTER_SECONDS = 60.0


class SignedAtSession(SecureCookieSession):
    """A cookie session that remembers when the cookie it came from was signed (None: new, or not from a cookie)."""

    signed_at: dt.datetime | None = None


class SlidingSessionInterface(SecureCookieSessionInterface):
    session_class = SignedAtSession

    def __init__(self) -> None:
        self._serializer: tuple[tuple[Any, ...], URLSafeTimedSerializer] | None = None

    def get_signing_serializer(self, app: Flask) -> URLSafeTimedSerializer | None:
        """Flask's serializer, built once per key set instead of twice per request."""
        if not app.secret_key:
            return None
        key = (app.secret_key, tuple(app.config["SECRET_KEY_FALLBACKS"] or ()))
        cached = self._serializer
        if cached is not None and cached[0] == key:
            return cached[1]
        serializer = super().get_signing_serializer(app)
        assert serializer is not None
        self._serializer = (key, serializer)  # one tuple: a thread sees the old pair or the new one
        return serializer

    def open_session(self, app: Flask, request: Request) -> SignedAtSession | None:
        s = self.get_signing_serializer(app)
        if s is None:
            return None
        val = request.cookies.get(self.get_cookie_name(app))
        if not val:
            return self.session_class()
        max_age = int(app.permanent_session_lifetime.total_seconds())
        try:
            data, signed_at = s.loads(val, max_age=max_age, return_timestamp=True)
        except BadSignature:
            return self.session_class()
        session = self.session_class(data)
        session.signed_at = signed_at
        return session

    def should_set_cookie(self, app: Flask, session: SessionMixin) -> bool:
        if session.modified:
            return True
        if not (session.permanent and app.config["SESSION_REFRESH_EACH_REQUEST"]):
            return False
        if not isinstance(session, SignedAtSession) or session.signed_at is None:
            return True
        refresh_after = min(REFRESH_AFTER_SECONDS, app.permanent_session_lifetime.total_seconds() / 4)
        return (dt.datetime.now(dt.UTC) - session.signed_at).total_seconds() >= refresh_after
