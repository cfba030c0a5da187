# SPDX-License-Identifier: GPL-3.0-or-later
"""The proxy reaches only the session's own front (real fronts on 127.0.0.1, the production verifier).

Bob can rewrite his job comment (``scontrol update JobId=.. Comment=..``): whatever host and port it names, the
portal authorises the proxy only after that endpoint answered a fresh HMAC challenge with bob's session secret.
"""

from __future__ import annotations

import http.server
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from carme_runtime import front
from tests.fixtures.net import QuietHandler
from webui.caches import TTLMap
from webui.extensions import db
from webui.slurm.scheduler import SlurmScheduler
from webui.slurm.state import Endpoint
from webui.slurm.state import Node

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import log_in_as
from .conftest import make_app


def secret_of(owner: str, job_id: int) -> str:
    return f"secret-{owner}-{job_id}-xxxxxxxxxxxxxxxx"  # add_session's


class VerifyingScheduler(FakeScheduler):
    """Fake Slurm state, the production endpoint verifier (SlurmScheduler.verify_endpoint, with its cache)."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes = [Node("gpu01", "idle", 2, 0, ("gpu",), address="127.0.0.1")]
        self.real = SlurmScheduler(
            None,  # type: ignore[arg-type]  # never asked: state comes from the fake
            service_user="carme-portal",
            cache_seconds=60,
            quota_cache_seconds=60,
            app_dirs=(),
            probe_timeout=2.0,
            probe_cache_seconds=0.0,
        )
        self.verified: list[tuple[str, int, int]] = []

    def verify_endpoint(self, endpoint: Endpoint, job_id: int, secret: str, *, patient: bool = False) -> bool:
        self.verified.append((endpoint.host, endpoint.port, job_id))
        return self.real.verify_endpoint(endpoint, job_id, secret, patient=patient)


class ContentHandler(QuietHandler):
    def do_GET(self) -> None:
        self.send_body(200, f"content of {self.server.owner}".encode())  # type: ignore[attr-defined]


class Session:
    """A user's app on 127.0.0.1 behind its real session front."""

    def __init__(self, owner: str, job_id: int) -> None:
        self.app = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ContentHandler)
        self.app.owner = owner  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.app.serve_forever, daemon=True)
        self.thread.start()
        self.front = front.start_front(
            "127.0.0.1",
            app_host="127.0.0.1",
            app_port=self.app.server_address[1],
            secret=secret_of(owner, job_id),
            job_id=job_id,
            base_path=f"/proxy/{job_id}/",
        )

    def close(self) -> None:
        self.front.stop()
        self.app.shutdown()
        self.app.server_close()


@pytest.fixture
def sched() -> VerifyingScheduler:
    return VerifyingScheduler()


@pytest.fixture
def papp(base_config: dict[str, Any], sched: VerifyingScheduler) -> Iterator[Flask]:
    application = make_app({**base_config, "SCHEDULER": sched})
    yield application
    with application.app_context():
        db.engine.dispose()


@pytest.fixture
def two(papp: Flask, sched: VerifyingScheduler) -> Iterator[tuple[int, Session, int, Session]]:
    """alice's and bob's sessions on the same node, each with its own front."""
    a = add_session(papp, sched, "alice", ready=False)
    b = add_session(papp, sched, "bob", ready=False)
    sa, sb = Session("alice", a), Session("bob", b)
    sched.run(a, host="127.0.0.1", port=sa.front.port)
    sched.run(b, host="127.0.0.1", port=sb.front.port)
    try:
        yield a, sa, b, sb
    finally:
        sa.close()
        sb.close()


def auth(client: Any, job_id: int) -> Any:
    return client.get("/api/proxy-auth", headers={"X-Original-URI": f"/proxy/{job_id}/api/status"})


def test_each_owner_is_authorised_to_their_own_verified_front(
    papp: Flask, sched: VerifyingScheduler, two: tuple[int, Session, int, Session]
) -> None:
    _a, _sa, b, sb = two
    client = papp.test_client()
    log_in_as(papp, client, "bob")
    resp = auth(client, b)
    assert resp.status_code == 200
    assert resp.headers["X-Carme-Upstream"] == f"127.0.0.1:{sb.front.port}"
    assert resp.headers["X-Carme-Front"] == front.front_key(secret_of("bob", b), b)
    assert "X-Carme-Secret" not in resp.headers
    assert (("127.0.0.1", sb.front.port, b)) in sched.verified


