# SPDX-License-Identifier: GPL-3.0-or-later
"""What the dashboard, the admin page and ``/api/sessions`` show of a session: Slurm's state of its job, why it waits
or failed, whether its app is ready (Connect), and when it ends. A session whose job ended is recorded as ended."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

from flask import current_app

from carme_runtime.front import app_secret
from carme_runtime.slurm_formats import parse_comment
from webui.extensions import db
from webui.models import PortalSession
from webui.models import utcnow
from webui.sessions import pending_reasons
from webui.sessions.catalog import app_spec
from webui.sessions.endpoints import endpoint_ready
from webui.sessions.endpoints import valid_endpoint
from webui.sessions.records import end_reason
from webui.sessions.records import job_of
from webui.sessions.records import my_portal_sessions
from webui.sessions.records import not_yet_listed
from webui.sessions.records import session_log_path
from webui.slurm.scheduler import current_scheduler
from webui.slurm.state import ClusterState
from webui.slurm.state import Job

#: what a launcher's ``reason=`` in ``state=failed`` means, in words (carme_runtime.launch)
FAILURE_REASONS = {"image": "its container image is missing on the node or does not match its registered digest"}

#: node state words (slurmrestd state and state_flags) of a node that is lost, for now or for good
LOST_NODE_STATES = ("NOT_RESPONDING", "DOWN", "FAIL")

#: a session counts as starting (its owner's dashboard asks often, from fresh state) this long after its submission
STARTING_WINDOW_SECONDS = 600
NOT_YET_LISTED = "submitted, not yet listed by the scheduler"


def _launch_failed(job: Job) -> bool:
    return (parse_comment(job.comment or "") or {}).get("state") == "failed"


def _ended_to_explain(job: Job) -> bool:
    """An ended session the dashboard keeps showing (while Slurm knows the job): its user must learn why it ended."""
    return _launch_failed(job) or job.state == "NODE_FAIL"


def _lost_nodes(state: ClusterState, job: Job) -> list[str]:
    wanted = set(job.nodes)
    return sorted(
        n.name for n in state.nodes if n.name in wanted and any(w in n.state.upper() for w in LOST_NODE_STATES)
    )


def _reason(job: Job, lost: list[str]) -> str:
    """Why a session waits (Slurm's pending reason), why its launcher gave up (the job comment), or that its node
    is lost (``lost``: a running job's nodes that stopped answering; Slurm ends it after SlurmdTimeout, never
    requeued)."""
    if job.state == "PENDING":
        return pending_reasons.explain(job.reason)
    if job.state == "NODE_FAIL":
        return "its node failed; Slurm ended the session (it is not started again by itself)"
    if lost:
        return (
            f"its node {', '.join(lost)} is not responding; the session ends if the node does not come back "
            "(it is not started again by itself)"
        )
    fields = parse_comment(job.comment or "") or {}
    if fields.get("state") == "failed":
        return FAILURE_REASONS.get(fields.get("reason", ""), "the app did not start (see the job's output file)")
    return ""


def my_session_views(username: str) -> tuple[ClusterState, list[dict[str, Any]]]:
    """The user's sessions as the dashboard and ``/api/sessions`` show them.

    While one of them is watched (starting, or submitted recently and pending), from a state at most
    ``STARTING_STATE_SECONDS`` old instead of ``SCHEDULER_CACHE_SECONDS``: the portal sees the job
    start and the launcher's "ready" soon after Slurm shows them. The fresher state is the worker's shared cache too
    (single-flight; the jobs asked only whether any changed, nodes and partitions read at most every
    ``SCHEDULER_CACHE_SECONDS``), so scheduler calls do not grow with the users who wait.
    """
    records = my_portal_sessions(username)
    state = current_scheduler().state()
    views = session_views(state, records)
    fresh = float(current_app.config.get("STARTING_STATE_SECONDS", 0.5))
    if any(v["watch"] for v in views) and time.time() - state.fetched_at > fresh:
        state = current_scheduler().state(max_age=fresh)
        views = session_views(state, records)
    return state, views


def _watched(views: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What of the views a long poll waits to change: which sessions, their state, reason and readiness."""
    return [(v["job_id"], v["state"], v["reason"], v["ready"], v["watch"]) for v in views]


_wait_slots: dict[int, threading.BoundedSemaphore] = {}


def _slots() -> threading.BoundedSemaphore:
    """This worker's long-poll slots (``LONG_POLL_SLOTS``: the threads a worker lends to waiting dashboards)."""
    n = int(current_app.config.get("LONG_POLL_SLOTS", 8))
    return _wait_slots.setdefault(n, threading.BoundedSemaphore(n))


def wait_for_session_change(username: str, wait: float) -> tuple[ClusterState, list[dict[str, Any]], bool]:
    """``my_session_views``, answered as soon as a watched session changes (one starting, or submitted in the last
    ``STARTING_WINDOW_SECONDS`` and pending), or after ``wait`` seconds (a long poll): the dashboard learns that the
    job runs and that its app is ready within ``LONG_POLL_STEP_SECONDS`` of Slurm showing it, instead of after its
    next poll and the state's age. The state is the worker's shared cache, read at most every step whatever the
    number of waiting users. Answers at once (``waited`` False) when no session is watched or the worker's slots are
    taken: the dashboard then asks again after ``STARTING_POLL_SECONDS``."""
    state, views = my_session_views(username)
    if wait <= 0 or not any(v["watch"] for v in views):
        return state, views, False
    slots = _slots()
    if not slots.acquire(blocking=False):
        return state, views, False
    try:
        step = float(current_app.config.get("LONG_POLL_STEP_SECONDS", 0.1))
        first = _watched(views)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            time.sleep(step)
            db.session.rollback()  # a new transaction: rows another request committed meanwhile are seen
            state = current_scheduler().state(max_age=step)  # once per step, not the cached state then a fresher one
            views = session_views(state, my_portal_sessions(username))
            if _watched(views) != first or state.error:
                break
    finally:
        slots.release()
    return state, views, True


def session_views(
    state: ClusterState, records: list[PortalSession], *, probe: bool = True, patient: bool = False
) -> list[dict[str, Any]]:
    """One view per session still to show; sessions whose jobs ended are recorded as ended (committed).
    ``probe``: ask each running app whether it answers (the owner's pages), else only whether it published "ready";
    ``patient``: probe with refusals this worker remembers set aside and a longer timeout (a click on Connect)."""
    now = time.time()
    out = []
    changed = False
    for ps in records:
        view, ended_now = _view_of(state, ps, now, probe, patient)
        changed = changed or ended_now
        if view is not None:
            out.append(view)
    if changed:
        db.session.commit()
    return out


def _view_of(
    state: ClusterState, ps: PortalSession, now: float, probe: bool, patient: bool = False
) -> tuple[dict[str, Any] | None, bool]:
    """The session's view (None: not shown), and whether it was ended just now."""
    was_ended = ps.ended_at is not None
    job = job_of(state, ps.job_id, ps.owner)
    if job is None and state.error:
        return (None if was_ended else _unknown_view(ps)), False
    if job is None and not was_ended and not_yet_listed(ps, state):
        return _unknown_view(ps, reason=NOT_YET_LISTED), False
    ended_now = False
    if job is None or job.ended:
        ended_now = _record_end(ps, job)
        # an ended session stays only while it must explain why, until its owner dismissed it (``end_seen``)
        if job is None or (was_ended and (ps.end_seen or not _ended_to_explain(job))):
            return None, ended_now
    return _job_view(state, ps, job, now, probe, patient), ended_now


def _record_end(ps: PortalSession, job: Job | None) -> bool:
    """Mark the session ended (uncommitted), with why (Slurm's final state of its job; "unknown" when Slurm has
    forgotten the job: the history page asks the accounting later) and its output file; False if it was already."""
    if ps.ended_at is not None:
        return False
    ps.ended_at = utcnow()
    ps.secret = ""  # as in stop_session: an ended session's secret is of no use to anyone
    ps.end_reason = end_reason(job.state, job.comment) if job is not None else "unknown"
    ps.log_path = session_log_path(ps)
    return True


def _job_view(
    state: ClusterState, ps: PortalSession, job: Job, now: float, probe: bool, patient: bool = False
) -> dict[str, Any]:
    ready = False
    spec = app_spec(ps.app)
    lost = _lost_nodes(state, job) if job.state == "RUNNING" else []
    if job.state == "RUNNING" and spec is not None and not lost:
        ep = valid_endpoint(state, job)
        ready = ep is not None and (not probe or endpoint_ready(ep, ps.job_id, ps.secret, spec, patient=patient))
    young = now - ps.created_at.timestamp() < STARTING_WINDOW_SECONDS
    # running, its app not yet ready: shown from fresh state; pending: the dashboard watches for it to run
    starting = young and not ready and job.state == "RUNNING" and not lost and not _launch_failed(job)
    return {
        **_record_fields(ps),
        "state": job.state,
        "reason": _reason(job, lost),
        "slurm_reason": job.reason if job.state == "PENDING" else "",
        "seconds_left": job.seconds_left(now),
        "ends_at": _ends_at(job),
        "nodes": list(job.nodes),
        "ready": ready,
        "starting": starting,
        "failed": _ended_to_explain(job),
        "watch": starting or (young and job.state == "PENDING"),
        "connect_url": f"/sessions/{ps.job_id}/connect" if ready else None,
        # Password apps (code-server) ask the owner for the session password at first connect.
        # The app's password, never the session secret (the front's key is derived from that).
        "password": app_secret(ps.secret, ps.job_id)
        if ready and spec is not None and spec.secret_mode == "password"
        else None,
    }


def _record_fields(ps: PortalSession) -> dict[str, Any]:
    """What a view shows of the portal's own row."""
    return {
        "job_id": ps.job_id,
        "owner": ps.owner,
        "app": ps.app,
        "image": ps.image,
        "gpus": ps.gpus,
        "partition": ps.partition,
        "reservation": ps.reservation,
    }


def _ends_at(job: Job) -> str | None:
    """When a running job reaches its time limit (UTC, HH:MM), for the dashboard."""
    if job.state != "RUNNING" or not job.start_time or not job.time_limit_minutes:
        return None
    end = dt.datetime.fromtimestamp(job.start_time + job.time_limit_minutes * 60, dt.UTC)
    return end.strftime("%Y-%m-%d %H:%M UTC")


def _unknown_view(ps: PortalSession, reason: str = "scheduler unreachable") -> dict[str, Any]:
    return {
        **_record_fields(ps),
        "state": "UNKNOWN",
        "reason": reason,
        "slurm_reason": "",
        "seconds_left": None,
        "ends_at": None,
        "nodes": [],
        "ready": False,
        "starting": reason == NOT_YET_LISTED,
        "failed": False,
        "watch": reason == NOT_YET_LISTED,
        "connect_url": None,
        "password": None,
    }
