"""The portal's only door to the scheduler.

Views talk to a :class:`Scheduler`; production uses :class:`SlurmScheduler`
(slurmrestd + a shared, single-flight state cache). Tests and later
integration suites plug in their own object through the ``SCHEDULER_FACTORY``
setting or ``app.extensions["carme_scheduler"]``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import time
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Protocol

from carme_runtime.front import verify_endpoint as front_verify
from carme_runtime.launch import is_ready_status
from carme_runtime.launch import probe_http as launch_probe
from webui.caches import StateCache
from webui.caches import TTLMap
from webui.cluster_state import ClusterState
from webui.cluster_state import Endpoint
from webui.session_spec import SessionSpec
from webui.session_spec import build_payload
from webui.session_spec import load_apps
from webui.slurmrestd import SlurmClient
from webui.slurmrestd import SlurmError
from webui.slurmrestd_records import int_field
from webui.slurmrestd_records import parse_job
from webui.slurmrestd_records import parse_node
from webui.slurmrestd_records import parse_partition


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
            elapsed = int_field((job.get("time") or {}).get("elapsed"))
            tres = (job.get("tres") or {}).get("allocated") or []
            gpus = sum(
                int_field(t.get("count"))
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
