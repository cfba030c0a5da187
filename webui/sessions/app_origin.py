# SPDX-License-Identifier: GPL-3.0-or-later
"""An origin per session: each session's app is served from a host of its own, never from the portal's.

A page or a notebook output in a user's app is the user's code (or, if she opened someone else's page there, theirs).
``APPS_ORIGIN`` is a wildcard origin such as ``https://*.apps.cluster.example`` (the demo: ``https://*.apps.localhost:
8444``, which browsers resolve to the loopback address). Session ``J`` lives at ``https://J-<tag>.apps.cluster.example``,
``<tag>`` an HMAC of ``J`` with ``SECRET_KEY`` (:func:`session_label`): an unguessable host name, one per session. So:

* no cookie, storage or script of one session is visible to another session, nor to the portal, which lives on
  another site (the browser's same-origin policy, and host-only cookies);
* Carme's cookies there are ``__Host-`` cookies (no ``Domain``, ``Path=/``, ``Secure``): no other host can set them;
* nginx passes to an app no cookie whose name Carme uses, whatever the Cookie header holds (several copies, odd
  spacing, other case): the portal computes the header the app gets (:func:`upstream_cookies`);
* a request that another origin of the same site or another site makes the browser send is refused, except a
  top-level navigation (:func:`browser_may_send`): bob's app cannot make alice's browser call alice's app.

What authorises ``/proxy/<job>/`` on a session's host is that session's apps cookie. A Connect link works only in the
browser that asked for it:

1. Connect (``/sessions/<job>/connect`` on the portal, owner and readiness checked) sends the browser to
   ``<session origin>/.carme/enter?job=<job>``.
2. There (nginx passes it to ``/api/app-enter``) the browser gets a random ``__Host-carme_bind`` cookie, and goes
   back to ``/sessions/<job>/connect?bind=<SHA-256 of it>``.
3. The portal checks owner and readiness again and records a one-time ticket bound to the login, the job and that
   hash (the row's key is the SHA-256 of ticket and hash), then sends the browser to ``/.carme/enter?ticket=...``.
4. ``/.carme/enter`` redeems the ticket only with the bind cookie that the same browser got in step 2, and sets
   ``__Host-carme_app``: signed with ``SECRET_KEY``, naming the login's key and the job.

A ticket copied into another browser finds no bind cookie there (or another one): it does nothing. ``/api/proxy-auth``
accepts the apps cookie only on its own session's host and only while the login it names is valid: logging out of
the portal ends it too.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode
from urllib.parse import urlsplit

from flask import current_app
from flask import request
from itsdangerous import BadSignature
from itsdangerous import URLSafeTimedSerializer
from sqlalchemy import delete
from sqlalchemy import select
from werkzeug.datastructures import Headers

from webui.extensions import db
from webui.models import AppTicket
from webui.models import utcnow
from webui.tokens import new_token
from webui.tokens import token_hash

COOKIE_NAME = "__Host-carme_app"
BIND_COOKIE = "__Host-carme_bind"
BIND_SECONDS = 120
_COOKIE_SALT = "carme-app-cookie"
# Set by nginx's apps server block on its auth_request (never by a client: nginx replaces the header there, and the
# portal's block sets it to "portal").
VIA_HEADER = "X-Carme-Via"
#: cookie names that are Carme's, on any origin: never passed to an app
CARME_COOKIE = re.compile(r"^(?:__host-|__secure-)?carme", re.IGNORECASE)
BIND_HASH = re.compile(r"[0-9a-f]{64}")
_LABEL = re.compile(r"([0-9]{1,12})-([0-9a-f]{16})")


def enabled() -> bool:
    return bool(current_app.config.get("APPS_ORIGIN"))


def check_apps_origin(value: str) -> None:
    """Raise ValueError unless ``value`` is "" or ``https://*.<domain>[:port]`` (one session per host name)."""
    if not value:
        return
    url = urlsplit(value.rstrip("/"))
    host = url.hostname or ""
    if url.scheme != "https" or url.path or url.query or not host.startswith("*.") or "*" in host[2:]:
        raise ValueError(
            f"APPS_ORIGIN {value!r} must be a wildcard origin https://*.<apps domain>[:port] (one host per session)"
        )


def session_label(secret_key: str | bytes, job_id: int) -> str:
    """``<job>-<tag>``: the first label of session ``job_id``'s host name."""
    key = secret_key.encode() if isinstance(secret_key, str) else secret_key
    tag = hmac.new(key, f"carme-origin-v1|{job_id}".encode(), hashlib.sha256).hexdigest()[:16]
    return f"{job_id}-{tag}"


