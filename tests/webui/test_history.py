# SPDX-License-Identifier: GPL-3.0-or-later
"""The history page, logs served for their owner only, end reasons recorded from Slurm, and the dashboard's notices
(issue 30)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from webui.auth.logins import CurrentUser
from webui.extensions import db
from webui.history import logs
from webui.history.logs import LogMissing
from webui.history.logs import SocketLogReader
from webui.history.logs import job_log_path
from webui.models import PortalSession
from webui.sessions.records import end_reason
from webui.sessions.records import get_portal_session
from webui.sessions.records import session_log_path
from webui.sessions.service import stop_session
from webui.slurm.records import AccountJob
from webui.slurm.scheduler import SlurmScheduler

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import log_in_as
from .conftest import post

NOW = int(dt.datetime.now(dt.UTC).timestamp())


class FakeReader:
    """Log files by path; records who read what."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.calls: list[tuple[str, str, int]] = []

    def read(self, owner: str, path: str, max_bytes: int) -> bytes:
        self.calls.append((owner, path, max_bytes))
        if path not in self.files:
            raise LogMissing(path)
        return self.files[path][-max_bytes:]


@pytest.fixture
def reader(app: Flask) -> FakeReader:
    fake = FakeReader()
    app.config["LOG_READER"] = fake
    return fake


def account_job(job_id: int, user: str, state: str = "COMPLETED", **kw: Any) -> AccountJob:
    fields: dict[str, Any] = {
        "job_id": job_id,
        "user": user,
        "name": "train.sh",
        "state": state,
        "start_time": NOW - 7200,
        "end_time": NOW - 3600,
        "elapsed": 3600,
        "gpu_hours": 2.0,
        "comment": "",
        "workdir": f"/home/{user}/runs",
        "std_out": "",
    }
    return AccountJob(**{**fields, **kw})


def admin_stop(app: Flask, job_id: int, note: str) -> None:
    with app.test_request_context("/"):
        stop_session(CurrentUser(username="carol", is_admin=True), job_id, note=note)


def end_in_slurm(sched: FakeScheduler, job_id: int, state: str, comment: str = "") -> None:
    sched.jobs[job_id] = dataclasses.replace(
        sched.jobs[job_id], state=state, comment=comment or sched.jobs[job_id].comment
    )


def record(app: Flask, job_id: int) -> PortalSession:
    with app.app_context():
        ps = get_portal_session(job_id)
        assert ps is not None
        db.session.expunge(ps)
        return ps


# --- end reasons -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "comment", "reason"),
    [
        ("TIMEOUT", "", "time_limit"),
        ("NODE_FAIL", "", "node_failure"),
        ("FAILED", "", "failed"),
        ("FAILED", "carme:v1;app=jupyterlab;host=n;port=0;state=failed;reason=image", "image_refused"),
        ("FAILED", "carme:v1;app=jupyterlab;host=n;port=0;state=failed", "failed"),
        ("COMPLETED", "", "completed"),
        ("CANCELLED", "", "cancelled"),
        ("SOMETHING_NEW", "", "unknown"),
    ],
)
def test_end_reason_from_slurm(state: str, comment: str, reason: str) -> None:
    assert end_reason(state, comment) == reason


@pytest.mark.parametrize(("state", "reason"), [("TIMEOUT", "time_limit"), ("NODE_FAIL", "node_failure")])
def test_a_session_ended_in_slurm_records_why_and_its_log(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler, state: str, reason: str
) -> None:
    jid = add_session(app, fake_scheduler, "bob")
    end_in_slurm(fake_scheduler, jid, state)
    log_in_as(app, client, "bob")
    client.get("/")  # the dashboard notices the end
    ps = record(app, jid)
    assert ps.ended_at is not None and ps.end_reason == reason
    assert ps.log_path == f"/home/bob/carme-jupyterlab-{jid}.out"


def test_a_job_slurm_forgot_is_unknown_until_the_accounting_says(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler, reader: FakeReader
) -> None:
    jid = add_session(app, fake_scheduler, "bob")
    del fake_scheduler.jobs[jid]
    log_in_as(app, client, "bob")
    client.get("/")
    assert record(app, jid).end_reason == "unknown"
    fake_scheduler.accounting = (account_job(jid, "bob", "TIMEOUT", name="carme-jupyterlab"),)
    assert "Reached its time limit" in client.get("/history/").get_data(as_text=True)
    assert record(app, jid).end_reason == "time_limit"


