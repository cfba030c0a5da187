# SPDX-License-Identifier: GPL-3.0-or-later
"""nginx's ``auth_request`` decision for ``/proxy/<job>/``: who may reach a session's app, and where it is.

The owner (and, with ``PROXY_ADMIN_ACCESS``, an admin) reaches the session's proven front (:mod:`webui.sessions.
endpoints`). The grant the database gave is kept per worker for ``PROXY_AUTH_CACHE_SECONDS``, so that running
sessions stay reachable while the portal's database is down.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass

from flask import abort
from flask import current_app
from sqlalchemy.exc import SQLAlchemyError

from webui.auth.logins import CurrentUser
from webui.caches import TTLMap
from webui.extensions import db
from webui.sessions.endpoints import upstream_headers
from webui.sessions.endpoints import verified_endpoint
from webui.sessions.records import get_portal_session
from webui.sessions.records import job_of
from webui.slurm.scheduler import current_scheduler
from webui.slurm.state import ClusterState
from webui.slurm.state import Endpoint
from webui.slurm.state import Job


@dataclass(frozen=True)
class ProxyTarget:
    endpoint: Endpoint
    secret: str
    headers: Mapping[str, str]  # what the proxy adds upstream (X-Carme-Front)


@dataclass(frozen=True)
class ProxyGrant:
    """What the database said about a session, kept to authorise its proxy while the database is down."""

    owner: str
    app: str
    secret: str


def _auth_cache() -> TTLMap:
    """Per-worker grants, each kept ``PROXY_AUTH_CACHE_SECONDS`` after the last authorisation the database confirmed."""
    cache = current_app.extensions.get("carme_proxy_auth_cache")
    if cache is None:
        cache = TTLMap(float(current_app.config.get("PROXY_AUTH_CACHE_SECONDS", 300.0)))
        current_app.extensions["carme_proxy_auth_cache"] = cache
    assert isinstance(cache, TTLMap)
    return cache


def authorise_proxy(job_id: int, identity: str | None, who: Callable[[], CurrentUser | None]) -> ProxyTarget:
    """nginx ``auth_request``: the target of /proxy/<job_id>/ for the login ``identity`` (its key; ``who`` reads
    the user from the database); aborts 401/403/404/503.

    When the portal database is down, a grant this worker confirmed with the database for the same login and job
    at most ``PROXY_AUTH_CACHE_SECONDS`` ago still authorises (the job must still run, and its endpoint still prove
    itself); never longer, and never a login or a session the worker has not seen.
    """
    try:
        user = who() if identity is not None else None
        target, grant = _proxy_target(user, job_id)
    except SQLAlchemyError as exc:
        current_app.logger.warning("proxy-auth for job %s: database error: %s", job_id, exc)
        with contextlib.suppress(SQLAlchemyError):
            db.session.rollback()
        hit, cached = _auth_cache().get((identity, job_id)) if identity else (False, None)
        if not hit or not isinstance(cached, ProxyGrant):
            abort(503, description="The portal database is unavailable.")
        return _target_for(cached, job_id)
    if identity is not None and float(current_app.config.get("PROXY_AUTH_CACHE_SECONDS", 300.0)) > 0:
        _auth_cache().put((identity, job_id), grant)
    return target


def proxy_target(user: CurrentUser | None, job_id: int) -> ProxyTarget:
    """Authorise one proxied request; aborts with 401/403/404/503."""
    return _proxy_target(user, job_id)[0]


def _proxy_target(user: CurrentUser | None, job_id: int) -> tuple[ProxyTarget, ProxyGrant]:
    if user is None:
        abort(401)
    record = get_portal_session(job_id)
    if record is None:
        abort(404, description="Unknown session.")
    admin_ok = user.is_admin and bool(current_app.config["PROXY_ADMIN_ACCESS"])
    if record.owner != user.username and not admin_ok:
        abort(403, description="This session belongs to someone else.")
    grant = ProxyGrant(owner=record.owner, app=record.app, secret=record.secret)
    return _target_for(grant, job_id), grant


def _proven(state: ClusterState, job_id: int, grant: ProxyGrant) -> tuple[Job | None, Endpoint | None]:
    """The session's job in ``state`` and its proven endpoint (either None)."""
    job = job_of(state, job_id, grant.owner)
    return job, verified_endpoint(state, job, grant.secret) if job is not None else None


def _target_for(grant: ProxyGrant, job_id: int) -> ProxyTarget:
    """The session's proven endpoint, from Slurm's state (no database)."""
    sched = current_scheduler()
    state = sched.state()
    job, ep = _proven(state, job_id, grant)
    if ep is None:
        # Each worker has its own snapshot: a session another worker already saw ready (and offered Connect for)
        # may look "starting" here. Look again with a fresher one; at most one query per PROXY_RECHECK_SECONDS
        # per worker, whatever the number of users.
        fresh = sched.state(max_age=float(current_app.config["PROXY_RECHECK_SECONDS"]))
        if fresh is not state:
            state = fresh
            job, ep = _proven(state, job_id, grant)
    if state.error and not state.fetched_at:
        abort(503, description=state.error)
    if job is None or job.state != "RUNNING":
        abort(404, description="The session is not running.")
    if ep is None:
        abort(404, description="The session is not ready yet.")
    return ProxyTarget(ep, grant.secret, upstream_headers(grant.secret, job_id))