def test_bob_pointing_his_comment_at_alices_front_is_never_authorised(
    papp: Flask, sched: VerifyingScheduler, two: tuple[int, Session, int, Session]
) -> None:
    _a, sa, b, sb = two
    sched.run(b, host="127.0.0.1", port=sa.front.port)  # scontrol update JobId=b Comment=...port=<alice's>
    client = papp.test_client()
    log_in_as(papp, client, "bob")
    for _ in range(2):  # refused, and the refusal is not turned into a grant by the cache
        resp = auth(client, b)
        assert resp.status_code == 404
        assert "X-Carme-Upstream" not in resp.headers and "X-Carme-Front" not in resp.headers
    assert ("127.0.0.1", sa.front.port, b) in sched.verified  # it was asked, and could not answer for bob
    # bob's dashboard offers no Connect for it either
    views = client.get("/api/sessions").get_json()["sessions"]
    assert [(v["job_id"], v["ready"], v["connect_url"]) for v in views] == [(b, False, None)]
    # and back to his own front: authorised again (a proof is per host, port, job and secret)
    sched.run(b, host="127.0.0.1", port=sb.front.port)
    assert auth(client, b).headers["X-Carme-Upstream"] == f"127.0.0.1:{sb.front.port}"


@pytest.mark.parametrize("port", [6817, 6818, 6820, 3306, 22, 1024, 65535])
def test_ports_outside_the_front_range_are_never_probed(
    papp: Flask, sched: VerifyingScheduler, two: tuple[int, Session, int, Session], port: int
) -> None:
    _a, _sa, b, _sb = two
    sched.run(b, host="127.0.0.1", port=port)
    client = papp.test_client()
    log_in_as(papp, client, "bob")
    sched.verified.clear()
    assert auth(client, b).status_code == 404
    client.get("/api/sessions")
    assert sched.verified == []  # no connection was ever made to that port


def test_hosts_outside_the_jobs_nodes_are_never_probed(
    papp: Flask, sched: VerifyingScheduler, two: tuple[int, Session, int, Session]
) -> None:
    _a, _sa, b, sb = two
    for host in ("127.0.0.2", "10.0.0.99", "localhost.example", "gpu02"):
        sched.run(b, host=host, port=sb.front.port)
        client = papp.test_client()
        log_in_as(papp, client, "bob")
        sched.verified.clear()
        assert auth(client, b).status_code == 404, host
        assert sched.verified == [], host


def test_the_challenge_carries_no_secret(papp: Flask, sched: VerifyingScheduler) -> None:
    """What the portal sends to an endpoint it has not verified yet: a nonce, nothing derived from the secret."""
    job = add_session(papp, sched, "bob", ready=False)
    listener = front.bind_front_socket("127.0.0.1")
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            received.append(conn.recv(65536))
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{"mac":"0"}')

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    sched.run(job, host="127.0.0.1", port=listener.getsockname()[1])
    client = papp.test_client()
    log_in_as(papp, client, "bob")
    assert auth(client, job).status_code == 404
    thread.join(10)
    listener.close()
    secret = secret_of("bob", job)
    assert received and received[0].startswith(b"GET /.carme/challenge?job=")
    for needle in (secret, front.front_key(secret, job), "Authorization"):
        assert needle.encode() not in received[0]


def test_a_proxied_request_with_the_answered_key_reaches_only_the_owners_app(
    papp: Flask, sched: VerifyingScheduler, two: tuple[int, Session, int, Session]
) -> None:
    """What nginx does with the answer: the key opens bob's front, and alice's front refuses it."""
    import http.client

    a, sa, b, sb = two
    client = papp.test_client()
    log_in_as(papp, client, "bob")
    key = auth(client, b).headers["X-Carme-Front"]
    for port, path, expected in ((sb.front.port, f"/proxy/{b}/", 200), (sa.front.port, f"/proxy/{a}/", 403)):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", path, headers={front.FRONT_HEADER: key})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        assert resp.status == expected
        assert b"content of alice" not in body


# --- the database is down ---------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def database_down(app: Flask, base_config: dict[str, Any]) -> Path:
    """Move the sqlite file away: every query fails (no such table) until :func:`database_up`."""
    path = Path(str(base_config["SQLALCHEMY_DATABASE_URI"]).removeprefix("sqlite:///"))
    with app.app_context():
        db.engine.dispose()
    os.replace(path, path.with_suffix(".away"))
    return path


def database_up(app: Flask, path: Path) -> None:
    with app.app_context():
        db.engine.dispose()
    os.replace(path.with_suffix(".away"), path)


