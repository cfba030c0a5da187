"""The apps' own origin: sessions are served from ``APPS_ORIGIN``, never from the portal's.

A page or a notebook output in a user's app is the user's code. On the portal's origin it could read the portal's
pages and call its API with the user's cookie (start and stop sessions, read secrets). Served from another origin
(another port, or another host name such as ``apps.portal.example``), the browser's same-origin policy keeps it
from reading anything of the portal, and the portal refuses cross-site requests outright (``webui.fetch_metadata``).

The portal's login cookie does not exist on the apps' origin (a host-only cookie of another host; on the demo, where
only the port differs, nginx removes it before anything is passed on). What authorises ``/proxy/<job>/`` there is
an apps cookie, per session:

1. Connect (``/sessions/<job>/connect`` on the portal, owner and readiness checked) records a one-time ticket bound
   to the login and the job, and redirects to ``<APPS_ORIGIN>/.carme/enter?job=<job>&ticket=<ticket>``.
2. nginx passes ``/.carme/enter`` to ``/api/app-enter`` (from the portal's own server block that path is a 404). The
   ticket is used up (the row is deleted), and the answer sets ``carme_app`` with ``Path=/proxy/<job>/``: signed
   with ``SECRET_KEY``, it names the login's key and the job, and is sent only for that session's paths.
3. nginx's ``auth_request`` on the apps' origin passes the cookie to ``/api/proxy-auth``, which accepts it only for
   the job it names and only while the login it names is valid: logging out of the portal ends it too.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from typing import Any
from urllib.parse import urlencode

from flask import current_app
from flask import request
from itsdangerous import BadSignature
from itsdangerous import URLSafeTimedSerializer
from sqlalchemy import delete
from sqlalchemy import select

from webui.extensions import db
from webui.models import AppTicket
from webui.models import utcnow

COOKIE_NAME = "carme_app"
_COOKIE_SALT = "carme-app-cookie"
# Set by nginx's apps server block on its auth_request (never by a client: nginx replaces the header there, and the
# portal's block sets it to "portal").
VIA_HEADER = "X-Carme-Via"


def enabled() -> bool:
    return bool(current_app.config.get("APPS_ORIGIN"))


def origin() -> str:
    return str(current_app.config["APPS_ORIGIN"]).rstrip("/")


def _ticket_key(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


def issue_ticket(login_id: str, job_id: int) -> str:
    """Record a one-time ticket for ``job_id`` bound to the login ``login_id``; the caller commits."""
    now = utcnow()
    ticket = secrets.token_urlsafe(32)
    db.session.execute(delete(AppTicket).where(AppTicket.expires_at < now))  # expired ones of anyone (indexed)
    db.session.add(
        AppTicket(
            id=_ticket_key(ticket),
            login_id=login_id,
            job_id=job_id,
            expires_at=now + dt.timedelta(seconds=float(current_app.config["APP_TICKET_SECONDS"])),
        )
    )
    return ticket


def enter_url(job_id: int, ticket: str) -> str:
    return f"{origin()}/.carme/enter?{urlencode({'job': job_id, 'ticket': ticket})}"


def redeem_ticket(ticket: str, job_id: int) -> str | None:
    """Use a ticket up: the login key it was issued to, or None (unknown, used, expired, other job)."""
    if not ticket or len(ticket) > 128:
        return None
    key = _ticket_key(ticket)
    row = db.session.execute(
        select(AppTicket.login_id, AppTicket.job_id, AppTicket.expires_at).where(AppTicket.id == key)
    ).one_or_none()
    if row is None:
        return None
    # Whoever deletes the row used the ticket; a second request racing for it deletes nothing.
    used = db.session.execute(delete(AppTicket).where(AppTicket.id == key))
    db.session.commit()
    if getattr(used, "rowcount", 0) != 1 or row.job_id != job_id or row.expires_at <= utcnow():
        return None
    return str(row.login_id)


def _serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(current_app.secret_key or "", salt=_COOKIE_SALT)


def cookie_value(login_id: str, job_id: int) -> str:
    return str(_serializer().dumps({"login": login_id, "job": job_id}))


def cookie_path(job_id: int) -> str:
    return f"/proxy/{job_id}/"


def cookie_kwargs(job_id: int) -> dict[str, Any]:
    return {
        "path": cookie_path(job_id),
        "secure": bool(current_app.config["SESSION_COOKIE_SECURE"]),
        "httponly": True,
        "samesite": "Lax",
        "max_age": int(current_app.permanent_session_lifetime.total_seconds()),
    }


def login_of_cookie(job_id: int) -> str | None:
    """The login key the request's apps cookie names, if it is genuine and names ``job_id``."""
    raw = request.cookies.get(COOKIE_NAME, "")
    if not raw or len(raw) > 1024:
        return None
    max_age = int(current_app.permanent_session_lifetime.total_seconds())
    try:
        data = _serializer().loads(raw, max_age=max_age)
    except BadSignature:
        return None
    if not isinstance(data, dict) or data.get("job") != job_id or not isinstance(data.get("login"), str):
        return None
    return str(data["login"])
