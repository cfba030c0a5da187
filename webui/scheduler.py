"""The portal's only door to the scheduler and to ``carme_runtime``.

Views talk to a :class:`Scheduler`; production uses :class:`SlurmScheduler`
(slurmrestd + a shared, single-flight state cache). Tests and later
integration suites plug in their own object through the ``SCHEDULER_FACTORY``
setting or ``app.extensions["carme_scheduler"]``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import random
import re
import socket
import threading
import time
from collections.abc import Callable
from collections.abc import Hashable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from functools import cached_property
from typing import Any
from typing import Protocol

import cachetools

from carme_runtime import apps as runtime_apps
from carme_runtime.apps import AppSpec
from carme_runtime.front import verify_endpoint as front_verify
from carme_runtime.hostlist import expand_hostlist
from carme_runtime.launch import is_ready_status
from carme_runtime.launch import probe_http as launch_probe
from carme_runtime.sessions import SessionLimits
from carme_runtime.sessions import SessionRequest
from carme_runtime.sessions import ValidationError
from carme_runtime.sessions import build_rest_payload
from carme_runtime.slurm_formats import UNFINISHED_STATES
from carme_runtime.slurm_formats import count_gpus
from carme_runtime.slurm_formats import parse_comment
from webui.slurmrestd import SlurmClient
from webui.slurmrestd import SlurmError


class SessionInvalid(ValueError):
    """A session request broke a limit; ``field`` names the form field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    state: str


@dataclass(frozen=True)
class Job:
    job_id: int
    user: str
    name: str
    state: str
    partition: str
    gpus: int
    nodes: tuple[str, ...] = ()
    start_time: int = 0
    end_time: int = 0
    time_limit_minutes: int = 0
    comment: str = ""
    reason: str = ""

    @property
    def active(self) -> bool:
        return self.state in UNFINISHED_STATES

    def endpoint(self) -> Endpoint | None:
        """Parse ``carme:v1;app=..;host=..;port=..;state=..`` published by ``carme-launch``."""
        fields = parse_comment(self.comment or "")
        if fields is None:
            return None
        host, port, state = fields.get("host", ""), fields.get("port", ""), fields.get("state", "")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}", host) or not port.isdigit():
            return None
        port_no = int(port)
        if not 1024 <= port_no <= 65535:
            return None
        return Endpoint(host=host, port=port_no, state=state)

    def seconds_left(self, now: float) -> int | None:
        if self.state != "RUNNING" or not self.time_limit_minutes or not self.start_time:
            return None
        return max(0, int(self.start_time + self.time_limit_minutes * 60 - now))


@dataclass(frozen=True)
class Node:
    name: str
    state: str
    gpus_total: int
    gpus_used: int
    partitions: tuple[str, ...] = ()
    address: str = ""
    hostname: str = ""

    @property
    def usable(self) -> bool:
        bad = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "MAINT", "INVAL")
        return not any(b in self.state.upper() for b in bad)


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple[str, ...]
    max_time_minutes: int | None
    state: str
    is_default: bool = False


_RESOLVE_TTL_S = 60.0