def test_the_log_path_is_the_runtimes_output_path(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    log_in_as(app, client, "bob")
    resp = post(client, "/sessions/new", {"image": "pytorch", "app": "jupyterlab", "gpus": 1, "time_minutes": 30})
    assert resp.status_code in (200, 302, 303)
    _spec, _secret, payload = fake_scheduler.submitted[-1]
    jid = fake_scheduler.next_id
    with app.app_context():
        ps = get_portal_session(jid)
        assert ps is not None
        assert session_log_path(ps) == payload["job"]["standard_output"].replace("%j", str(jid))


# --- the history page ------------------------------------------------------------------------------------------------


def test_history_lists_sessions_with_why_they_ended(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    mine = add_session(app, fake_scheduler, "bob")
    stopped = add_session(app, fake_scheduler, "bob")
    timed_out = add_session(app, fake_scheduler, "bob")
    running = add_session(app, fake_scheduler, "bob")
    alices = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "bob")
    post(client, f"/sessions/{mine}/stop")
    admin_stop(app, stopped, "maintenance on node1")
    end_in_slurm(fake_scheduler, timed_out, "TIMEOUT")
    client.get("/")
    fake_scheduler.accounting = (account_job(timed_out, "bob", "TIMEOUT", name="carme-jupyterlab", gpu_hours=0.5),)
    page = client.get("/history/").get_data(as_text=True)
    assert f'data-job="{alices}"' not in page
    for jid in (mine, stopped, timed_out, running):
        assert f'id="job-{jid}"' in page and f"/history/{jid}/log" in page
    assert "Stopped by you" in page
    assert "Stopped by an administrator (carol): maintenance on node1" in page
    assert "Reached its time limit" in page and "0.50" in page
    assert "JupyterLab" in page


def test_history_lists_other_jobs_from_the_accounting(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    fake_scheduler.accounting = (
        account_job(501, "bob", "COMPLETED", gpu_hours=2.0),
        account_job(502, "bob", "FAILED", name="broken.sh"),
        account_job(503, "bob", "RUNNING", end_time=0),
        account_job(504, "alice", "COMPLETED", name="alices.sh"),
    )
    log_in_as(app, client, "bob")
    page = client.get("/history/").get_data(as_text=True)
    jobs = page.split('id="history-jobs"', 1)[1]
    assert 'data-job="501"' in jobs and "Completed" in jobs and "2.00" in jobs and "1:00 h" in jobs
    assert 'data-job="502"' in jobs and "Failed" in jobs
    assert 'data-job="503"' in jobs and "Running" in jobs
    assert "alices.sh" not in page


def test_history_says_when_the_accounting_cannot_be_read(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    log_in_as(app, client, "bob")
    fake_scheduler.error = "slurmdbd is down"
    resp = client.get("/history/")
    assert resp.status_code == 200 and "accounting cannot be read" in resp.get_data(as_text=True)


def test_history_is_paged(app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler) -> None:
    from webui.history.entries import PAGE_SIZE

    ids = [add_session(app, fake_scheduler, "bob", running=False) for _ in range(PAGE_SIZE + 2)]
    log_in_as(app, client, "bob")
    first = client.get("/history/").get_data(as_text=True)
    second = client.get("/history/?page=2").get_data(as_text=True)
    assert "page 1 of 2" in first and "page 2 of 2" in second
    shown = [jid for jid in ids if f'id="job-{jid}"' in first]
    assert len(shown) == PAGE_SIZE
    assert all(f'id="job-{jid}"' in second for jid in ids if jid not in shown)
    assert client.get("/history/?page=x").status_code == 400


def test_history_needs_a_login(client: FlaskClient) -> None:
    assert client.get("/history/").status_code == 302
    assert client.get("/history/1/log").status_code == 302


def test_the_nav_links_the_history(app: Flask, client: FlaskClient) -> None:
    log_in_as(app, client, "bob")
    assert 'href="/history/"' in client.get("/").get_data(as_text=True)


# --- logs ------------------------------------------------------------------------------------------------------------


def test_the_owner_reads_the_tail_of_her_log(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler, reader: FakeReader
) -> None:
    jid = add_session(app, fake_scheduler, "bob")
    path = f"/home/bob/carme-jupyterlab-{jid}.out"
    reader.files[path] = "".join(f"line {i}\n" for i in range(1000)).encode()
    log_in_as(app, client, "bob")
    resp = client.get(f"/history/{jid}/log")
    assert resp.status_code == 200 and resp.mimetype == "text/plain"
    text = resp.get_data(as_text=True)
    assert text.splitlines()[0] == "line 800" and text.endswith("line 999\n")
    assert reader.calls[-1][:2] == ("bob", path)
    assert client.get(f"/history/{jid}/log?lines=3").get_data(as_text=True) == "line 997\nline 998\nline 999\n"
    for bad in ("0", "5001", "x"):
        assert client.get(f"/history/{jid}/log?lines={bad}").status_code == 400


def test_the_owner_downloads_her_log(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler, reader: FakeReader
) -> None:
    jid = add_session(app, fake_scheduler, "bob")
    reader.files[f"/home/bob/carme-jupyterlab-{jid}.out"] = b"\x00binary\xff and text\n"
    log_in_as(app, client, "bob")
    resp = client.get(f"/history/{jid}/log?download=1")
    assert resp.status_code == 200 and resp.data == b"\x00binary\xff and text\n"
    assert resp.headers["Content-Disposition"] == f'attachment; filename="carme-jupyterlab-{jid}.out"'
    assert resp.mimetype == "application/octet-stream"
    assert reader.calls[-1][2] == 5 * 1024 * 1024  # capped


def test_another_users_log_is_refused(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler, reader: FakeReader
) -> None:
    jid = add_session(app, fake_scheduler, "bob")
    reader.files[f"/home/bob/carme-jupyterlab-{jid}.out"] = b"bob's secrets\n"
    for user, admin in (("alice", False), ("carol", True)):  # administrators read no user's log here either
        log_in_as(app, client, user, admin=admin)
        assert client.get(f"/history/{jid}/log").status_code == 403
        assert client.get(f"/history/{jid}/log?download=1").status_code == 403
    assert reader.calls == []


def test_a_missing_log_or_job_is_404(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler, reader: FakeReader
) -> None:
    jid = add_session(app, fake_scheduler, "bob")
    log_in_as(app, client, "bob")
    assert client.get(f"/history/{jid}/log").status_code == 404  # not written (yet)
    assert client.get("/history/99999/log").status_code == 404  # no such job of hers
    assert client.get("/history/12x/log").status_code == 400


def test_a_batch_jobs_log_is_read_from_its_working_directory(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler, reader: FakeReader
) -> None:
    fake_scheduler.accounting = (account_job(601, "bob"), account_job(602, "alice", workdir="/home/alice"))
    reader.files["/home/bob/runs/slurm-601.out"] = b"epoch 1 loss 0.3\n"
    log_in_as(app, client, "bob")
    assert client.get("/history/601/log").get_data(as_text=True) == "epoch 1 loss 0.3\n"
    assert reader.calls == [("bob", "/home/bob/runs/slurm-601.out", 1024 * 1024)]
    assert client.get("/history/602/log").status_code == 404  # not in bob's accounting


def test_job_log_path() -> None:
    assert job_log_path(account_job(7, "bob")) == "/home/bob/runs/slurm-7.out"
    assert job_log_path(account_job(7, "bob", std_out="/home/bob/%x-%j-%u.log")) == "/home/bob/train.sh-7-bob.log"
    assert job_log_path(account_job(7, "bob", std_out="/home/bob/100%%-%j.out")) == "/home/bob/100%-7.out"
    assert job_log_path(account_job(7, "bob", std_out="/home/bob/%N.out")) is None  # per node: not guessed
    assert job_log_path(account_job(7, "bob", workdir="")) is None


def test_the_default_reader_asks_the_log_reader_socket(app: Flask) -> None:
    """The real reader: tests/webui/test_history_log_reader.py."""
    with app.app_context():
        reader = logs.current_log_reader()
        assert isinstance(reader, SocketLogReader) and reader.path == logs.DEFAULT_SOCKET
        app.config["LOG_READER_SOCKET"] = "/run/x.sock"
        assert getattr(logs.current_log_reader(), "path", None) == "/run/x.sock"


# --- notices ---------------------------------------------------------------------------------------------------------


def test_notice_of_an_admin_stop_until_dismissed(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    jid = add_session(app, fake_scheduler, "bob")
    own = add_session(app, fake_scheduler, "bob")
    admin_stop(app, jid, "maintenance on node1")
    log_in_as(app, client, "bob")
    post(client, f"/sessions/{own}/stop")
    page = client.get("/").get_data(as_text=True)
    assert f"carol stopped your session {jid} (JupyterLab): maintenance on node1" in page
    assert f'data-notice="{own}"' not in page  # her own stop is no news to her
    assert f'href="/history/#job-{jid}"' in page
    log_in_as(app, client, "alice")
    assert post(client, f"/history/{jid}/dismiss").status_code == 404  # not hers
    assert "maintenance on node1" not in client.get("/").get_data(as_text=True)
    log_in_as(app, client, "bob")
    assert client.post(f"/history/{jid}/dismiss").status_code == 400  # no CSRF token
    resp = post(client, f"/history/{jid}/dismiss")
    assert resp.status_code == 302 and resp.headers["Location"].endswith("/")
    assert "maintenance on node1" not in client.get("/").get_data(as_text=True)
    assert "maintenance on node1" in client.get("/history/").get_data(as_text=True)  # the history keeps it


@pytest.mark.parametrize(
    ("state", "comment", "text"),
    [
        ("NODE_FAIL", "", "ended: its node failed"),
        ("TIMEOUT", "", "reached its time limit"),
        ("FAILED", "carme:v1;app=jupyterlab;host=n;port=0;state=failed;reason=image", "container image"),
    ],
)
def test_notice_of_a_session_that_ended_under_its_owner(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler, state: str, comment: str, text: str
) -> None:
    jid = add_session(app, fake_scheduler, "bob")
    end_in_slurm(fake_scheduler, jid, state, comment)
    log_in_as(app, client, "bob")
    client.get("/")  # the end is recorded
    page = client.get("/").get_data(as_text=True)
    assert f'data-notice="{jid}"' in page and text in page


def test_no_notice_for_a_completed_session(app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler) -> None:
    jid = add_session(app, fake_scheduler, "bob")
    end_in_slurm(fake_scheduler, jid, "COMPLETED")
    log_in_as(app, client, "bob")
    client.get("/")
    assert f'data-notice="{jid}"' not in client.get("/").get_data(as_text=True)


# --- SlurmScheduler.job_history --------------------------------------------------------------------------------------


class _Client:
    queries = 0

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str], int]] = []

    def associations(self, user: str, *, of_user: str | None = None) -> list[dict[str, Any]]:
        return [
            {"user": "bob", "account": "ml"},
            {"user": "bob", "account": "vision"},
            {"user": "alice", "account": "ml"},
        ]

    def account_jobs(self, user: str, accounts: list[str], since: int) -> list[dict[str, Any]]:
        self.asked.append((user, list(accounts), since))
        gpu = {"allocated": [{"type": "gres", "name": "gpu", "count": 2}]}
        return [
            {"job_id": 5, "user": "bob", "name": "a", "state": {"current": "COMPLETED"},
             "time": {"start": 1_793_600_000, "end": 1_793_601_800, "elapsed": 1800},
             "tres": gpu, "working_directory": "/home/bob", "comment": {"job": "x"}},
            {"job_id": 9, "user": "bob", "name": "b", "state": {"current": "RUNNING"}, "time": {"elapsed": 60}},
            {"job_id": 7, "user": "alice", "name": "c", "state": {"current": "COMPLETED"}, "time": {"elapsed": 60}},
        ]  # fmt: skip


def test_slurm_scheduler_job_history_asks_with_the_users_token() -> None:
    client = _Client()
    sched = SlurmScheduler(
        client,  # type: ignore[arg-type]
        service_user="carme-portal",
        cache_seconds=1,
        quota_cache_seconds=1,
        app_dirs=(),
    )
    since = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    jobs = sched.job_history("bob", since)
    assert client.asked == [("bob", ["ml", "vision"], int(since.timestamp()))]
    assert [j.job_id for j in jobs] == [9, 5]
    assert jobs[1].gpu_hours == 1.0 and jobs[1].workdir == "/home/bob" and jobs[1].comment == "x"
    assert jobs[1].state == "COMPLETED" and jobs[1].elapsed == 1800


def test_a_dismissed_failed_session_leaves_the_dashboard(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    jid = add_session(app, fake_scheduler, "bob")
    end_in_slurm(fake_scheduler, jid, "NODE_FAIL")
    log_in_as(app, client, "bob")
    client.get("/")
    assert f'data-job="{jid}"' in client.get("/").get_data(as_text=True)  # kept, to say why it ended
    assert [v["failed"] for v in client.get("/api/sessions").get_json()["sessions"]] == [True]
    post(client, f"/history/{jid}/dismiss")
    assert f'data-job="{jid}"' not in client.get("/").get_data(as_text=True)
