# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's only door to the scheduler.

Features talk to a :class:`Scheduler` (:func:`current_scheduler`); production uses :class:`SlurmScheduler`
(slurmrestd + a shared, single-flight state cache). Tests and integration suites plug in their own object through the
``SCHEDULER_FACTORY`` setting or ``app.extensions["carme_scheduler"]``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import json
import math
import os
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any
from typing import Protocol

from flask import current_app

from carme_runtime.front import verify_endpoint as front_verify
from carme_runtime.gpu_hours import gpu_hours_within
from carme_runtime.gpu_hours import job_record
from carme_runtime.launch import is_ready_status
from carme_runtime.launch import probe_http as launch_probe
from webui.caches import SingleFlight
from webui.caches import SnapshotCache
from webui.caches import TTLMap
from webui.slurm.changed import ChangedList
from webui.slurm.client import SlurmClient
from webui.slurm.errors import SlurmError
from webui.slurm.errors import SlurmUnavailable
from webui.slurm.limits import AssocLimits
from webui.slurm.limits import LimitReader
from webui.slurm.limits import QosLimits
from webui.slurm.listing import trim_heap
from webui.slurm.records import AccountJob
from webui.slurm.records import SlurmProject
from webui.slurm.records import int_field
from webui.slurm.records import parse_account_job
from webui.slurm.records import parse_job
from webui.slurm.records import parse_node
from webui.slurm.records import parse_partition
from webui.slurm.records import parse_projects
from webui.slurm.session_spec import SessionSpec
from webui.slurm.session_spec import build_payload
from webui.slurm.session_spec import load_apps
from webui.slurm.state import ClusterState
from webui.slurm.state import Endpoint
from webui.slurm.state import Job
from webui.tokens import token_hash


class Scheduler(Protocol):
    def state(self, max_age: float | None = None) -> ClusterState: ...

    def submit(self, spec: SessionSpec, secret: str) -> int: ...

    def cancel(self, job_id: int, *, as_user: str) -> None: ...

    def gpu_hours_used(self, user: str, since: dt.datetime) -> float | None: ...

    def job_history(self, user: str, since: dt.datetime) -> list[AccountJob]:
        """The user's jobs since ``since`` from Slurm's accounting, newest first; :class:`SlurmError` if unreadable."""
        ...

    def projects(self, max_age: float | None = None) -> list[SlurmProject]:
        """Every project (Slurm account) with its managers, members and GPU budget; :class:`SlurmError` if
        unreadable."""
        ...

    def project_jobs(self, account: str, since: dt.datetime, until: dt.datetime) -> list[AccountJob]:
        """The account's jobs that ran in ``[since, until)``, each with its GPU-hours inside that period (the one
        rule), newest first; :class:`SlurmError` if unreadable."""
        ...

    def associations_of(self, user: str) -> list[AssocLimits]: ...  # webui.slurm.limits.LimitReader

    def qos_limits(self) -> dict[str, QosLimits]: ...

    def app_answers(
        self, endpoint: Endpoint, path: str, headers: Mapping[str, str], *, patient: bool = False
    ) -> bool: ...

    def verify_endpoint(self, endpoint: Endpoint, job_id: int, secret: str, *, patient: bool = False) -> bool:
        """True when ``endpoint`` proves it is job ``job_id``'s session front (HMAC challenge with ``secret``).
        ``patient``: a refusal this worker remembers is set aside and the front is given ``patient_timeout``."""
        ...

    def queries_issued(self) -> int: ...


def state_cache(
    fetch: Callable[[], ClusterState],
    ttl: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    fallback: Callable[[], ClusterState | None] | None = None,
) -> SnapshotCache[ClusterState]:
    """Scheduler state fetched at most once per ``ttl`` seconds per process, single-flight. A failed refresh
    (:class:`SlurmError`) keeps the last good data flagged with the error, or ``fallback()``'s when that is newer."""

    def on_error(last: ClusterState | None, exc: Exception) -> ClusterState:
        old = last or ClusterState()
        shared = fallback() if fallback is not None else None
        if shared is not None and shared.fetched_at > old.fetched_at:
            old = shared
        return ClusterState(old.jobs, old.nodes, old.partitions, old.fetched_at, error=str(exc))

    return SnapshotCache(fetch, ttl, on_error=on_error, errors=(SlurmError,), clock=clock)