@cachetools.cached(cachetools.TTLCache(maxsize=1024, ttl=_RESOLVE_TTL_S), lock=threading.Lock())
def resolve_addresses(name: str) -> frozenset[str]:
    """IP addresses of a node name (cached for a minute; empty when it does not resolve)."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        return frozenset(str(info[4][0]) for info in infos)
    except (OSError, UnicodeError):
        return frozenset()


@dataclass(frozen=True)
class ClusterState:
    """One snapshot of the scheduler, shared by every request until the next refresh.

    Views derived from it (jobs by id and by user, GPU usage) are computed once per snapshot, on first use,
    and kept on it: a refresh makes a new snapshot, so they never outlive the data they were computed from.
    They are shared by all requests (and threads) and must not be modified.
    """

    jobs: tuple[Job, ...] = ()
    nodes: tuple[Node, ...] = ()
    partitions: tuple[Partition, ...] = ()
    fetched_at: float = 0.0
    error: str | None = None  # set when the last refresh failed; data is then the last good copy

    @cached_property
    def _jobs_by_id(self) -> dict[int, Job]:
        by_id: dict[int, Job] = {}
        for j in self.jobs:
            by_id.setdefault(j.job_id, j)
        return by_id

    @cached_property
    def _jobs_by_user(self) -> dict[str, tuple[Job, ...]]:
        by_user: dict[str, list[Job]] = {}
        for j in self.jobs:
            by_user.setdefault(j.user, []).append(j)
        return {user: tuple(jobs) for user, jobs in by_user.items()}

    def jobs_of(self, user: str) -> list[Job]:
        return list(self._jobs_by_user.get(user, ()))

    def job(self, job_id: int) -> Job | None:
        return self._jobs_by_id.get(job_id)

    def node_names_for(self, names: Sequence[str]) -> set[str]:
        """Names, addresses and hostnames of the given nodes (what a job may publish as host).

        Slurm's NodeAddr is often the node's name; the launcher publishes the address it bound to, so the
        names are also resolved (the resolver's answer for a name Slurm gave, never for the published host).
        """
        wanted = set(names)
        out = set(wanted)
        for n in self.nodes:
            if n.name in wanted:
                out.update(x for x in (n.address, n.hostname) if x)
        for name in list(out):
            out.update(resolve_addresses(name))
        return out

    def max_gpus_per_node(self, partition: str | None) -> int:
        nodes = self.nodes
        if partition:
            part = next((p for p in self.partitions if p.name == partition), None)
            members = set(part.nodes) if part else set()
            nodes = tuple(n for n in nodes if n.name in members or partition in n.partitions)
        return max((n.gpus_total for n in nodes if n.usable), default=0)

    def gpu_usage(self) -> dict[str, list[dict[str, Any]]]:
        """Free/used/queued GPUs per node and per partition (computed once per snapshot; do not modify)."""
        return self._gpu_usage

    @cached_property
    def _gpu_usage(self) -> dict[str, list[dict[str, Any]]]:
        queued: dict[str, int] = {}
        for j in self.jobs:
            if j.state == "PENDING":
                for part in j.partition.split(","):
                    queued[part] = queued.get(part, 0) + j.gpus
        per_node = [
            {
                "name": n.name,
                "state": n.state,
                "total": n.gpus_total,
                "used": n.gpus_used,
                "free": max(0, n.gpus_total - n.gpus_used) if n.usable else 0,
            }
            for n in self.nodes
        ]
        per_part = []
        for p in self.partitions:
            members = [n for n in self.nodes if n.name in p.nodes]
            per_part.append(
                {
                    "name": p.name,
                    "state": p.state,
                    "total": sum(n.gpus_total for n in members),
                    "used": sum(n.gpus_used for n in members),
                    "free": sum(max(0, n.gpus_total - n.gpus_used) for n in members if n.usable),
                    "queued": queued.get(p.name, 0),
                }
            )
        return {"nodes": per_node, "partitions": per_part}


@dataclass(frozen=True)
class SessionSpec:
    """What the start form asks for, after the portal's own checks."""

    user: str
    app: str
    image: str
    gpus: int
    time_minutes: int
    partition: str | None
    cpus: int
    mem_mb: int
    runtime: str = "apptainer"  # carme_runtime runtime name: "apptainer" (image) or "none" (environment)
    qos: str | None = None
    account: str | None = None
    workdir: str = ""
    limits: SessionLimits = field(default_factory=SessionLimits)


class Scheduler(Protocol):
    def state(self, max_age: float | None = None) -> ClusterState: ...

    def submit(self, spec: SessionSpec, secret: str) -> int: ...

    def cancel(self, job_id: int, *, as_user: str) -> None: ...

    def gpu_hours_used(self, user: str, since: dt.datetime) -> float | None: ...

    def app_answers(self, endpoint: Endpoint, path: str, headers: Mapping[str, str]) -> bool: ...

    def verify_endpoint(self, endpoint: Endpoint, job_id: int, secret: str) -> bool:
        """True when ``endpoint`` proves it is job ``job_id``'s session front (HMAC challenge with ``secret``)."""
        ...

    def queries_issued(self) -> int: ...


# --- parsing slurmrestd v0.0.38 records --------------------------------------


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, dict):  # v0.0.39+ style {"set": true, "number": n}
        value = value.get("number", default)
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def parse_job(raw: Mapping[str, Any]) -> Job:
    state = raw.get("job_state") or ""
    if isinstance(state, list):
        state = state[0] if state else ""
    state = str(state).upper()
    tres = str(raw.get("tres_alloc_str") or "") if state != "PENDING" else ""
    gpus = (
        count_gpus(tres)
        or count_gpus(str(raw.get("tres_per_node") or ""))
        or count_gpus(str(raw.get("tres_req_str") or ""))
    )
    return Job(
        job_id=_int(raw.get("job_id")),
        user=str(raw.get("user_name") or ""),
        name=str(raw.get("name") or ""),
        state=state,
        partition=str(raw.get("partition") or ""),
        gpus=gpus,
        nodes=tuple(expand_hostlist(str(raw.get("nodes") or ""))),
        start_time=_int(raw.get("start_time")),
        end_time=_int(raw.get("end_time")),
        time_limit_minutes=_int(raw.get("time_limit")),
        comment=str(raw.get("comment") or ""),
        reason=str(raw.get("state_reason") or ""),
    )


