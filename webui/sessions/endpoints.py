# SPDX-License-Identifier: GPL-3.0-or-later
"""A session's front: the endpoint its job publishes (the job comment, ``carme-launch``), checked and then proven.

The comment is user-editable (``scontrol update``): the portal probes only a host the job runs on and a port of the
session fronts' range, and reaches only a front that proves it knows the session secret (HMAC challenge,
carme_runtime.front). The challenge sends no secret, and its answer is never shown to anyone.
"""

from __future__ import annotations

from flask import current_app

from carme_runtime.apps import AppSpec
from carme_runtime.front import PORT_RANGE
from carme_runtime.front import front_headers
from webui.slurm.scheduler import current_scheduler
from webui.slurm.session_spec import readiness_path
from webui.slurm.state import ClusterState
from webui.slurm.state import Endpoint
from webui.slurm.state import Job


def _port_range() -> tuple[int, int]:
    """``PROXY_PORT_RANGE``: the ports carme-launch puts session fronts on (carme_runtime.front.PORT_RANGE)."""
    lo, hi = current_app.config.get("PROXY_PORT_RANGE", PORT_RANGE)
    return int(lo), int(hi)


def valid_endpoint(state: ClusterState, job: Job) -> Endpoint | None:
    """The endpoint the job comment names, if it may be probed at all (not yet proven: see verified_endpoint).

    Only a host the job really runs on (Slurm's node names and addresses) and a port of the session fronts' range;
    slurmd, slurmrestd, databases lie outside it.
    """
    ep = job.endpoint()
    if ep is None or ep.state != "ready" or job.state != "RUNNING":
        return None
    lo, hi = _port_range()
    if not lo <= ep.port <= hi:
        return None
    if ep.host not in state.node_names_for(job.nodes):
        return None
    return ep


def verified_endpoint(state: ClusterState, job: Job, secret: str) -> Endpoint | None:
    """The endpoint, once it proved it is this session's front (it knows the session secret).

    Editing the comment to name another port or host changes nothing: what listens there cannot answer the
    challenge for this session.
    """
    ep = valid_endpoint(state, job)
    if ep is None or not current_scheduler().verify_endpoint(ep, job.job_id, secret):
        return None
    return ep


def upstream_headers(secret: str, job_id: int) -> dict[str, str]:
    """What nginx adds to each proxied request: the session front's key. The app's own token (Jupyter's) is the
    front's to add: it never passes through the portal, nginx or the browser (carme_runtime.front.app_secret)."""
    return front_headers(secret, job_id)


def endpoint_ready(ep: Endpoint, job_id: int, secret: str, spec: AppSpec, *, patient: bool = False) -> bool:
    """Proven to be the session's front, and the app behind it answers its readiness path. ``patient``: refusals
    this worker remembers are set aside and the app gets the longer timeout (an owner's click on Connect)."""
    sched = current_scheduler()
    if not sched.verify_endpoint(ep, job_id, secret, patient=patient):
        return False
    return sched.app_answers(ep, readiness_path(spec, job_id), upstream_headers(secret, job_id), patient=patient)