def session_origin(job_id: int) -> str:
    """``https://<job>-<tag>.<apps domain>[:port]``."""
    pattern = str(current_app.config["APPS_ORIGIN"]).rstrip("/")
    return pattern.replace("*", session_label(current_app.secret_key or "", job_id), 1)


def job_of_host(host_header: str) -> int | None:
    """The session whose host ``host_header`` names (port ignored), if the name is genuine."""
    pattern = urlsplit(str(current_app.config["APPS_ORIGIN"]).rstrip("/")).hostname or ""
    host = host_header.rsplit(":", 1)[0] if not host_header.endswith("]") else host_header
    label, _, domain = host.lower().partition(".")
    match = _LABEL.fullmatch(label)
    if match is None or f"*.{domain}" != pattern:
        return None
    job_id = int(match.group(1))
    return job_id if hmac.compare_digest(label, session_label(current_app.secret_key or "", job_id)) else None


def _ticket_key(ticket: str, bind_hash: str) -> str:
    return token_hash(f"{ticket}|{bind_hash}")


def bind_hash(nonce: str) -> str:
    return token_hash(nonce)


def new_bind_nonce() -> str:
    return new_token()


def issue_ticket(login_id: str, job_id: int, bind: str) -> str:
    """Record a one-time ticket for ``job_id``, the login ``login_id`` and the browser whose bind cookie hashes to
    ``bind``; the caller commits."""
    now = utcnow()
    ticket = new_token()
    db.session.execute(delete(AppTicket).where(AppTicket.expires_at < now))  # expired ones of anyone (indexed)
    db.session.add(
        AppTicket(
            id=_ticket_key(ticket, bind),
            login_id=login_id,
            job_id=job_id,
            expires_at=now + dt.timedelta(seconds=float(current_app.config["APP_TICKET_SECONDS"])),
        )
    )
    return ticket


def start_url(job_id: int) -> str:
    return f"{session_origin(job_id)}/.carme/enter?{urlencode({'job': job_id})}"


def enter_url(job_id: int, ticket: str) -> str:
    return f"{session_origin(job_id)}/.carme/enter?{urlencode({'job': job_id, 'ticket': ticket})}"


def redeem_ticket(ticket: str, job_id: int, nonce: str) -> str | None:
    """Use a ticket up with the browser's bind cookie ``nonce``: the login key it was issued to, or None (unknown,
    used, expired, another job, another browser)."""
    if not ticket or len(ticket) > 128 or not nonce or len(nonce) > 128:
        return None
    key = _ticket_key(ticket, bind_hash(nonce))
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


def cookie_kwargs(max_age: int | None = None) -> dict[str, Any]:
    """A ``__Host-`` cookie: host-only, ``Path=/``, ``Secure`` (the apps' origin is always https)."""
    seconds = int(current_app.permanent_session_lifetime.total_seconds()) if max_age is None else max_age
    return {"path": "/", "secure": True, "httponly": True, "samesite": "Lax", "max_age": seconds}


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


def upstream_cookies(header: str) -> str:
    """The Cookie header an app gets: the request's, less every cookie whose name Carme uses (any case, any copy)."""
    kept = []
    for pair in header.split(";"):
        name = pair.split("=", 1)[0].strip()
        if name and not CARME_COOKIE.match(name):
            kept.append(pair.strip())
    return "; ".join(kept)


def browser_may_send(method: str, headers: Headers | Mapping[str, str], own_origin: str | None = None) -> bool:
    """May a request with these fetch metadata reach a page of ``own_origin``?

    Browsers say where a request comes from (``Sec-Fetch-Site``). From another origin of the same site (another
    session's app) or another site, only a top-level navigation (GET of a document) passes; an iframe, a fetch, a
    form POST or a websocket does not. Clients that send no such header (curl, monitoring) are not browsers; then an
    ``Origin`` other than ``own_origin`` (when given) is refused.
    """
    site = headers.get("Sec-Fetch-Site", "")
    if site in ("same-origin", "none"):
        return True
    if site == "":
        origin = headers.get("Origin")
        return own_origin is None or origin is None or origin == own_origin
    navigate = headers.get("Sec-Fetch-Mode") == "navigate" and method in ("GET", "HEAD")
    return navigate and headers.get("Sec-Fetch-Dest", "document") == "document"