class SlurmScheduler:
    def __init__(
        self,
        client: SlurmClient,
        *,
        service_user: str,
        cache_seconds: float,
        quota_cache_seconds: float,
        app_dirs: Sequence[str],
        associations_cache_seconds: float = 300.0,
        probe_timeout: float = 1.0,
        patient_timeout: float = 5.0,
        probe_cache_seconds: float = 5.0,
        verify_cache_seconds: float = 60.0,
        share_file: str | None = None,
    ):
        self.client = client
        self.service_user = service_user
        self.app_dirs = tuple(app_dirs)
        self.probe_timeout = probe_timeout
        self.patient_timeout = patient_timeout
        # Each gunicorn worker has its own snapshot; one that has not looked for a while would, in a scheduler outage,
        # know nothing of the sessions started since (and refuse their proxy). Every good fetch is also written to
        # ``share_file`` (only the portal's user can reach it); a failed refresh falls back to it when it is newer.
        self.share_file = share_file
        self.cache = state_cache(self._fetch, cache_seconds, fallback=self._shared_state if share_file else None)
        self._jobs = ChangedList(client, "jobs", parse_job)  # read again only after a change (webui/slurm/changed.py)
        # nodes and partitions (in full: 2.3 MB for 1,000 nodes) at most every cache_seconds, also for a fresher state
        self._layout: SingleFlight[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = SingleFlight(cache_seconds)
        # GPU-hours: the month's jobs per account (one slurmdbd query per account and ``quota_cache_seconds``, whatever
        # the number of users), the associations (who is in which account) for longer; both asked as the service user
        self._account_jobs: SingleFlight[tuple[dict[str, Any], ...]] = SingleFlight(quota_cache_seconds, jitter=0.25)
        self._assocs: SingleFlight[dict[str, frozenset[str]]] = SingleFlight(associations_cache_seconds)
        self._own_assocs: SingleFlight[frozenset[str]] = SingleFlight(associations_cache_seconds, maxsize=4096)
        self._projects: SingleFlight[list[SlurmProject]] = SingleFlight(quota_cache_seconds)  # budgets change
        self._limits = LimitReader(client, service_user, quota_cache_seconds)  # so do limits, with a deploy
        self._probes = TTLMap(probe_cache_seconds)
        self.probe_cache_seconds = probe_cache_seconds
        self._verified = TTLMap(verify_cache_seconds)

    def _fetch(self) -> ClusterState:
        # "as of" the moment the job list was asked for: a job submitted after that may be missing from it
        started = time.time()
        fresh, jobs = self._jobs.read(self.service_user)  # fresh None: no job changed since the last read
        nodes, parts = self._layout.get(
            "all", lambda: (self.client.nodes(self.service_user), self.client.partitions(self.service_user))
        )
        if fresh is not None:  # written when the jobs changed; the pages the read used go back (listing.py)
            if self.share_file:
                self._share({"fetched_at": started, "jobs": [asdict(j) for j in fresh], "nodes": nodes, "parts": parts})
            trim_heap()
        return _state_of(jobs, nodes, parts, started)

    def _share(self, raw: dict[str, Any]) -> None:
        assert self.share_file
        tmp = f"{self.share_file}.{os.getpid()}.{threading.get_ident()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(raw, out, separators=(",", ":"))
            os.replace(tmp, self.share_file)  # readers see the old file or the new one, never half of one
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _shared_state(self) -> ClusterState | None:
        """The last good state any worker wrote, or None (no file, unreadable, not what a worker writes)."""
        assert self.share_file
        try:
            with open(self.share_file, encoding="utf-8") as f:
                raw = json.load(f)
            jobs = tuple(Job(**{**j, "nodes": tuple(j["nodes"])}) for j in raw["jobs"])  # as _fetch wrote them
            return _state_of(jobs, raw["nodes"], raw["parts"], raw["fetched_at"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

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
        """The user's GPU-hours since ``since`` in all their accounts; ``None`` when Slurm cannot say.

        At most ``quota_cache_seconds`` old (as the per-user cache this replaces): the account's jobs are fetched at
        most once per that interval per process, by one caller while the others wait for it, and each user's sum is
        taken from their own jobs (``user`` field) of their own accounts only.
        """
        since_ts = int(since.timestamp())
        try:
            total, now = 0.0, time.time()
            for account in sorted(self._accounts_of(user)):
                jobs = self._jobs_of_account(account, since_ts)
                total += sum(job_gpu_hours(j, since_ts, now) for j in jobs if j.get("user") == user)
        except SlurmError:
            return None
        return total

    def job_history(self, user: str, since: dt.datetime) -> list[AccountJob]:
        """Asked with the user's own token (slurmrestd 22.05 takes no ``users=``: the user's accounts are asked, and
        their jobs kept); one record per job id, the newest first."""
        accounts = sorted(self._accounts_of(user))
        if not accounts:
            return []
        raw = self.client.account_jobs(user, accounts, int(since.timestamp()))
        jobs = {
            int_field(j.get("job_id")): parse_account_job(j, job_gpu_hours(j)) for j in raw if j.get("user") == user
        }
        return [jobs[k] for k in sorted(jobs, reverse=True)]

    def projects(self, max_age: float | None = None) -> list[SlurmProject]:
        def fetch() -> list[SlurmProject]:  # the associations as the limits read them (one query for both)
            accounts = self.client.accounts(self.service_user)
            return parse_projects(accounts, self._limits.all_associations(max_age))

        return self._projects.get("all", fetch, max_age=max_age)

    def project_jobs(self, account: str, since: dt.datetime, until: dt.datetime) -> list[AccountJob]:
        lo, hi, now = since.timestamp(), until.timestamp(), time.time()
        jobs = {}
        for raw in self._jobs_of_account(account, int(lo)):
            job = parse_account_job(raw, job_gpu_hours(raw, lo, now, until=hi))
            if job.start_time and job.start_time < hi:
                jobs[job.job_id] = job
        return [jobs[k] for k in sorted(jobs, reverse=True)]

    def _jobs_of_account(self, account: str, since_ts: int) -> tuple[dict[str, Any], ...]:
        def fetch() -> tuple[dict[str, Any], ...]:
            jobs = self.client.account_jobs(self.service_user, [account], since_ts)
            return tuple(j for j in jobs if j.get("account", account) == account)

        return self._account_jobs.get((account, since_ts), fetch)

    def _accounts_of(self, user: str) -> frozenset[str]:
        """The user's accounts from all associations (one query, cached); a user missing there has the map read again
        (at most every :data:`ASSOC_MISS_SECONDS`), then their own associations are asked with their own token (the
        service user may not see all associations where ``PrivateData=users`` and it is no Operator)."""
        by_user = self._assocs.get("all", self._all_associations)
        if user not in by_user:
            by_user = self._assocs.get("all", self._all_associations, max_age=ASSOC_MISS_SECONDS)
        if user in by_user:
            return by_user[user]
        return self._own_assocs.get(user, lambda: _accounts_by_user(self.client.associations(user, of_user=user))[user])

    def _all_associations(self) -> dict[str, frozenset[str]]:
        return _accounts_by_user(self.client.associations(self.service_user))

    def associations_of(self, user: str) -> list[AssocLimits]:
        return self._limits.associations_of(user)

    def qos_limits(self) -> dict[str, QosLimits]:
        return self._limits.qos_limits()

    def app_answers(self, endpoint: Endpoint, path: str, headers: Mapping[str, str], *, patient: bool = False) -> bool:
        key = (endpoint.host, endpoint.port, path)
        hit, value = self._probes.get(key)
        if hit and value:
            return True
        ok = probe_http(endpoint, path, headers, self.patient_timeout if patient else self.probe_timeout)
        self._probes.put(key, ok)
        return ok

    def verify_endpoint(self, endpoint: Endpoint, job_id: int, secret: str, *, patient: bool = False) -> bool:
        """Challenge the endpoint (carme_runtime.front); a proof is kept ``verify_cache_seconds``, a refusal
        ``probe_cache_seconds`` (a comment pointing at nothing must not cost a probe per proxied request).
        ``patient`` (an owner's click on Connect): a remembered refusal is set aside, and the front gets
        ``patient_timeout`` instead of ``probe_timeout`` (on a loaded node a 1-s challenge can fail).

        The key holds the secret's digest: a cached proof is only ever used for the same session.
        """
        key = (job_id, endpoint.host, endpoint.port, token_hash(secret))
        hit, value = self._verified.get(key)
        if hit and (value or not patient):
            return bool(value)
        timeout = self.patient_timeout if patient else self.probe_timeout
        ok = front_verify(endpoint.host, endpoint.port, job_id, secret, timeout)
        self._verified.put(key, ok, None if ok else self.probe_cache_seconds)
        return ok

    def queries_issued(self) -> int:
        return self.client.queries


#: a user not in the cached associations has them read again when they are at least this old
ASSOC_MISS_SECONDS = 30.0


class _AccountsByUser(dict[str, frozenset[str]]):
    def __missing__(self, key: str) -> frozenset[str]:
        return frozenset()


def _accounts_by_user(assocs: Sequence[Mapping[str, Any]]) -> dict[str, frozenset[str]]:
    found: dict[str, set[str]] = {}
    for a in assocs:
        if a.get("user") and a.get("account"):
            found.setdefault(str(a["user"]), set()).add(str(a["account"]))
    return _AccountsByUser({u: frozenset(accts) for u, accts in found.items()})


def job_gpu_hours(
    job: Mapping[str, Any], since: float = 0.0, now: float | None = None, *, until: float = math.inf
) -> float:
    """GPU-hours of one accounting record (any version) in ``[since, until)``: the one rule,
    :func:`carme_runtime.gpu_hours.gpu_hours_within` (a job that began before ``since`` counts from there, as Slurm's
    budget after its monthly reset; one still running up to ``now``)."""
    return gpu_hours_within(job_record(job), since, until, time.time() if now is None else now)


def _state_of(jobs: tuple[Job, ...], nodes: Sequence[Any], parts: Sequence[Any], fetched_at: float) -> ClusterState:
    """Parsed jobs (webui/slurm/changed.py keeps them between refreshes) with the nodes and partitions as read."""
    return ClusterState(jobs, tuple(map(parse_node, nodes)), tuple(map(parse_partition, parts)), float(fetched_at))


def probe_http(endpoint: Endpoint, path: str, headers: Mapping[str, str], timeout: float) -> bool:
    """True when the app answers its readiness path with 2xx/3xx (redirects not followed)."""
    return is_ready_status(launch_probe(endpoint.host, endpoint.port, path, headers, timeout))


def from_config(config: Mapping[str, Any]) -> Scheduler:
    factory = config.get("SCHEDULER_FACTORY")
    if factory:
        module_name, _, attr = str(factory).partition(":")
        built: Scheduler = getattr(importlib.import_module(module_name), attr)(config)
        return built
    from webui.slurm.client import make_client

    return SlurmScheduler(
        make_client(config),
        service_user=str(config["SLURM_SERVICE_USER"]),
        cache_seconds=float(config["SCHEDULER_CACHE_SECONDS"]),
        quota_cache_seconds=float(config["QUOTA_CACHE_SECONDS"]),
        associations_cache_seconds=float(config.get("QUOTA_ASSOCIATIONS_CACHE_SECONDS", 300.0)),
        app_dirs=tuple(config["CARME_APP_DIRS"]),
        probe_timeout=float(config["READINESS_TIMEOUT_SECONDS"]),
        patient_timeout=float(config.get("CONNECT_PROBE_TIMEOUT_SECONDS", 5.0)),
        probe_cache_seconds=float(config["READINESS_CACHE_SECONDS"]),
        verify_cache_seconds=float(config.get("PROXY_VERIFY_CACHE_SECONDS", 60.0)),
        share_file=shared_state_file(config),
    )


def shared_state_file(config: Mapping[str, Any]) -> str | None:
    """``SCHEDULER_STATE_FILE``, else a file in the service's private runtime directory (systemd's
    ``RuntimeDirectory=``, mode 0700, named in ``$RUNTIME_DIRECTORY``), else none (one process: nothing to share)."""
    if config.get("SCHEDULER_STATE_FILE"):
        return str(config["SCHEDULER_STATE_FILE"])
    runtime_dir = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    return os.path.join(runtime_dir, "scheduler-state.json") if runtime_dir else None


def current_scheduler() -> Scheduler:
    """The app's scheduler (made by create_app: ``SCHEDULER``, ``SCHEDULER_FACTORY`` or :class:`SlurmScheduler`)."""
    sched: Scheduler = current_app.extensions["carme_scheduler"]
    return sched


def live_state() -> ClusterState:
    """The scheduler's state; :class:`SlurmUnavailable` when it has never been read (nothing to decide on)."""
    state = current_scheduler().state()
    if state.error and not state.fetched_at:
        raise SlurmUnavailable(state.error)
    return state


def default_partition(state: ClusterState) -> str | None:
    """``SESSION_DEFAULT_PARTITION``, else Slurm's default partition, else the first one."""
    configured = current_app.config.get("SESSION_DEFAULT_PARTITION")
    if configured:
        return str(configured)
    default = next((p.name for p in state.partitions if p.is_default), None)
    return default or (state.partitions[0].name if state.partitions else None)
