# SPDX-License-Identifier: GPL-3.0-or-later
"""nginx auth_request endpoint: only the owner of a running, ready session gets through."""

from __future__ import annotations

from typing import Any

from flask import Flask

from carme_runtime import front
from webui.slurm.state import ClusterState

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import log_in_as
from .conftest import make_app


def auth(client: Any, uri: str) -> Any:
    return client.get("/api/proxy-auth", headers={"X-Original-URI": uri})


def test_logged_out_is_401(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    resp = auth(client, f"/proxy/{job_id}/lab")
    assert resp.status_code == 401
    assert "X-Carme-Upstream" not in resp.headers and "X-Carme-Secret" not in resp.headers


def test_owner_gets_upstream_and_keys_never_the_secret(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    secret = f"secret-alice-{job_id}-xxxxxxxxxxxxxxxx"  # add_session's
    log_in_as(app, client, "alice")
    resp = auth(client, f"/proxy/{job_id}/api/kernels/abc/channels?session_id=1")
    assert resp.status_code == 200
    assert resp.headers["X-Carme-Upstream"] == "10.0.0.11:41234"
    assert "X-Carme-Secret" not in resp.headers  # nginx does not need it
    assert resp.headers["X-Carme-Front"] == front.front_key(secret, job_id)
    # the app's own token is the front's to add (carme_runtime.front.app_secret): it never passes the portal
    assert "X-Carme-Authorization" not in resp.headers
    assert secret not in str(resp.headers) and front.app_secret(secret, job_id) not in str(resp.headers)


def test_bob_is_403_on_alices_job(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "bob")
    resp = auth(client, f"/proxy/{job_id}/lab")
    assert resp.status_code == 403
    assert "X-Carme-Secret" not in resp.headers


def test_admins_do_not_get_into_user_ides_by_default(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "carol", admin=True)
    assert auth(client, f"/proxy/{job_id}/lab").status_code == 403


def test_unknown_job_is_404(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    assert auth(client, "/proxy/999999/lab").status_code == 404
    assert auth(client, "/not-proxy/1/").status_code == 404
    assert auth(client, "").status_code == 404


def test_dot_segments_are_refused(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    mine = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    assert auth(client, f"/proxy/{mine}/../{mine + 1}/lab").status_code == 404
    assert auth(client, f"/proxy/{mine}/%2e%2e/x").status_code == 404


def test_not_running_or_not_ready_is_404(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    pending = add_session(app, fake_scheduler, "alice", running=False)
    starting = add_session(app, fake_scheduler, "alice", ready=False)
    log_in_as(app, client, "alice")
    assert auth(client, f"/proxy/{pending}/").status_code == 404
    assert auth(client, f"/proxy/{starting}/").status_code == 404


def test_comment_pointing_outside_the_job_nodes_is_refused(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    """The comment is user-editable (scontrol update); it must not turn the proxy into an SSRF tool."""
    job_id = add_session(app, fake_scheduler, "alice")
    fake_scheduler.run(job_id, host="10.0.0.99", port=6820)
    log_in_as(app, client, "alice")
    assert auth(client, f"/proxy/{job_id}/").status_code == 404
    fake_scheduler.run(job_id, host="gpu01", port=41234)  # the node name is fine too
    assert auth(client, f"/proxy/{job_id}/").headers["X-Carme-Upstream"] == "gpu01:41234"


def test_recycled_job_id_of_another_user_is_refused(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    job = fake_scheduler.jobs[job_id]
    fake_scheduler.jobs[job_id] = type(job)(**{**job.__dict__, "user": "mallory"})
    log_in_as(app, client, "alice")
    assert auth(client, f"/proxy/{job_id}/").status_code == 404


def test_scheduler_outage_keeps_nothing_open(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    fake_scheduler.error = "connection refused"
    log_in_as(app, client, "alice")
    assert auth(client, f"/proxy/{job_id}/").status_code == 503


class StaleWorker(FakeScheduler):
    """A gunicorn worker whose cached snapshot predates the session's readiness (another worker saw it ready)."""

    def __init__(self) -> None:
        super().__init__()
        self.stale: ClusterState | None = None
        self.max_ages: list[float | None] = []

    def state(self, max_age: float | None = None) -> ClusterState:
        self.max_ages.append(max_age)
        if max_age is None and self.stale is not None:
            return self.stale
        return super().state()


def test_a_stale_snapshot_is_rechecked_before_refusing(base_config: dict[str, Any]) -> None:
    sched = StaleWorker()
    app = make_app({**base_config, "SCHEDULER": sched})
    client = app.test_client()
    job_id = add_session(app, sched, "alice", ready=False)
    sched.stale = FakeScheduler.state(sched)  # this worker's snapshot: starting
    sched.run(job_id, ready=True)  # what Slurm says now
    log_in_as(app, client, "alice")
    sched.max_ages.clear()
    assert auth(client, f"/proxy/{job_id}/lab").status_code == 200
    assert sched.max_ages == [None, app.config["PROXY_RECHECK_SECONDS"]]

    sched.stale = None  # a snapshot that already says ready: no second look
    sched.max_ages.clear()
    assert auth(client, f"/proxy/{job_id}/lab").status_code == 200
    assert sched.max_ages == [None]


def test_connect_looks_again_with_a_fresher_snapshot_before_saying_not_ready(base_config: dict[str, Any]) -> None:
    """The dashboard (one worker) offered Connect; the click lands on a worker whose snapshot still says the node is
    not responding or the app is starting: it asks Slurm again before refusing (seen in CI after a slurmd restart)."""
    sched = StaleWorker()
    app = make_app({**base_config, "SCHEDULER": sched})
    client = app.test_client()
    job_id = add_session(app, sched, "alice", ready=False)
    log_in_as(app, client, "alice")
    sched.max_ages.clear()
    refused = client.get(f"/sessions/{job_id}/connect")  # really not ready: refused after the second look
    assert refused.status_code == 302 and refused.headers["Location"].endswith("/"), refused.headers
    assert sched.max_ages == [None, app.config["PROXY_RECHECK_SECONDS"]]

    sched.stale = FakeScheduler.state(sched)  # this worker's snapshot: starting
    sched.run(job_id, ready=True)  # what Slurm says now
    sched.max_ages.clear()
    resp = client.get(f"/sessions/{job_id}/connect")
    assert resp.status_code == 302 and f"/proxy/{job_id}/" in resp.headers["Location"], resp.headers
    assert sched.max_ages == [None, app.config["PROXY_RECHECK_SECONDS"]]


class RefusedOnceWorker(FakeScheduler):
    """A worker whose 1-s challenge of the session's front failed under load (remembered), while another worker
    already saw the app answer and offered Connect: only a patient look proves it here."""

    def __init__(self) -> None:
        super().__init__()
        self.looks: list[bool] = []

    def verify_endpoint(self, endpoint: Any, job_id: int, secret: str, *, patient: bool = False) -> bool:
        self.looks.append(patient)
        return patient


def test_connect_looks_patiently_at_an_app_this_worker_saw_refuse(base_config: dict[str, Any]) -> None:
    sched = RefusedOnceWorker()
    app = make_app({**base_config, "SCHEDULER": sched})
    client = app.test_client()
    job_id = add_session(app, sched, "alice", ready=True)
    log_in_as(app, client, "alice")
    sched.looks.clear()
    resp = client.get(f"/sessions/{job_id}/connect")
    assert resp.status_code == 302 and f"/proxy/{job_id}/" in resp.headers["Location"], resp.headers
    assert sched.looks == [False, True]
    sched.looks.clear()
    views = client.get("/api/sessions").get_json()["sessions"]  # the dashboard's own looks are never patient
    assert [v["ready"] for v in views] == [False] and True not in sched.looks