@pytest.mark.sqlite_file
def test_database_down_keeps_a_confirmed_grant_for_a_bounded_time(
    papp: Flask, sched: VerifyingScheduler, two: tuple[int, Session, int, Session], base_config: dict[str, Any]
) -> None:
    a, sa, b, _sb = two
    clock = Clock()
    ttl = float(papp.config.get("PROXY_AUTH_CACHE_SECONDS", 300.0))
    assert ttl == 300.0  # the default: 5 minutes
    papp.extensions["carme_proxy_auth_cache"] = TTLMap(ttl, clock=clock)
    alice, bob = papp.test_client(), papp.test_client()
    log_in_as(papp, alice, "alice")
    log_in_as(papp, bob, "bob")
    assert auth(alice, a).status_code == 200  # confirmed with the database
    path = database_down(papp, base_config)
    try:
        clock.now += ttl - 1
        resp = auth(alice, a)
        assert resp.status_code == 200
        assert resp.headers["X-Carme-Upstream"] == f"127.0.0.1:{sa.front.port}"
        assert auth(bob, b).status_code == 503  # never confirmed before the outage: nothing to go on
        assert auth(bob, a).status_code == 503  # another login: alice's grant is not his
        assert auth(papp.test_client(), a).status_code in (401, 503)  # no login at all
        clock.now += 2  # the grant is ttl + 1 s old
        assert auth(alice, a).status_code == 503
    finally:
        database_up(papp, path)
    assert auth(alice, a).status_code == 200  # the database answers again


@pytest.mark.sqlite_file
def test_database_down_still_checks_slurm_and_the_endpoint(
    papp: Flask, sched: VerifyingScheduler, two: tuple[int, Session, int, Session], base_config: dict[str, Any]
) -> None:
    a, sa, _b, sb = two
    alice = papp.test_client()
    log_in_as(papp, alice, "alice")
    assert auth(alice, a).status_code == 200
    path = database_down(papp, base_config)
    try:
        sched.run(a, host="127.0.0.1", port=sb.front.port)  # the comment now names bob's front
        assert auth(alice, a).status_code == 404
        sched.run(a, host="127.0.0.1", port=sa.front.port)
        assert auth(alice, a).status_code == 200
        del sched.jobs[a]  # the job ended
        assert auth(alice, a).status_code == 404
    finally:
        database_up(papp, path)


@pytest.mark.sqlite_file
def test_a_zero_cache_time_turns_the_fallback_off(
    papp: Flask, sched: VerifyingScheduler, two: tuple[int, Session, int, Session], base_config: dict[str, Any]
) -> None:
    a, _sa, _b, _sb = two
    papp.config["PROXY_AUTH_CACHE_SECONDS"] = 0
    alice = papp.test_client()
    log_in_as(papp, alice, "alice")
    assert auth(alice, a).status_code == 200
    path = database_down(papp, base_config)
    try:
        assert auth(alice, a).status_code == 503
    finally:
        database_up(papp, path)


def test_nothing_listens_where_the_comment_points(
    papp: Flask, sched: VerifyingScheduler, two: tuple[int, Session, int, Session]
) -> None:
    _a, _sa, b, _sb = two
    sock = front.bind_front_socket("127.0.0.1")
    free = sock.getsockname()[1]
    sock.close()
    sched.run(b, host="127.0.0.1", port=free)
    client = papp.test_client()
    log_in_as(papp, client, "bob")
    assert auth(client, b).status_code == 404
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", free), timeout=2).close()


def test_the_portal_port_range_is_the_launchers() -> None:
    from webui import settings

    assert settings.PROXY_PORT_RANGE == front.PORT_RANGE
    assert settings.PROXY_AUTH_CACHE_SECONDS == 300.0  # 5 minutes, never more by default


def test_a_refusal_is_remembered_except_by_a_patient_look(monkeypatch: pytest.MonkeyPatch) -> None:
    """A challenge that failed (a loaded node, a 1-s timeout) is not repeated for ``probe_cache_seconds``, except by a
    patient look (an owner's click on Connect): the longer timeout, and what it proves is remembered as usual."""
    answers, timeouts = [False, True], []

    def challenge(host: str, port: int, job_id: int, secret: str, timeout: float) -> bool:
        timeouts.append(timeout)
        return answers.pop(0)

    monkeypatch.setattr("webui.slurm.scheduler.front_verify", challenge)
    real = SlurmScheduler(
        None,  # type: ignore[arg-type]  # never asked
        service_user="carme-portal",
        cache_seconds=60,
        quota_cache_seconds=60,
        app_dirs=(),
        probe_timeout=1.0,
        patient_timeout=5.0,
        probe_cache_seconds=60.0,
    )
    ep = Endpoint("127.0.0.1", 40000, "ready")
    assert not real.verify_endpoint(ep, 7, "s")
    assert not real.verify_endpoint(ep, 7, "s")  # remembered: no second challenge
    assert real.verify_endpoint(ep, 7, "s", patient=True)
    assert real.verify_endpoint(ep, 7, "s")  # the proof is remembered
    assert timeouts == [1.0, 5.0]
