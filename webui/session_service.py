"""Session logic shared by the HTML pages and the JSON API."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import secrets
import time
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from typing import TypeVar

from flask import abort
from flask import current_app
from sqlalchemy import Row
from sqlalchemy import bindparam
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import BadRequest

from carme_runtime.apps import AppSpec
from carme_runtime.front import PORT_RANGE
from carme_runtime.front import app_secret
from carme_runtime.front import front_headers
from carme_runtime.sessions import SessionLimits
from carme_runtime.slurm_formats import parse_comment
from webui import forms
from webui import pending_reasons
from webui import session_limit
from webui.auth.audit import audit
from webui.auth.logins import CurrentUser
from webui.caches import TTLMap
from webui.extensions import db
from webui.models import ImageCatalog
from webui.models import News
from webui.models import PortalSession
from webui.models import QuotaPolicy
from webui.models import utcnow
from webui.slurm.errors import SlurmError
from webui.slurm.errors import SlurmUnavailable
from webui.slurm.scheduler import Scheduler
from webui.slurm.session_spec import SessionInvalid
from webui.slurm.session_spec import SessionSpec
from webui.slurm.session_spec import load_apps
from webui.slurm.session_spec import readiness_path
from webui.slurm.state import ClusterState
from webui.slurm.state import Endpoint
from webui.slurm.state import Job
from webui.usage_cache import Shown
from webui.usage_cache import StaleWhileRefresh

T = TypeVar("T")

TERMINAL = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)


def scheduler() -> Scheduler:
    sched: Scheduler = current_app.extensions["carme_scheduler"]
    return sched


def view_cache() -> TTLMap:
    """Per-worker cache of what the dashboard shows and admins rarely change.

    The news for ``SCHEDULER_CACHE_SECONDS``, a user's quota policy for ``QUOTA_CACHE_SECONDS`` (the GPU-hours shown
    next to it: :func:`usage_display`). The admin views clear it when they change either; decisions (start, limits)
    never read it.
    """
    cache: TTLMap = current_app.extensions["carme_view_cache"]
    return cache


def _cached(key: tuple[Any, ...], compute: Callable[[], T], ttl: float | None = None) -> T:
    hit, value = view_cache().get(key)
    if hit:
        return value  # type: ignore[no-any-return]
    value = compute()
    view_cache().put(key, value, ttl)
    return value


def proxy_path(job_id: int) -> str:
    return f"/proxy/{job_id}/"


@dataclass(frozen=True)
class Policy:
    gpu_hours_per_month: float
    max_gpus_per_session: int
    max_sessions: int
    max_time_minutes: int
    source: str


# Built once, bound per call: the user's own policy row and the default row (columns, no ORM objects).
_POLICY_ROWS = select(
    QuotaPolicy.username,
    QuotaPolicy.gpu_hours_per_month,
    QuotaPolicy.max_gpus_per_session,
    QuotaPolicy.max_sessions,
    QuotaPolicy.max_time_minutes,
).where((QuotaPolicy.username == bindparam("username")) | (QuotaPolicy.username.is_(None)))


def effective_policy(username: str, *, cached: bool = False) -> Policy:
    """The user's quota policy (their own row, else the default row, else the settings).

    ``cached``: for display only, may be ``QUOTA_CACHE_SECONDS`` old (see :func:`view_cache`).
    """
    if cached:
        ttl = float(current_app.config["QUOTA_CACHE_SECONDS"])
        return _cached(("policy", username), lambda: effective_policy(username), ttl)
    rows = db.session.execute(_POLICY_ROWS, {"username": username})
    by_name = {r.username: r for r in rows}
    row = by_name.get(username) or by_name.get(None)
    if row is not None:
        return Policy(
            row.gpu_hours_per_month,
            row.max_gpus_per_session,
            row.max_sessions,
            row.max_time_minutes,
            "user" if row.username else "default",
        )
    cfg = current_app.config
    return Policy(
        float(cfg["QUOTA_DEFAULT_GPU_HOURS_PER_MONTH"]),
        int(cfg["QUOTA_DEFAULT_MAX_GPUS_PER_SESSION"]),
        int(cfg["QUOTA_DEFAULT_MAX_SESSIONS"]),
        int(cfg["QUOTA_DEFAULT_MAX_TIME_MINUTES"]),
        "built-in",
    )


def month_start(now: dt.datetime | None = None) -> dt.datetime:
    now = now or utcnow()
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


#: After a failed GPU-hour read (slurmdbd or slurmrestd down) the dashboard asks Slurm again no sooner than this.
USAGE_FAILURE_CACHE_SECONDS = 10.0
#: A key's very first dashboard look waits at most this long for its GPU-hours (then shows them as unknown).
USAGE_FIRST_WAIT_SECONDS = 2.0


def usage_display() -> StaleWhileRefresh:
    """The per-worker GPU-hours the dashboard shows (:class:`webui.usage_cache.StaleWhileRefresh`), made on first use
    in the worker (its refresh threads too: nothing of it exists in a preloading gunicorn master)."""
    shown: StaleWhileRefresh | None = current_app.extensions.get("carme_usage_display")
    if shown is None:
        ttl = float(current_app.config["QUOTA_CACHE_SECONDS"])
        made = StaleWhileRefresh(
            ttl,
            failure=min(ttl, USAGE_FAILURE_CACHE_SECONDS),
            max_stale=5 * ttl,
            first_wait=USAGE_FIRST_WAIT_SECONDS,
        )
        shown = current_app.extensions.setdefault("carme_usage_display", made)
    return shown


def gpu_hours_used(username: str, *, cached: bool = False) -> float | None:
    """GPU-hours this month from Slurm's accounting; ``None`` when Slurm cannot say right now.

    Not ``cached`` (decisions: the start's budget check, reservations): the scheduler's value, at most
    ``QUOTA_CACHE_SECONDS`` old, read now when older. ``cached`` (display): see :func:`gpu_hours_shown`.
    """
    if not cached:
        return scheduler().gpu_hours_used(username, month_start())
    return gpu_hours_shown(username).value


def gpu_hours_shown(username: str) -> Shown:
    """For display only: the last known value and when it was read, at once; older than ``QUOTA_CACHE_SECONDS`` it is
    refreshed in the background (one refresh per user per worker), a failure is retried after
    ``USAGE_FAILURE_CACHE_SECONDS`` (the last value stays shown up to ``5 * QUOTA_CACHE_SECONDS``). Only a user's
    first look in a worker waits, at most ``USAGE_FIRST_WAIT_SECONDS``."""
    since = month_start()
    sched = scheduler()  # the refresh runs outside the request: it takes the object, not the app context
    return usage_display().get((username, since.isoformat()), lambda: sched.gpu_hours_used(username, since))


def quota_view(username: str, *, cached: bool = False) -> dict[str, Any]:
    policy = effective_policy(username, cached=cached)
    if cached:
        shown = gpu_hours_shown(username)
        used, as_of = shown.value, shown.as_of
    else:
        used, as_of = gpu_hours_used(username), time.time()
    from webui import reservation_service

    reserved = reservation_service.reserved_gpu_hours(username)
    return {
        "reserved_gpu_hours": None if reserved is None else round(reserved, 2),
        "used_gpu_hours": None if used is None else round(used, 2),
        "used_as_of": None if used is None or as_of is None else dt.datetime.fromtimestamp(as_of, dt.UTC),
        "limit_gpu_hours": policy.gpu_hours_per_month,
        "percent": None
        if used is None or policy.gpu_hours_per_month <= 0
        else min(100, round(100 * used / policy.gpu_hours_per_month)),
        "policy": policy,
    }


# --- news ---------------------------------------------------------------------------

# Built once: the columns the dashboard shows, no ORM objects.
_LATEST_NEWS = (
    select(News.title, News.body, News.author, News.created_at)
    .where(News.published.is_(True))
    .order_by(News.created_at.desc())
    .limit(5)
)


def latest_news() -> list[Row[tuple[str, str, str, dt.datetime]]]:
    """The five newest published items, for display (may be ``SCHEDULER_CACHE_SECONDS`` old)."""
    return _cached(("news",), lambda: list(db.session.execute(_LATEST_NEWS)))


# --- catalogue and form choices --------------------------------------------------


def session_runtime(kind: str) -> str:
    """carme_runtime's runtime for a catalogue entry: environments run in their prefix, ``container`` images (built
    by ``carme image build``) in the site's container runtime (``CONTAINER_RUNTIME``), older ``image`` entries in
    Apptainer."""
    if kind == "environment":
        return "none"
    if kind == "container":
        return str(current_app.config.get("CONTAINER_RUNTIME", "apptainer"))
    return "apptainer"


def catalog() -> list[ImageCatalog]:
    return list(
        db.session.execute(
            select(ImageCatalog).where(ImageCatalog.enabled.is_(True)).order_by(ImageCatalog.name)
        ).scalars()
    )


def installed_apps() -> dict[str, AppSpec]:
    return load_apps(tuple(current_app.config["CARME_APP_DIRS"]))


def available_apps(images: list[ImageCatalog]) -> list[str]:
    """Apps some enabled image allows and carme_runtime knows."""
    installed = installed_apps()
    return sorted({a for img in images for a in img.allowed_apps if a in installed})


def app_spec(name: str) -> AppSpec | None:
    return installed_apps().get(name)


def form_limits(username: str, state: ClusterState, partition: str | None = None) -> dict[str, Any]:
    policy = effective_policy(username)
    part_obj = next((p for p in state.partitions if p.name == partition), None) if partition else None
    max_time = min(policy.max_time_minutes, int(current_app.config["SESSION_MAX_TIME_MINUTES"]))
    if part_obj and part_obj.max_time_minutes:
        max_time = min(max_time, part_obj.max_time_minutes)
    return {
        "max_gpus": min(policy.max_gpus_per_session, state.max_gpus_per_node(partition)),
        "max_nodes": max(1, min(int(current_app.config.get("SESSION_MAX_NODES", 1)), _usable_nodes(state, partition))),
        "max_time_minutes": max_time,
        "max_sessions": policy.max_sessions,
        "policy": policy,
    }


def _usable_nodes(state: ClusterState, partition: str | None) -> int:
    """How many usable nodes the partition has (all partitions' nodes without one)."""
    part = next((p for p in state.partitions if p.name == partition), None) if partition else None
    members = set(part.nodes) if part else set()
    return sum(1 for n in state.nodes if n.usable and (not partition or n.name in members or partition in n.partitions))


def default_partition(state: ClusterState) -> str | None:
    configured = current_app.config.get("SESSION_DEFAULT_PARTITION")
    if configured:
        return str(configured)
    default = next((p.name for p in state.partitions if p.is_default), None)
    return default or (state.partitions[0].name if state.partitions else None)


# --- start / stop -------------------------------------------------------------------


def _live_state() -> ClusterState:
    state = scheduler().state()
    if state.error and not state.fetched_at:
        raise SlurmUnavailable(state.error)
    return state


#: what a launcher's ``reason=`` in ``state=failed`` means, in words (carme_runtime.launch)
FAILURE_REASONS = {"image": "its container image is missing on the node or does not match its registered digest"}


def _launch_failed(job: Job) -> bool:
    return (parse_comment(job.comment or "") or {}).get("state") == "failed"


def _ended_to_explain(job: Job) -> bool:
    """An ended session the dashboard keeps showing (while Slurm knows the job): its user must learn why it ended."""
    return _launch_failed(job) or job.state == "NODE_FAIL"


#: node state words (slurmrestd state and state_flags) of a node that is lost, for now or for good
LOST_NODE_STATES = ("NOT_RESPONDING", "DOWN", "FAIL")


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


#: how old a snapshot may be when a refusal depends on it (the session limit)
FRESH_STATE_SECONDS = 1.0


def _active_sessions(username: str, state: ClusterState) -> list[PortalSession]:
    """The user's sessions whose jobs are active in ``state``, and those recorded too late to be in it (another
    worker's start that finished meanwhile: :data:`CREATED_AT_PRECISION_S`, as in :func:`session_views`)."""

    def counts(ps: PortalSession) -> bool:
        job = state.job(ps.job_id)
        if job is not None:
            return job.active
        return ps.ended_at is None and state.fetched_at < ps.created_at.timestamp() + CREATED_AT_PRECISION_S

    return [ps for ps in my_portal_sessions(username) if counts(ps)]


def start_session(user: CurrentUser, form: Mapping[str, Any]) -> PortalSession:
    """Validate everything on the server, submit as the user, record owner and secret."""
    state = _live_state()
    images = catalog()
    image_name = forms.choice(form, "image", [i.name for i in images])
    image = next(i for i in images if i.name == image_name)
    app = forms.choice(form, "app", available_apps(images))
    if app not in image.allowed_apps:
        raise forms.FieldError("app", f"is not offered with image {image.name!r}")
    partitions = [p.name for p in state.partitions]
    if form.get("partition") in (None, ""):
        partition = default_partition(state)
    else:
        partition = forms.choice(form, "partition", partitions)
    reservation = None
    if form.get("reservation"):  # one of the user's reservations that hold nodes now (issue 16)
        from webui import reservation_service

        held = {r.name: r for r in reservation_service.active_reservations(user.username)}
        reservation = held.get(forms.choice(form, "reservation", list(held)))
        if reservation is not None and reservation.partition in partitions:
            partition = reservation.partition
    limits = form_limits(user.username, state, partition)
    gpus = forms.integer(form, "gpus", lo=0, hi=limits["max_gpus"])
    nodes = forms.integer(form, "nodes", lo=1, hi=limits["max_nodes"], default=1)
    if gpus * nodes > limits["policy"].max_gpus_per_session:  # GPUs are per node; the policy counts the session's
        raise forms.FieldError(
            "gpus",
            f"{gpus} per node on {nodes} nodes is more than the {limits['policy'].max_gpus_per_session} "
            "GPUs a session may have",
        )
    time_minutes = forms.integer(form, "time_minutes", lo=1, hi=limits["max_time_minutes"])
    if reservation is not None:  # the session ends when the reservation ends (the dashboard says so)
        left = int((reservation.end - utcnow()).total_seconds() // 60)
        if left < 1:
            raise forms.FieldError("reservation", "ends in less than a minute")
        time_minutes = min(time_minutes, left)

    active = _active_sessions(user.username, state)
    if len(active) >= limits["max_sessions"]:
        # the snapshot may be seconds old: a session the user has just stopped must not count against her
        state = scheduler().state(max_age=FRESH_STATE_SECONDS)
        active = _active_sessions(user.username, state)
    if len(active) >= limits["max_sessions"]:
        raise forms.FieldError("app", f"you already have {len(active)} sessions; the limit is {limits['max_sessions']}")
    if gpus > 0:  # Slurm enforces the budget itself (GrpTRESMins); an unknown usage is never taken as "allowed"
        quota = quota_view(user.username)
        if quota["used_gpu_hours"] is None:
            raise forms.FieldError(
                "gpus",
                "your GPU-hours used this month cannot be read from Slurm right now; "
                "try again in a minute or start a CPU-only session",
            )
        if quota["used_gpu_hours"] >= quota["limit_gpu_hours"]:
            raise forms.FieldError("gpus", "your GPU-hour quota for this month is used up; start a CPU-only session")

    cfg = current_app.config
    runtime_limits = SessionLimits(
        max_gpus=limits["max_gpus"],
        max_nodes=limits["max_nodes"],
        max_time_minutes=limits["max_time_minutes"],
        max_cpus=max(1, int(cfg["SESSION_DEFAULT_CPUS"])),
        max_mem_mb=max(1, int(cfg["SESSION_DEFAULT_MEM_MB"])),
        partitions=tuple(partitions),
        apps=tuple(available_apps(images)),
    )
    spec = SessionSpec(
        user=user.username,
        app=app,
        image=image.image,
        gpus=gpus,
        time_minutes=time_minutes,
        partition=partition,
        cpus=int(cfg["SESSION_DEFAULT_CPUS"]),
        mem_mb=int(cfg["SESSION_DEFAULT_MEM_MB"]),
        qos=cfg.get("SESSION_QOS"),
        account=cfg.get("SESSION_ACCOUNT"),
        workdir=str(cfg["SESSION_WORKDIR_TEMPLATE"]).format(user=user.username),
        runtime=session_runtime(image.kind),
        limits=runtime_limits,
        reservation=reservation.name if reservation is not None else None,
        nodes=nodes,
    )
    secret = secrets.token_urlsafe(32)
    image_name = image.name  # the claim's commit expires the catalogue row: no read of it after the count

    def count() -> int:
        return len(_active_sessions(user.username, state))

    # Counted again under the user's lock with the starts in flight, and this one recorded as in flight (security
    # issue #27: concurrent starts all passed the count above); the submission runs outside the lock.
    with session_limit.claimed(user.username, limits["max_sessions"], count) as claim:
        try:
            job_id = scheduler().submit(spec, secret)
        except SessionInvalid as exc:
            raise forms.FieldError(exc.field, exc.message) from exc
        record = PortalSession(
            job_id=job_id,
            owner=user.username,
            app=app,
            image=image_name,
            gpus=gpus,
            partition=partition,
            time_minutes=time_minutes,
            secret=secret,
            created_at=utcnow(),
            reservation=spec.reservation,
        )
        db.session.add(record)
        claim.settle()  # in the record's transaction: from its commit on the session counts itself
        audit("session.start", str(job_id), app=app, image=image_name, gpus=gpus, partition=partition, nodes=nodes)
        try:
            db.session.commit()
        except Exception:
            db.session.rollback()
            try:  # never leave a job running that nobody can reach or see
                scheduler().cancel(job_id, as_user=user.username)
            except SlurmError:
                current_app.logger.exception("could not cancel orphaned job %s", job_id)
            raise
    return record


def get_portal_session(job_id: int) -> PortalSession | None:
    return db.session.execute(select(PortalSession).where(PortalSession.job_id == job_id)).scalar_one_or_none()


_OPEN_SESSIONS_OF = (
    select(PortalSession)
    .where(
        PortalSession.owner == bindparam("owner"),
        PortalSession.ended_at.is_(None) | (PortalSession.ended_at >= bindparam("since")),
    )
    .order_by(PortalSession.created_at.desc())
)
#: a session whose launcher gave up stays on its owner's dashboard this long after it ended (with the reason), while
#: Slurm still lists its job (MinJobAge); other ended sessions leave at once
FAILED_SHOWN_SECONDS = 600


def my_portal_sessions(username: str) -> list[PortalSession]:
    """The user's open sessions, and those ended in the last ``FAILED_SHOWN_SECONDS`` (shown only if they failed)."""
    since = utcnow() - dt.timedelta(seconds=FAILED_SHOWN_SECONDS)
    return list(db.session.execute(_OPEN_SESSIONS_OF, {"owner": username, "since": since}).scalars())


def stop_session(user: CurrentUser, job_id: int) -> PortalSession:
    """Owner stops as themself; an admin stops anyone's as the Slurm admin identity."""
    record = get_portal_session(job_id)
    if record is None:
        abort(404, description="No such session.")
    if record.owner == user.username:
        as_user = user.username
    elif user.is_admin:
        as_user = str(current_app.config["SLURM_ADMIN_USER"])
    else:
        abort(403, description="Only the owner or an administrator may stop this session.")
    if record.ended_at is not None:
        # Stopped already (a second click, a retried API call) or ended in Slurm: nothing left to cancel. Asking Slurm
        # again only brought its "Invalid job id" back, as a 503.
        return record
    try:
        scheduler().cancel(job_id, as_user=as_user)
    except SlurmError:
        # Slurm refuses to cancel a job it has forgotten or that is ending or ended: the session is over all the same
        # (the dashboard had not looked since). Only a job that still runs by Slurm's fresh word, or no word, is an
        # error (a 503 from the API, a message on the pages).
        fresh = scheduler().state(max_age=FRESH_STATE_SECONDS)
        job = fresh.job(job_id)
        if fresh.error or (job is not None and job.user == record.owner and job.active and job.state != "COMPLETING"):
            raise
    record.ended_at = utcnow()
    record.secret = ""  # an ended session's secret is of no use to anyone: do not keep it
    action = "session.stop" if record.owner == user.username else "admin.session.stop"
    audit(action, str(job_id), owner=record.owner)
    db.session.commit()
    return record


# --- views of sessions -----------------------------------------------------------


def _port_range() -> tuple[int, int]:
    """``PROXY_PORT_RANGE``: the ports carme-launch puts session fronts on (carme_runtime.front.PORT_RANGE)."""
    lo, hi = current_app.config.get("PROXY_PORT_RANGE", PORT_RANGE)
    return int(lo), int(hi)


def _valid_endpoint(state: ClusterState, job: Job) -> Endpoint | None:
    """The endpoint the job comment names, if it may be probed at all (not yet proven: see _verified_endpoint).

    The comment is user-editable (scontrol update): only a host the job really runs on (Slurm's node names and
    addresses) and a port of the session fronts' range; slurmd, slurmrestd, databases lie outside it.
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


def _verified_endpoint(state: ClusterState, job: Job, secret: str) -> Endpoint | None:
    """The endpoint, once it proved it is this session's front (it knows the session secret).

    Editing the comment to name another port or host changes nothing: what listens there cannot answer the
    challenge for this session. The challenge sends no secret, and its answer is never shown to anyone.
    """
    ep = _valid_endpoint(state, job)
    if ep is None or not scheduler().verify_endpoint(ep, job.job_id, secret):
        return None
    return ep


def upstream_headers(secret: str, job_id: int) -> dict[str, str]:
    """What nginx adds to each proxied request: the session front's key. The app's own token (Jupyter's) is the
    front's to add: it never passes through the portal, nginx or the browser (carme_runtime.front.app_secret)."""
    return front_headers(secret, job_id)


def _endpoint_ready(ep: Endpoint, job_id: int, secret: str, spec: AppSpec) -> bool:
    """Proven to be the session's front, and the app behind it answers its readiness path."""
    if not scheduler().verify_endpoint(ep, job_id, secret):
        return False
    return scheduler().app_answers(ep, readiness_path(spec, job_id), upstream_headers(secret, job_id))


#: MariaDB's DATETIME keeps whole seconds: a ``created_at`` read back is up to 1 s off the moment it was taken (the
#: concurrent-start bench lost 2 of 6 sessions to this: a snapshot begun before their submission, but after the
#: truncated ``created_at``, did not list their jobs, and the sessions were ended while Slurm ran them)
CREATED_AT_PRECISION_S = 1.0


#: a session counts as starting (its owner's dashboard asks often, from fresh state) this long after its submission
STARTING_WINDOW_SECONDS = 600
NOT_YET_LISTED = "submitted, not yet listed by the scheduler"


def my_session_views(username: str) -> tuple[ClusterState, list[dict[str, Any]]]:
    """The user's sessions as the dashboard and ``/api/sessions`` show them.

    While one of them starts, from a state at most ``STARTING_STATE_SECONDS`` old instead of
    ``SCHEDULER_CACHE_SECONDS``: the portal sees the launcher's "ready" soon after it is published. The fresher state
    is the worker's shared cache too (single-flight), so scheduler calls do not grow with the users who wait.
    """
    records = my_portal_sessions(username)
    state = scheduler().state()
    views = session_views(state, records)
    fresh = float(current_app.config.get("STARTING_STATE_SECONDS", 0.5))
    if any(v["starting"] for v in views) and time.time() - state.fetched_at > fresh:
        state = scheduler().state(max_age=fresh)
        views = session_views(state, records)
    return state, views


def session_views(state: ClusterState, records: list[PortalSession], *, probe: bool = True) -> list[dict[str, Any]]:
    now = time.time()
    out = []
    changed = False
    for ps in records:
        was_ended = ps.ended_at is not None
        job = state.job(ps.job_id)
        if job is not None and job.user != ps.owner:
            job = None  # a recycled job id is not this session
        if job is None and state.error:
            if not was_ended:
                out.append(_unknown_view(ps))
            continue
        if job is None and not was_ended and state.fetched_at < ps.created_at.timestamp() + CREATED_AT_PRECISION_S:
            # the snapshot was asked for before this session was submitted: its job is not missing, just not in it
            # yet (ending the session here wiped its secret while Slurm ran it, seen under concurrent starts)
            out.append(_unknown_view(ps, reason=NOT_YET_LISTED))
            continue
        if job is None or job.state in TERMINAL:
            if ps.ended_at is None:
                ps.ended_at = utcnow()
                ps.secret = ""  # as in stop_session
                changed = True
            if job is None or (was_ended and not _ended_to_explain(job)):
                continue
        ready = False
        spec = app_spec(ps.app)
        lost = _lost_nodes(state, job) if job.state == "RUNNING" else []
        if job.state == "RUNNING" and spec is not None and not lost:
            ep = _valid_endpoint(state, job)
            ready = ep is not None and (not probe or _endpoint_ready(ep, ps.job_id, ps.secret, spec))
        young = now - ps.created_at.timestamp() < STARTING_WINDOW_SECONDS
        # running, its app not yet ready: shown from fresh state; pending: the dashboard watches for it to run
        starting = young and not ready and job.state == "RUNNING" and not lost and not _launch_failed(job)
        out.append(
            {
                "job_id": ps.job_id,
                "owner": ps.owner,
                "app": ps.app,
                "image": ps.image,
                "gpus": ps.gpus,
                "partition": ps.partition,
                "state": job.state,
                "reason": _reason(job, lost),
                "slurm_reason": job.reason if job.state == "PENDING" else "",
                "seconds_left": job.seconds_left(now),
                "reservation": ps.reservation,
                "ends_at": _ends_at(job),
                "nodes": list(job.nodes),
                "ready": ready,
                "starting": starting,
                "watch": starting or (young and job.state == "PENDING"),
                "connect_url": f"/sessions/{ps.job_id}/connect" if ready else None,
                # Password apps (code-server) ask the owner for the session password at first connect.
                # The app's password, never the session secret (the front's key is derived from that).
                "password": app_secret(ps.secret, ps.job_id)
                if ready and spec is not None and spec.secret_mode == "password"
                else None,
            }
        )
    if changed:
        db.session.commit()
    return out


def _ends_at(job: Job) -> str | None:
    """When a running job reaches its time limit (UTC, HH:MM), for the dashboard."""
    if job.state != "RUNNING" or not job.start_time or not job.time_limit_minutes:
        return None
    end = dt.datetime.fromtimestamp(job.start_time + job.time_limit_minutes * 60, dt.UTC)
    return end.strftime("%Y-%m-%d %H:%M UTC")


def _unknown_view(ps: PortalSession, reason: str = "scheduler unreachable") -> dict[str, Any]:
    return {
        "job_id": ps.job_id,
        "owner": ps.owner,
        "app": ps.app,
        "image": ps.image,
        "gpus": ps.gpus,
        "partition": ps.partition,
        "state": "UNKNOWN",
        "reason": reason,
        "slurm_reason": "",
        "seconds_left": None,
        "reservation": ps.reservation,
        "ends_at": None,
        "nodes": [],
        "ready": False,
        "starting": reason == NOT_YET_LISTED,
        "watch": reason == NOT_YET_LISTED,
        "connect_url": None,
        "password": None,
    }


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


def _target_for(grant: ProxyGrant, job_id: int) -> ProxyTarget:
    """The session's proven endpoint, from Slurm's state (no database)."""
    state = scheduler().state()
    job = state.job(job_id)
    if job is not None and job.user != grant.owner:
        job = None  # a recycled job id is not this session
    ep = _verified_endpoint(state, job, grant.secret) if job is not None else None
    if ep is None:
        # Each worker has its own snapshot: a session another worker already saw ready (and offered Connect for)
        # may look "starting" here. Look again with a fresher one; at most one query per PROXY_RECHECK_SECONDS
        # per worker, whatever the number of users.
        fresh = scheduler().state(max_age=float(current_app.config["PROXY_RECHECK_SECONDS"]))
        if fresh is not state:
            state, job = fresh, fresh.job(job_id)
            if job is not None and job.user != grant.owner:
                job = None
            ep = _verified_endpoint(state, job, grant.secret) if job is not None else None
    if state.error and not state.fetched_at:
        abort(503, description=state.error)
    if job is None or job.state != "RUNNING":
        abort(404, description="The session is not running.")
    if ep is None:
        abort(404, description="The session is not ready yet.")
    return ProxyTarget(ep, grant.secret, upstream_headers(grant.secret, job_id))


#: a Slurm job id as the portal's URLs carry it: ASCII digits only (str.isdigit() also takes "²", which int() refuses,
#: and other scripts' digits, which int() reads)
JOB_ID = re.compile(r"[0-9]{1,12}")


def parse_job_id(raw: str) -> int:
    if not JOB_ID.fullmatch(raw):
        raise BadRequest("job_id: must be a number")
    return int(raw)