def parse_node(raw: Mapping[str, Any]) -> Node:
    state = raw.get("state") or ""
    flags = raw.get("state_flags") or []
    state_text = "+".join([str(state), *map(str, flags)]) if flags else str(state)
    return Node(
        name=str(raw.get("name") or ""),
        state=state_text.lower(),
        gpus_total=count_gpus(str(raw.get("gres") or "")),
        gpus_used=count_gpus(str(raw.get("gres_used") or "")),
        partitions=tuple(str(p) for p in raw.get("partitions") or []),
        address=str(raw.get("address") or ""),
        hostname=str(raw.get("hostname") or ""),
    )


def parse_partition(raw: Mapping[str, Any]) -> Partition:
    max_time = raw.get("max_time_limit", raw.get("maximum_time"))
    limit = _int(max_time, -1)
    flags = [str(f).upper() for f in raw.get("flags") or []]
    return Partition(
        name=str(raw.get("name") or ""),
        nodes=tuple(expand_hostlist(str(raw.get("nodes") or ""))),
        # INFINITE is 0xffffffff in 22.05; treat anything huge or negative as "no limit".
        max_time_minutes=limit if 0 < limit < 0xFFFFFFFE else None,
        state=str(raw.get("state") or "").lower(),
        is_default="DEFAULT" in flags,
    )


# --- the shared cache ---------------------------------------------------------


class StateCache:
    """Scheduler state fetched at most once per ``ttl`` seconds per process.

    Thread-safe and single-flight: while one request refreshes, the others
    wait for its result instead of issuing their own queries. A failed refresh
    is cached for ``ttl`` too (an outage must not turn into a query storm) and
    keeps the last good data, flagged with the error.
    """

    def __init__(self, fetch: Callable[[], ClusterState], ttl: float, clock: Callable[[], float] = time.monotonic):
        self._fetch = fetch
        self.ttl = ttl
        self._clock = clock
        self._cond = threading.Condition()
        self._state: ClusterState | None = None
        self._stamp = 0.0
        self._refreshing = False
        self.refreshes = 0

    def get(self, max_age: float | None = None) -> ClusterState:
        """The cached state, refreshed when older than ``ttl`` (or than ``max_age`` when that is smaller)."""
        limit = self.ttl if max_age is None else min(self.ttl, max_age)
        with self._cond:
            while True:
                if self._state is not None and self._clock() - self._stamp < limit:
                    return self._state
                if not self._refreshing:
                    self._refreshing = True
                    break
                self._cond.wait(timeout=30)
        new: ClusterState | None = None
        try:
            new = self._fetch()
        except SlurmError as exc:
            old = self._state or ClusterState()
            new = ClusterState(old.jobs, old.nodes, old.partitions, old.fetched_at, error=str(exc))
        finally:
            with self._cond:
                if new is not None:
                    self._state = new
                    self._stamp = self._clock()
                    self.refreshes += 1
                self._refreshing = False
                self._cond.notify_all()
        assert new is not None
        return new

    def invalidate(self) -> None:
        with self._cond:
            self._stamp = -self.ttl - 1.0


_MISS = object()


