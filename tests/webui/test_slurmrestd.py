# SPDX-License-Identifier: GPL-3.0-or-later
"""slurmrestd client: JWT minting, error mapping, the shared cache, and the outage banner.

Real conditions only: a closed 127.0.0.1 port for "slurmctld/slurmrestd down", and a
small HTTP server on 127.0.0.1 answering like slurmrestd 22.05 (v0.0.38) or 24.11 (v0.0.41; checking the JWT)
until tests/fixtures/hostslurm.py provides the real daemons.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import fields
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from typing import ClassVar

import jwt
import pytest
from flask import Flask

from carme_runtime.hostlist import expand_hostlist
from carme_runtime.slurm_formats import count_gpus
from tests.fixtures.net import QuietHandler
from tests.fixtures.net import serve_http
from tests.fixtures.slurm_jwt import decode_jwt
from webui.slurm.client import SlurmClient
from webui.slurm.errors import SlurmError
from webui.slurm.errors import SlurmUnavailable
from webui.slurm.jwt_tokens import TokenRefused
from webui.slurm.jwt_tokens import TokenSource
from webui.slurm.jwt_tokens import mint_jwt
from webui.slurm.records import parse_job
from webui.slurm.records import parse_node
from webui.slurm.scheduler import SlurmScheduler
from webui.slurm.scheduler import state_cache
from webui.slurm.state import ClusterState
from webui.slurm.state import Job

from .conftest import closed_port
from .conftest import log_in_as
from .conftest import make_app
from .conftest import post

KEY = b"k" * 32


# --- JWT -----------------------------------------------------------------------------


def test_jwt_has_slurm_claims_and_verifies() -> None:
    token = mint_jwt(KEY, "alice", lifetime=300, now=1_700_000_000)
    header, _, _ = token.split(".")
    assert decode_jwt(KEY, token, now=1_700_000_100) == {"sun": "alice", "iat": 1_700_000_000, "exp": 1_700_000_300}
    assert json.loads(__import__("base64").urlsafe_b64decode(header + "==")) == {"alg": "HS256", "typ": "JWT"}
    with pytest.raises(ValueError, match=r"[Ss]ignature"):
        decode_jwt(b"x" * 32, token, now=1_700_000_100)


def test_jwt_decode_checks_exp_and_alg() -> None:
    token = mint_jwt(KEY, "alice", lifetime=300, now=1_700_000_000)
    with pytest.raises(ValueError, match="expired"):
        decode_jwt(KEY, token, now=1_700_000_300)
    with pytest.raises(ValueError, match="expired"):
        decode_jwt(KEY, token)  # against the clock: long past
    claims = {"sun": "alice", "iat": 1_700_000_000, "exp": 1_700_000_300}
    for alg in ("HS384", "HS512"):
        with pytest.raises(ValueError, match="alg"):
            decode_jwt(KEY, jwt.encode(claims, KEY * 2, algorithm=alg), now=1_700_000_100)
    unsigned = jwt.encode(claims, None, algorithm="none")
    with pytest.raises(ValueError, match="alg"):
        decode_jwt(KEY, unsigned, now=1_700_000_100)
    with pytest.raises(ValueError, match="exp"):
        decode_jwt(KEY, jwt.encode({"sun": "alice"}, KEY, algorithm="HS256"))
    with pytest.raises(ValueError, match="sun"):
        decode_jwt(KEY, jwt.encode({"exp": 2_000_000_000}, KEY, algorithm="HS256"), now=1_700_000_100)


@pytest.mark.parametrize("name", ["root", "slurm", "Alice", "al ice", "alice;id", "$(id)", "", "a" * 40, "-x"])
def test_jwt_refused_for_privileged_or_unsafe_names(name: str) -> None:
    with pytest.raises(TokenRefused):
        mint_jwt(KEY, name)


def test_jwt_refused_for_extra_forbidden_names_and_short_keys() -> None:
    with pytest.raises(TokenRefused):
        mint_jwt(KEY, "admin", forbidden={"admin"})
    with pytest.raises(TokenRefused):
        mint_jwt(b"short", "alice")


def test_token_source_reads_key_file_and_caches(tmp_path: Path) -> None:
    key = tmp_path / "jwt.key"
    key.write_bytes(KEY)
    source = TokenSource(str(key), lifetime=600)
    first = source.token("alice")
    assert source.token("alice") == first
    assert decode_jwt(KEY, first)["sun"] == "alice"
    with pytest.raises(SlurmUnavailable, match="JWT key"):
        TokenSource(str(tmp_path / "missing.key")).token("alice")


# --- parsing ---------------------------------------------------------------------------


def test_hostlist_and_gres_parsing() -> None:
    assert expand_hostlist("gpu[01-03,07],cpu1") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]
    assert expand_hostlist("") == []
    assert count_gpus("gpu:4") == 4
    assert count_gpus("gpu:a100:2(S:0-1)") == 2
    assert count_gpus("gpu:1(IDX:0)") == 1
    assert count_gpus("gpu:0(IDX:N/A)") == 0
    assert count_gpus("cpu=1,mem=100M,node=1,billing=1,gres/gpu=2,gres/gpu:a100=2") == 2
    assert count_gpus("gres:gpu:3") == 3
    assert count_gpus("(null)") == 0


def test_job_and_node_records() -> None:
    job = parse_job(
        {
            "job_id": 7,
            "user_name": "alice",
            "job_state": "RUNNING",
            "partition": "gpu",
            "nodes": "vm",
            "tres_alloc_str": "cpu=1,gres/gpu=1",
            "comment": "carme:v1;app=jupyterlab;host=vm;port=40000;state=ready",
            "time_limit": 60,
            "start_time": 100,
        }
    )
    assert (job.gpus, job.nodes, job.seconds_left(160)) == (1, ("vm",), 3540)
    endpoint = job.endpoint()
    assert endpoint is not None and (endpoint.host, endpoint.port, endpoint.state) == ("vm", 40000, "ready")
    assert parse_job({"job_id": 8, "comment": "carme:v1;host=vm;port=22;state=ready"}).endpoint() is None
    node = parse_node({"name": "vm", "state": "mixed", "gres": "gpu:4", "gres_used": "gpu:1(IDX:0)"})
    assert (node.gpus_total, node.gpus_used, node.usable) == (4, 1, True)


# --- errors on real sockets ---------------------------------------------------------------


def client_for(port: int, tmp_path: Path, api_version: str = "auto") -> SlurmClient:
    key = tmp_path / "jwt.key"
    key.write_bytes(KEY)
    return SlurmClient(f"http://127.0.0.1:{port}", TokenSource(str(key)), timeout=2, api_version=api_version)


def test_connection_refused_is_slurm_unavailable(tmp_path: Path) -> None:
    client = client_for(closed_port(), tmp_path)
    with pytest.raises(SlurmUnavailable, match="not reachable"):
        client.jobs("alice")
    assert client.queries == 1


class FakeSlurmrestd(QuietHandler):
    """Answers like slurmrestd v0.0.38 (22.05: its OpenAPI document at ``/openapi`` only) and checks the JWT like
    auth/jwt would."""

    jobs: ClassVar[list[dict[str, Any]]] = []
    hits: ClassVar[list[tuple[str, str, str]]] = []
    status_override: ClassVar[int | None] = None
    bodies: ClassVar[list[Any]] = []

    def _send(self, status: int, doc: dict[str, Any]) -> None:
        self.send_body(status, json.dumps(doc).encode(), "application/json")

    def _handle(self) -> None:
        user = self.headers.get("X-SLURM-USER-NAME", "")
        token = self.headers.get("X-SLURM-USER-TOKEN", "")
        self.hits.append((self.command, self.path, user))
        try:
            claims = decode_jwt(KEY, token)
        except ValueError:
            self._send(401, {"errors": [{"error": "Authentication failure"}]})
            return
        if claims["sun"] != user:
            self._send(401, {"errors": [{"error": "Authentication failure"}]})
            return
        if self.status_override:
            self._send(self.status_override, {})
            return
        if self.command == "POST":
            self.bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null"))
        if self.path == "/openapi":
            self._send(200, {"openapi": "3.0.2", "paths": {f"/slurm/v0.0.{v}/{e}": {} for v in (36, 37, 38)
                                                          for e in ("jobs", "ping")}})  # fmt: skip
        elif self.path == "/slurm/v0.0.38/jobs":
            self._send(200, {"jobs": self.jobs, "errors": []})
        elif self.path == "/slurm/v0.0.38/nodes":
            nodes = [
                {
                    "name": "vm",
                    "state": "idle",
                    "gres": "gpu:4",
                    "gres_used": "gpu:0",
                    "partitions": ["debug"],
                }
            ]
            self._send(200, {"nodes": nodes, "errors": []})
        elif self.path == "/slurm/v0.0.38/partitions":
            parts = [
                {
                    "name": "debug",
                    "nodes": "vm",
                    "max_time_limit": 4294967295,
                    "state": "UP",
                    "flags": ["DEFAULT"],
                }
            ]
            self._send(200, {"partitions": parts, "errors": []})
        elif self.path.startswith("/slurm/v0.0.38/job/") and self.command == "DELETE":
            self._send(500, {"errors": [{"error": "Access/permission denied", "error_number": 2002}]})
        else:
            self._send(404, {"errors": [{"error": "Unable to find requested URL"}]})

    do_GET = _handle
    do_DELETE = _handle
    do_POST = _handle


@pytest.fixture
def restd() -> Iterator[ThreadingHTTPServer]:
    FakeSlurmrestd.hits = []
    FakeSlurmrestd.status_override = None
    FakeSlurmrestd.jobs = []
    FakeSlurmrestd.bodies = []
    with serve_http(FakeSlurmrestd) as server:
        yield server


def test_errors_array_and_http_statuses_become_messages(restd: ThreadingHTTPServer, tmp_path: Path) -> None:
    client = client_for(restd.server_address[1], tmp_path)
    assert client.nodes("carme-portal")[0]["name"] == "vm"
    assert FakeSlurmrestd.hits[-1] == ("GET", "/slurm/v0.0.38/nodes", "carme-portal")
    with pytest.raises(SlurmError, match="Access/permission denied") as err:
        client.cancel("bob", 12)
    assert not isinstance(err.value, SlurmUnavailable)
    FakeSlurmrestd.status_override = 503
    with pytest.raises(SlurmUnavailable, match="HTTP 503"):
        client.jobs("alice")
    with pytest.raises(SlurmError, match="refusing to mint"):
        client.jobs("root")


def test_the_version_is_asked_once_per_client(restd: ThreadingHTTPServer, tmp_path: Path) -> None:
    client = client_for(restd.server_address[1], tmp_path)
    for _ in range(3):
        client.nodes("carme-portal")
        client.partitions("alice")
    asked = [path for _, path, _ in FakeSlurmrestd.hits if path.startswith("/openapi")]
    assert asked == ["/openapi/v3", "/openapi"]  # 22.05 serves its document at /openapi only
    assert client.api_for("bob").version == "v0.0.38"
    named = client_for(restd.server_address[1], tmp_path, api_version="v0.0.38")
    named.nodes("alice")
    assert FakeSlurmrestd.hits[-1][1] == "/slurm/v0.0.38/nodes"  # a named version is not asked for
    with pytest.raises(ValueError, match="SLURMRESTD_API_VERSION"):
        client_for(restd.server_address[1], tmp_path, api_version="v9")


def test_the_dialect_is_posted_to_22_05_as_it_is(restd: ThreadingHTTPServer, tmp_path: Path) -> None:
    client = client_for(restd.server_address[1], tmp_path)
    body = {"script": "#!/bin/bash\n", "job": {"name": "x", "time_limit": 5, "environment": {"A": "1"}}}
    with pytest.raises(SlurmError):
        client.submit("alice", body)  # the stand-in does not submit
    assert FakeSlurmrestd.bodies[-1] == body and FakeSlurmrestd.hits[-1][1] == "/slurm/v0.0.38/job/submit"


def test_cache_is_shared_and_single_flight(restd: ThreadingHTTPServer, tmp_path: Path) -> None:
    sched = SlurmScheduler(
        client_for(restd.server_address[1], tmp_path),
        service_user="carme-portal",
        cache_seconds=3600,
        quota_cache_seconds=60,
        app_dirs=(),
    )
    states: list[ClusterState] = []
    threads = [threading.Thread(target=lambda: states.append(sched.state())) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(states) == 20 and all(s is states[0] for s in states)
    # jobs + nodes + partitions, once for all 20 requests, after asking for the version (/openapi/v3, /openapi) once
    assert sched.queries_issued() == 5
    assert states[0].partitions[0].max_time_minutes is None  # INFINITE


def test_failed_refresh_keeps_last_data_and_recovers() -> None:
    calls = {"n": 0}
    outage = {"on": False}
    now = {"t": 0.0}

    def fetch() -> ClusterState:
        calls["n"] += 1
        if outage["on"]:
            raise SlurmUnavailable("The scheduler is not reachable right now (refused).")
        return ClusterState(fetched_at=float(calls["n"]))

    cache = state_cache(fetch, ttl=2.0, clock=lambda: now["t"])
    assert cache.get().error is None
    outage["on"] = True
    now["t"] = 5.0
    failed = cache.get()
    assert failed.error and failed.fetched_at == 1.0  # last good data kept, flagged
    assert cache.get() is failed and calls["n"] == 2  # the failure is cached too: no query storm
    outage["on"] = False
    now["t"] = 10.0
    assert cache.get().error is None


def test_max_age_refreshes_a_snapshot_younger_than_the_ttl_but_not_more_often() -> None:
    calls = {"n": 0}
    now = {"t": 0.0}

    def fetch() -> ClusterState:
        calls["n"] += 1
        return ClusterState(fetched_at=float(calls["n"]))

    cache = state_cache(fetch, ttl=2.0, clock=lambda: now["t"])
    cache.get()
    now["t"] = 0.3
    assert cache.get(max_age=0.5).fetched_at == 1.0 and calls["n"] == 1  # young enough
    now["t"] = 0.8
    assert cache.get(max_age=0.5).fetched_at == 2.0  # older than max_age: re-read
    for _ in range(50):  # many requests within max_age: no further queries
        cache.get(max_age=0.5)
    assert calls["n"] == 2
    assert cache.get(max_age=10.0).fetched_at == 2.0  # max_age never stretches the ttl


# --- the banner with a real closed port -------------------------------------------------------


def test_dashboard_shows_banner_when_slurm_is_down(base_config: dict[str, Any]) -> None:
    app = make_app(base_config)  # real SlurmScheduler, SLURMRESTD_URL on a closed 127.0.0.1 port
    client = app.test_client()
    log_in_as(app, client, "alice")
    resp = client.get("/")
    assert resp.status_code == 200
    page = resp.get_data(as_text=True)
    assert "The scheduler is not reachable right now" in page
    api = client.get("/api/sessions")
    assert api.status_code == 200 and "not reachable" in api.get_json()["scheduler_error"]
    form = {"app": "jupyterlab", "image": "pytorch", "gpus": "0", "time_minutes": "10"}
    start = post(client, "/sessions/new", form)
    assert start.status_code == 503 and "not reachable" in start.get_data(as_text=True)
    assert client.get("/sessions/new").status_code == 200
    assert client.get("/api/health").get_json()["scheduler"] == "unavailable"


def test_dashboard_recovers_when_slurm_comes_back(base_config: dict[str, Any]) -> None:
    port = closed_port()
    app: Flask = make_app({**base_config, "SLURMRESTD_URL": f"http://127.0.0.1:{port}", "SCHEDULER_CACHE_SECONDS": 0})
    client = app.test_client()
    log_in_as(app, client, "alice")
    assert "not reachable" in client.get("/").get_data(as_text=True)
    server = ThreadingHTTPServer(("127.0.0.1", port), FakeSlurmrestd)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        page = client.get("/").get_data(as_text=True)
        assert "not reachable" not in page
        assert "<td>vm</td>" in page
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_worker_that_has_not_looked_lately_knows_the_sessions_others_saw_during_an_outage(
    restd: ThreadingHTTPServer, tmp_path: Path
) -> None:
    """Two gunicorn workers (two schedulers) share their last good state through a private file: during a scheduler
    outage, the worker whose own snapshot predates a session still finds its job (the proxy of that session was
    refused by such a worker while slurmctld was down, seen in the reliability suite)."""
    share = str(tmp_path / "scheduler-state.json")
    port = restd.server_address[1]
    clock = {"t": 0.0}

    def worker() -> SlurmScheduler:
        sched = SlurmScheduler(
            client_for(port, tmp_path), service_user="carme-portal", cache_seconds=2, quota_cache_seconds=60,
            app_dirs=(), share_file=share,
        )  # fmt: skip
        sched.cache._clock = lambda: clock["t"]
        return sched

    idle, busy = worker(), worker()
    assert idle.state().jobs == ()  # idle looked before the session was started
    FakeSlurmrestd.jobs = [
        {"job_id": 41, "user_name": "alice", "job_state": "RUNNING", "partition": "debug", "name": "carme-jupyterlab"}
    ]
    assert [j.job_id for j in busy.state().jobs] == [41]
    assert oct(os.stat(share).st_mode & 0o777) == "0o600"
    FakeSlurmrestd.status_override = 503  # slurmctld (or slurmrestd) down
    clock["t"] = 10.0
    during = idle.state()
    assert during.error and [j.job_id for j in during.jobs] == [41]
    shared = json.loads(Path(share).read_text())  # the parsed jobs, not slurmrestd's records (77 MB for 10,000)
    assert shared["jobs"][0]["job_id"] == 41 and set(shared["jobs"][0]) == {f.name for f in fields(Job)}
    Path(share).write_text("{not json")  # a damaged file is ignored: the worker keeps its own last state
    clock["t"] = 20.0
    assert [j.job_id for j in idle.state().jobs] == [41] and idle.state().error
    # a file in an earlier release's shape (slurmrestd's records, key "partitions"): ignored the same way
    Path(share).write_text(json.dumps({"fetched_at": 1e12, "jobs": [{"job_id": 42}], "nodes": [], "partitions": []}))
    clock["t"] = 30.0
    assert [j.job_id for j in idle.state().jobs] == [41] and idle.state().error
