# SPDX-License-Identifier: GPL-3.0-or-later
"""Start/stop/connect: server-side limits, ownership, Slurm as source of truth."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from flask import Flask

from webui.extensions import db
from webui.models import AuditLog
from webui.models import PortalSession

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import log_in_as
from .conftest import post
from .conftest import set_slurm_limits

GOOD = {"app": "jupyterlab", "image": "pytorch", "partition": "gpu", "gpus": "1", "time_minutes": "60"}


def test_start_form_shows_limits_from_gres(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    page = client.get("/sessions/new").get_data(as_text=True)
    assert 'max="2"' in page  # gpu01 has gpu:2, below the default policy of 4
    assert "jupyterlab" in page and "pytorch" in page


def test_gpu_count_above_the_node_gres_is_400_naming_the_field(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    log_in_as(app, client, "alice")
    resp = post(client, "/sessions/new", {**GOOD, "gpus": "5"})
    assert resp.status_code == 400
    assert "GPUs: must be between 0 and 2" in resp.get_data(as_text=True)
    assert fake_scheduler.submitted == []


def test_negative_and_non_numeric_gpus_are_400(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    for bad in ("-1", "1.5", "two", "1; rm -rf /"):
        resp = post(client, "/sessions/new", {**GOOD, "gpus": bad})
        assert resp.status_code == 400, bad
        assert "gpus" in resp.get_data(as_text=True)


def test_time_above_the_partition_limit_is_400(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    resp = post(client, "/sessions/new", {**GOOD, "time_minutes": "481"})
    assert resp.status_code == 400
    assert "Time (minutes): must be between 1 and 480" in resp.get_data(as_text=True)


def test_values_not_offered_by_the_form_are_400(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    for field, label, value in (("app", "App", "$(id)"), ("image", "Image", "../../etc/shadow"),
                                ("partition", "Partition", "admin';--")):  # fmt: skip
        resp = post(client, "/sessions/new", {**GOOD, field: value})
        assert resp.status_code == 400, field
        assert f"{label}: is not one of the offered choices" in resp.get_data(as_text=True)


def test_app_not_allowed_with_the_image_is_400(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    resp = post(client, "/sessions/new", {**GOOD, "app": "tensorboard"})
    assert resp.status_code == 400
    assert "App: " in resp.get_data(as_text=True)


def test_start_submits_as_the_user_with_a_fresh_secret(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    log_in_as(app, client, "alice")
    resp = post(client, "/sessions/new", GOOD)
    assert resp.status_code == 302
    spec, secret, payload = fake_scheduler.submitted[0]
    assert spec.user == "alice" and spec.gpus == 1 and spec.runtime == "apptainer"
    job = payload["job"]
    assert job["environment"]["CARME_SESSION_SECRET"] == secret
    assert job["gres"] == "gpu:1" and job["time_limit"] == 60 and job["partition"] == "gpu"
    assert secret not in payload["script"] and secret not in job["comment"]
    with app.app_context():
        record = db.session.query(PortalSession).one()
        assert (record.owner, record.secret, record.app) == ("alice", secret, "jupyterlab")
        assert len(secret) >= 40
        assert db.session.query(AuditLog).filter_by(action="session.start").count() == 1


def test_session_limit_per_user(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    set_slurm_limits(fake_scheduler, "alice", max_jobs=2)
    log_in_as(app, client, "alice")
    assert post(client, "/sessions/new", GOOD).status_code == 302
    assert post(client, "/sessions/new", GOOD).status_code == 302
    resp = post(client, "/sessions/new", GOOD)  # Slurm's MaxJobs: 2 running jobs
    assert resp.status_code == 400
    assert "limit is 2 (Slurm: association alice@research MaxJobs=2)" in resp.get_data(as_text=True)


def test_a_session_just_stopped_does_not_count_against_the_limit(
    app: Flask, client: Any, fake_scheduler: FakeScheduler, monkeypatch: Any
) -> None:
    """The worker's snapshot is seconds old: a refusal by the session limit is checked on a fresh one."""
    set_slurm_limits(fake_scheduler, "alice", max_jobs=2)
    log_in_as(app, client, "alice")
    assert post(client, "/sessions/new", GOOD).status_code == 302
    assert post(client, "/sessions/new", GOOD).status_code == 302
    with app.app_context():  # submitted a while ago: a job missing from a snapshot taken within a second of its
        # record may only be not yet listed, and counts (webui.sessions.records.CREATED_AT_PRECISION_S)
        for record in db.session.query(PortalSession):
            record.created_at -= dt.timedelta(seconds=30)
        db.session.commit()
    stale = fake_scheduler.state()  # both sessions still listed
    ended = next(iter(fake_scheduler.jobs))
    del fake_scheduler.jobs[ended]  # ended in Slurm since the snapshot
    fresh_reads: list[float | None] = []
    real_state = fake_scheduler.state

    def state(max_age: float | None = None) -> Any:
        if max_age is None:
            return stale
        fresh_reads.append(max_age)
        return real_state(max_age)

    monkeypatch.setattr(fake_scheduler, "state", state)
    assert post(client, "/sessions/new", GOOD).status_code == 302
    assert fresh_reads and all(age is not None and age <= 1.0 for age in fresh_reads)
    resp = post(client, "/sessions/new", GOOD)  # two active again: the fresh state agrees, still refused
    assert resp.status_code == 400 and "limit is 2" in resp.get_data(as_text=True)