class TTLMap:
    """Values kept for ``ttl`` seconds (or the ``ttl`` given to :meth:`put`), thread-safe: a cachetools
    ``TLRUCache`` (per-item expiry, least recently used out first beyond ``maxsize``) behind a lock.

    ``jitter``: each value is kept between ``(1 - jitter) * ttl`` and ``ttl``, at random, so values stored at the same
    moment (every user's quota after a restart) do not all expire, and get fetched again, at the same moment.
    """

    def __init__(
        self, ttl: float, clock: Callable[[], float] = time.monotonic, *, jitter: float = 0.0, maxsize: int = 4096
    ):
        self.ttl = ttl
        self.jitter = jitter
        self._lock = threading.Lock()
        # the value is stored with how long to keep it; ttu (time to use) turns that into the expiry time
        self._data: cachetools.TLRUCache[Hashable, tuple[Any, float]] = cachetools.TLRUCache(
            maxsize=maxsize, ttu=lambda _key, item, now: now + item[1], timer=clock
        )

    def get(self, key: Hashable) -> tuple[bool, Any]:
        with self._lock:
            item = self._data.get(key, _MISS)
        if item is _MISS:
            return False, None
        assert isinstance(item, tuple)
        return True, item[0]

    def put(self, key: Hashable, value: Any, ttl: float | None = None) -> None:
        keep = self.ttl if ttl is None else ttl
        if self.jitter:
            keep *= 1.0 - self.jitter * random.random()
        with self._lock:
            self._data[key] = (value, keep)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


# --- carme_runtime adapter ----------------------------------------------------

APPS_CACHE_SECONDS = 60.0


@cachetools.cached(cachetools.TTLCache(maxsize=16, ttl=APPS_CACHE_SECONDS), lock=threading.Lock())
def load_apps(dirs: Sequence[str]) -> dict[str, AppSpec]:
    """Built-in and site app specs (carme_runtime), re-read at most once a minute."""
    return runtime_apps.load_apps(list(dirs))


def readiness_path(app: AppSpec, job_id: int) -> str:
    """The app's readiness URL path (its ``readiness_path`` template, e.g. ``{base_url}api/status``)."""
    base_url = app.base_url(job_id)
    values = {"base_url": base_url, "base_path": base_url.rstrip("/") or "/", "job_id": str(job_id)}
    try:
        return app.readiness_path.format_map(values)
    except (KeyError, ValueError):
        return base_url


def build_payload(spec: SessionSpec, secret: str, apps: Mapping[str, AppSpec], limits: SessionLimits) -> dict[str, Any]:
    """Validate with carme_runtime and build the slurmrestd submit body."""
    app = apps.get(spec.app)
    if app is None:
        raise SessionInvalid("app", f"unknown app {spec.app!r}")
    req = SessionRequest(
        user=spec.user,
        app=spec.app,
        image=spec.image,
        gpus=spec.gpus,
        cpus=spec.cpus,
        mem_mb=spec.mem_mb,
        time_minutes=spec.time_minutes,
        partition=spec.partition or "",
        qos=spec.qos or "",
        account=spec.account or "",
        workdir=spec.workdir,
    )
    try:
        req.validate(limits)
        return dict(build_rest_payload(req, app, spec.runtime, secret))
    except ValidationError as exc:
        raise SessionInvalid(exc.field, exc.message) from exc


# --- production scheduler -----------------------------------------------------