def test_a_session_whose_image_was_refused_says_why(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    job = fake_scheduler.jobs[job_id]
    fake_scheduler.jobs[job_id] = dataclasses.replace(
        job, state="FAILED", comment="carme:v1;app=jupyterlab;host=10.0.0.11;port=0;state=failed;reason=image"
    )
    log_in_as(app, client, "alice")
    assert "container image is missing" in client.get("/").get_data(as_text=True)
    view = next(v for v in client.get("/api/sessions").get_json()["sessions"] if v["job_id"] == job_id)
    assert view["state"] == "FAILED" and "container image" in view["reason"], view


def test_a_session_on_a_node_that_stopped_answering_says_so(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    fake_scheduler.nodes[0] = dataclasses.replace(fake_scheduler.nodes[0], state="mixed+not_responding")
    log_in_as(app, client, "alice")
    view = next(v for v in client.get("/api/sessions").get_json()["sessions"] if v["job_id"] == job_id)
    assert view["state"] == "RUNNING" and not view["ready"] and view["connect_url"] is None, view
    assert "gpu01 is not responding" in view["reason"] and "not started again" in view["reason"], view
    assert "gpu01 is not responding" in client.get("/").get_data(as_text=True)


def test_a_session_ended_by_a_node_failure_stays_listed_with_the_reason(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    fake_scheduler.jobs[job_id] = dataclasses.replace(fake_scheduler.jobs[job_id], state="NODE_FAIL")
    log_in_as(app, client, "alice")
    for _ in range(2):  # the first view records the end; the next ones still explain it
        view = next(v for v in client.get("/api/sessions").get_json()["sessions"] if v["job_id"] == job_id)
        assert view["state"] == "NODE_FAIL" and "node failed" in view["reason"] and not view["ready"], view
    with app.app_context():
        assert db.session.query(PortalSession).one().ended_at is not None


def test_connect_only_when_ready_and_answering(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice", running=False)
    log_in_as(app, client, "alice")
    assert "Connect</a>" not in client.get("/").get_data(as_text=True)  # pending
    fake_scheduler.run(job_id, ready=False)
    assert "Connect</a>" not in client.get("/").get_data(as_text=True)  # running, app not ready
    fake_scheduler.run(job_id, ready=True)
    fake_scheduler.app_up = False
    assert "Connect</a>" not in client.get("/").get_data(as_text=True)  # claims ready, does not answer
    fake_scheduler.app_up = True
    page = client.get("/").get_data(as_text=True)
    assert "Connect</a>" in page
    resp = client.get(f"/sessions/{job_id}/connect")
    assert resp.status_code == 302 and resp.headers["Location"] == f"/proxy/{job_id}/"


def test_owner_stops_own_session(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    assert post(client, f"/sessions/{job_id}/stop").status_code == 302
    assert fake_scheduler.cancelled == [(job_id, "alice")]


def test_bob_gets_403_stopping_alices_session(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "bob")
    assert post(client, f"/sessions/{job_id}/stop").status_code == 403
    token = client.get("/api/csrf-token").get_json()["csrf_token"]
    headers = {"Referer": "https://localhost/", "X-CSRFToken": token}
    assert client.post(f"/api/sessions/{job_id}/stop", headers=headers).status_code == 403
    assert client.delete(f"/api/sessions/{job_id}", headers=headers).status_code == 403
    assert fake_scheduler.cancelled == []
    assert job_id in fake_scheduler.jobs


def test_bob_does_not_see_alices_sessions(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "bob")
    assert client.get("/api/sessions").get_json()["sessions"] == []
    assert f'data-job="{job_id}"' not in client.get("/").get_data(as_text=True)
    assert client.get(f"/sessions/{job_id}/connect").status_code == 403


def test_admin_stops_any_session_as_the_slurm_admin_identity(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "carol", admin=True)
    assert post(client, f"/admin/sessions/{job_id}/stop").status_code == 302
    assert fake_scheduler.cancelled == [(job_id, "carme-portal")]
    with app.app_context():
        entry = db.session.query(AuditLog).filter_by(action="admin.session.stop").one()
        assert (entry.actor, entry.target, entry.details["owner"]) == ("carol", str(job_id), "alice")


def test_stop_unknown_session_is_404(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    assert post(client, "/sessions/424242/stop").status_code == 404
    assert post(client, "/sessions/not-a-number/stop").status_code == 400


def test_api_lists_and_starts(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    log_in_as(app, client, "alice")
    token = client.get("/api/csrf-token").get_json()["csrf_token"]
    headers = {"Referer": "https://localhost/", "X-CSRFToken": token}
    resp = client.post("/api/sessions", json={**GOOD, "gpus": 1, "time_minutes": 30}, headers=headers)
    assert resp.status_code == 201
    job_id = resp.get_json()["job_id"]
    fake_scheduler.run(job_id)
    sessions = client.get("/api/sessions").get_json()["sessions"]
    assert [(s["job_id"], s["state"], s["ready"]) for s in sessions] == [(job_id, "RUNNING", True)]
    bad = client.post("/api/sessions", json={**GOOD, "gpus": 9}, headers=headers)
    assert bad.status_code == 400 and "gpus" in bad.get_json()["error"]


def test_ended_jobs_leave_the_dashboard(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    del fake_scheduler.jobs[job_id]  # gone from slurmctld: Slurm is the source of truth
    assert client.get("/api/sessions").get_json()["sessions"] == []
    with app.app_context():
        assert db.session.query(PortalSession).one().ended_at is not None


def test_readiness_is_asked_through_the_front_under_the_base_url() -> None:
    """The portal probes the session front, which forwards only the session's paths: an app served at / (code-server)
    names its own /healthz, and the portal asks /proxy/<job>/healthz (the front strips the prefix again)."""
    from carme_runtime.apps import load_apps
    from webui.slurm.session_spec import readiness_path

    apps = load_apps([])
    assert readiness_path(apps["code-server"], 12) == "/proxy/12/healthz"
    assert readiness_path(apps["jupyterlab"], 12) == "/proxy/12/api/status"
    assert readiness_path(apps["tensorboard"], 12) == "/proxy/12/"


def test_a_session_missing_from_a_snapshot_older_than_itself_is_not_ended(
    app: Flask, fake_scheduler: FakeScheduler
) -> None:
    """A scheduler snapshot asked for before a session was submitted does not list its job yet: the session must not
    be ended for that (it once lost its secret while Slurm ran it, under concurrent starts)."""
    from webui.sessions.status import session_views
    from webui.slurm.state import ClusterState

    job_id = add_session(app, fake_scheduler, "alice")
    with app.app_context():
        ps = db.session.query(PortalSession).filter_by(job_id=job_id).one()
        secret, created = ps.secret, ps.created_at.timestamp()
        views = session_views(ClusterState(fetched_at=created - 1.0), [ps], probe=False)
        assert ps.ended_at is None and ps.secret == secret
        assert views[0]["state"] == "UNKNOWN" and "not yet listed" in views[0]["reason"]
        session_views(ClusterState(fetched_at=created + 1.5), [ps], probe=False)
        assert ps.ended_at is not None  # a snapshot taken after it that lacks the job: the session is over


def test_a_snapshot_older_than_a_session_stored_in_whole_seconds_does_not_end_it(
    app: Flask, fake_scheduler: FakeScheduler
) -> None:
    """MariaDB's DATETIME drops the fraction of ``created_at``: a snapshot begun 0.1 s before the submission, which
    is later than the stored (truncated) ``created_at``, must not end the session either (the concurrent-start bench
    lost 2 of 6 sessions this way: ended, secret wiped, never ready while Slurm ran them)."""
    from webui.sessions.status import session_views
    from webui.slurm.state import ClusterState

    job_id = add_session(app, fake_scheduler, "alice")
    with app.app_context():
        ps = db.session.query(PortalSession).filter_by(job_id=job_id).one()
        submitted = dt.datetime(2026, 11, 24, 21, 30, 7, 900_000, tzinfo=dt.UTC)
        ps.created_at = submitted.replace(microsecond=0)  # what MariaDB gives back
        secret = ps.secret
        views = session_views(ClusterState(fetched_at=submitted.timestamp() - 0.1), [ps], probe=False)
        assert ps.ended_at is None and ps.secret == secret
        assert "not yet listed" in views[0]["reason"]


def test_a_refresh_invalidated_while_it_ran_is_not_kept() -> None:
    from webui.caches import SnapshotCache
    from webui.slurm.scheduler import state_cache
    from webui.slurm.state import ClusterState

    calls = {"n": 0}
    cache: SnapshotCache[ClusterState]

    def fetch() -> ClusterState:
        calls["n"] += 1
        if calls["n"] == 1:
            cache.invalidate()  # a submit lands while the first fetch runs
        return ClusterState(fetched_at=float(calls["n"]))

    cache = state_cache(fetch, ttl=60.0)
    assert cache.get().fetched_at == 1.0
    assert cache.get().fetched_at == 2.0 and calls["n"] == 2  # fetched again, not served for 60 s
    assert cache.get().fetched_at == 2.0 and calls["n"] == 2