class SlurmScheduler:
    def __init__(
        self,
        client: SlurmClient,
        *,
        service_user: str,
        cache_seconds: float,
        quota_cache_seconds: float,
        app_dirs: Sequence[str],
        probe_timeout: float = 1.0,
        probe_cache_seconds: float = 5.0,
        verify_cache_seconds: float = 60.0,
    ):
        self.client = client
        self.service_user = service_user
        self.app_dirs = tuple(app_dirs)
        self.probe_timeout = probe_timeout
        self.cache = StateCache(self._fetch, cache_seconds)
        self._quota = TTLMap(quota_cache_seconds, jitter=0.25)
        self._probes = TTLMap(probe_cache_seconds)
        self.probe_cache_seconds = probe_cache_seconds
        self._verified = TTLMap(verify_cache_seconds)

    def _fetch(self) -> ClusterState:
        jobs = self.client.jobs(self.service_user)
        nodes = self.client.nodes(self.service_user)
        parts = self.client.partitions(self.service_user)
        return ClusterState(
            jobs=tuple(parse_job(j) for j in jobs),
            nodes=tuple(parse_node(n) for n in nodes),
            partitions=tuple(parse_partition(p) for p in parts),
            fetched_at=time.time(),
        )

    def state(self, max_age: float | None = None) -> ClusterState:
        return self.cache.get(max_age)

    def submit(self, spec: SessionSpec, secret: str) -> int:
        payload = build_payload(spec, secret, load_apps(self.app_dirs), spec.limits)
        job_id = self.client.submit(spec.user, payload)
        self.cache.invalidate()
        return job_id

    def cancel(self, job_id: int, *, as_user: str) -> None:
        self.client.cancel(as_user, job_id)
        self.cache.invalidate()

    def gpu_hours_used(self, user: str, since: dt.datetime) -> float | None:
        key = (user, int(since.timestamp()))
        hit, value = self._quota.get(key)
        if hit:
            return value  # type: ignore[no-any-return]
        try:
            jobs = self.client.accounting_jobs(user, int(since.timestamp()))
        except SlurmError:
            return None
        total = 0.0
        for job in jobs:
            elapsed = _int((job.get("time") or {}).get("elapsed"))
            tres = (job.get("tres") or {}).get("allocated") or []
            gpus = sum(
                _int(t.get("count"))
                for t in tres
                if isinstance(t, Mapping) and t.get("type") == "gres" and t.get("name") == "gpu"
            )
            total += gpus * elapsed / 3600.0
        self._quota.put(key, total)
        return total

    def app_answers(self, endpoint: Endpoint, path: str, headers: Mapping[str, str]) -> bool:
        key = (endpoint.host, endpoint.port, path)
        hit, value = self._probes.get(key)
        if hit and value:
            return True
        ok = probe_http(endpoint, path, headers, self.probe_timeout)
        self._probes.put(key, ok)
        return ok

    def verify_endpoint(self, endpoint: Endpoint, job_id: int, secret: str) -> bool:
        """Challenge the endpoint (carme_runtime.front); a proof is kept ``verify_cache_seconds``, a refusal
        ``probe_cache_seconds`` (a comment pointing at nothing must not cost a probe per proxied request).

        The key holds the secret's digest: a cached proof is only ever used for the same session.
        """
        digest = hashlib.sha256(secret.encode()).hexdigest()
        key = (job_id, endpoint.host, endpoint.port, digest)
        hit, value = self._verified.get(key)
        if hit:
            return bool(value)
        ok = front_verify(endpoint.host, endpoint.port, job_id, secret, self.probe_timeout)
        self._verified.put(key, ok, None if ok else self.probe_cache_seconds)
        return ok

    def queries_issued(self) -> int:
        return self.client.queries


def probe_http(endpoint: Endpoint, path: str, headers: Mapping[str, str], timeout: float) -> bool:
    """True when the app answers its readiness path with 2xx/3xx (redirects not followed)."""
    status = launch_probe(endpoint.host, endpoint.port, path, headers, timeout)
    return is_ready_status(status)


def from_config(config: Mapping[str, Any]) -> Scheduler:
    factory = config.get("SCHEDULER_FACTORY")
    if factory:
        module_name, _, attr = str(factory).partition(":")
        built: Scheduler = getattr(importlib.import_module(module_name), attr)(config)
        return built
    from webui.slurmrestd import make_client

    return SlurmScheduler(
        make_client(config),
        service_user=str(config["SLURM_SERVICE_USER"]),
        cache_seconds=float(config["SCHEDULER_CACHE_SECONDS"]),
        quota_cache_seconds=float(config["QUOTA_CACHE_SECONDS"]),
        app_dirs=tuple(config["CARME_APP_DIRS"]),
        probe_timeout=float(config["READINESS_TIMEOUT_SECONDS"]),
        probe_cache_seconds=float(config["READINESS_CACHE_SECONDS"]),
        verify_cache_seconds=float(config.get("PROXY_VERIFY_CACHE_SECONDS", 60.0)),
    )
