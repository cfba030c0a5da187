# SPDX-License-Identifier: GPL-3.0-or-later
"""The dashboard without reloads and without lost work (issue 30): its rows are updated by ``dashboard.js`` from
``/api/sessions`` (no meta refresh), Stop asks first (a page without JavaScript, a dialog with it), a session near its
time limit warns and can be extended within the user's limit (as the Slurm admin identity), a failed session is
dismissed rather than stopped, and the quota card reads well (plurals, a named progress bar)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from flask import Flask

from webui.dashboard.rows import plural
from webui.dashboard.rows import row_fields
from webui.extensions import db
from webui.models import AuditLog
from webui.models import PortalSession
from webui.slurm.errors import SlurmError

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import log_in_as
from .conftest import post
from .conftest import set_slurm_limits


class ExtendingScheduler(FakeScheduler):
    """A fake scheduler whose ``extend`` sets a job's time limit, as Slurm does for an Operator only."""

    def __init__(self, inner: FakeScheduler) -> None:
        self.__dict__.update(inner.__dict__)
        self.extended: list[tuple[int, int]] = []

    def extend(self, job_id: int, new_limit_minutes: int) -> None:
        if job_id not in self.jobs:
            raise SlurmError("Slurm reported: Invalid job id specified")
        self.extended.append((job_id, new_limit_minutes))
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], time_limit_minutes=new_limit_minutes)


def ending_soon(app: Flask, sched: FakeScheduler, owner: str = "alice", minutes_left: int = 10) -> int:
    """A ready session of ``owner`` with ``minutes_left`` of its 60 minutes left."""
    job = add_session(app, sched, owner, running=True, ready=True)
    started = int(time.time()) - (60 - minutes_left) * 60
    sched.jobs[job] = dataclasses.replace(sched.jobs[job], start_time=started)
    return job


def page(client: Any) -> str:
    return str(client.get("/").get_data(as_text=True))


def test_no_meta_refresh_and_the_rows_are_polled(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job = add_session(app, fake_scheduler, "alice", running=True, ready=True)
    log_in_as(app, client, "alice")
    html = page(client)
    assert 'http-equiv="refresh"' not in html
    assert "dashboard.js" in html and 'data-poll="/api/sessions"' in html
    assert 'data-poll-ms="15000"' in html and 'data-poll-fast-ms="500"' in html  # 15 s, faster while one starts
    assert 'aria-live="polite"' in html  # changes are announced to screen readers
    assert ">Refresh</a>" in html  # without JavaScript
    assert f'data-job="{job}"' in html and "<script>" not in html  # no inline script (CSP)
    body = client.get("/static/dashboard.js")
    js = body.get_data(as_text=True)
    body.close()
    assert "showModal" in js and 'getAttribute("data-poll")' in js  # asks the URL the page names; the dialog


def test_the_api_gives_the_rows_words(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job = add_session(app, fake_scheduler, "alice", running=True, ready=True)
    log_in_as(app, client, "alice")
    view = next(s for s in client.get("/api/sessions").get_json()["sessions"] if s["job_id"] == job)
    assert view["state_text"] == "RUNNING" and not view["failed"] and not view["nearing_end"]
    assert view["time_left_text"].endswith(" h") and view["password"] is None


def test_a_starting_session_has_a_start_log_row(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job = add_session(app, fake_scheduler, "alice", running=True, ready=False)
    log_in_as(app, client, "alice")
    html = page(client)
    assert f'data-log-for="{job}" data-log-url="/history/{job}/log?lines=15">' in html
    assert "<details open>" in html and '<pre class="log">' in html
    fake_scheduler.run(job, ready=True)
    assert f'data-log-for="{job}" data-log-url="/history/{job}/log?lines=15" hidden>' in page(client)


def test_stop_asks_first_and_the_session_keeps_running(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job = add_session(app, fake_scheduler, "alice", running=True, ready=True)
    log_in_as(app, client, "alice")
    html = page(client)
    assert f'href="/sessions/{job}/stop" data-stop-url="/sessions/{job}/stop"' in html  # a link: GET asks first
    assert '<dialog id="stop-dialog"' in html and "Unsaved work in the app is lost" in html
    confirm = client.get(f"/sessions/{job}/stop")
    text = confirm.get_data(as_text=True)
    assert confirm.status_code == 200 and "Unsaved work in the app is lost" in text
    assert f'action="/sessions/{job}/stop"' in text and 'method="post"' in text
    assert job in fake_scheduler.jobs and not fake_scheduler.cancelled  # asking stopped nothing
    assert post(client, f"/sessions/{job}/stop").status_code == 302
    assert fake_scheduler.cancelled == [(job, "alice")]


def test_the_stop_page_is_the_owners(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job = add_session(app, fake_scheduler, "alice", running=True, ready=True)
    log_in_as(app, client, "bob")
    assert client.get(f"/sessions/{job}/stop").status_code == 403
    assert client.get("/sessions/999999/stop").status_code == 404


def test_a_session_near_its_end_warns_and_extends_within_the_limit(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    sched = ExtendingScheduler(fake_scheduler)
    app.extensions["carme_scheduler"] = sched
    app.config["SESSION_MAX_TIME_MINUTES"] = 90
    job = ending_soon(app, sched)
    log_in_as(app, client, "alice")
    html = page(client)
    assert "Ends soon: save your work or extend the session." in html
    assert f'action="/sessions/{job}/extend"' in html and "Extend by" in html
    resp = post(client, f"/sessions/{job}/extend", {"minutes": "60"})  # 120 minutes in all: over the 90
    assert resp.status_code == 302 and not sched.extended
    html = page(client)
    assert "Extend by: 60 more minutes would make the session 120 minutes long; your limit is 90 minutes" in html
    assert post(client, f"/sessions/{job}/extend", {"minutes": "30"}).status_code == 302
    assert sched.extended == [(job, 90)]
    assert "now has a time limit of 90 minutes" in page(client)
    view = next(s for s in client.get("/api/sessions").get_json()["sessions"] if s["job_id"] == job)
    assert view["seconds_left"] > 30 * 60 and not view["nearing_end"]  # the time left moved up
    with app.app_context():
        assert db.session.query(PortalSession).filter_by(job_id=job).one().time_minutes == 90
        entry = db.session.query(AuditLog).filter_by(action="session.extend", target=str(job)).one()
        assert entry.actor == "alice" and entry.details["time_limit_minutes"] == 90


def test_only_the_owner_extends_and_only_a_running_session(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    sched = ExtendingScheduler(fake_scheduler)
    app.extensions["carme_scheduler"] = sched
    job = ending_soon(app, sched)
    pending = add_session(app, sched, "alice", running=False)
    log_in_as(app, client, "bob")
    assert post(client, f"/sessions/{job}/extend", {"minutes": "15"}).status_code == 403
    log_in_as(app, client, "alice")
    post(client, f"/sessions/{pending}/extend", {"minutes": "15"})
    assert "Extend by: only a running session can be extended" in page(client)
    post(client, f"/sessions/{job}/extend", {"minutes": "0"})
    assert "Extend by: choose between 1 and 240 minutes" in page(client)
    assert not sched.extended


def test_a_failed_session_is_dismissed_not_stopped() -> None:
    view: dict[str, Any] = {"state": "RUNNING", "reason": "the app did not start (see the job's output file)"}
    view["seconds_left"] = 100
    fields = row_fields(view)
    assert fields["failed"] and fields["state_text"] == "Failed" and not fields["can_extend"]
    assert row_fields({"state": "NODE_FAIL", "reason": "", "seconds_left": None})["failed"]
    assert not row_fields({"state": "PENDING", "reason": "", "seconds_left": None})["failed"]


def test_a_failed_row_says_dismiss(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job = add_session(app, fake_scheduler, "alice", running=True, ready=False)
    failed = fake_scheduler.jobs[job]
    fake_scheduler.jobs[job] = dataclasses.replace(failed, comment=failed.comment.replace("starting", "failed"))
    log_in_as(app, client, "alice")
    html = page(client)
    assert f'action="/sessions/{job}/dismiss">' in html and ">Dismiss</button>" in html
    assert f'data-stop-url="/sessions/{job}/stop" hidden>Stop</a>' in html
    assert post(client, f"/sessions/{job}/dismiss").status_code == 302
    with app.app_context():
        record = db.session.query(PortalSession).filter_by(job_id=job).one()
        assert record.ended_at is not None and record.end_seen


def test_plurals_and_the_quota_bar_has_a_name(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    assert plural(1, "GPU") == "1 GPU" and plural(2, "GPU") == "2 GPUs" and plural(0, "session") == "0 sessions"
    set_slurm_limits(fake_scheduler, "alice", gpus_per_job=1, max_jobs=1, gpu_minutes=6000)  # the bar needs a budget
    log_in_as(app, client, "alice")
    html = page(client)
    assert "1 GPUs" not in html and "1 sessions" not in html and "1 GPU <small>" in html
    assert '<progress max="100"' in html and 'aria-label="GPU-hours used this month' in html


def test_a_node_with_free_gpus_is_not_shown_allocated(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    node = fake_scheduler.nodes[0]
    fake_scheduler.nodes[0] = dataclasses.replace(node, state="allocated", gpus_used=1)
    log_in_as(app, client, "alice")
    html = page(client)
    assert "<td>gpu01</td><td>partly allocated</td><td>1</td>" in html


def test_a_session_in_a_reservation_is_not_extended(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    sched = ExtendingScheduler(fake_scheduler)
    app.extensions["carme_scheduler"] = sched
    job = ending_soon(app, sched)
    with app.app_context():
        db.session.query(PortalSession).filter_by(job_id=job).one().reservation = "alice-0900"
        db.session.commit()
    log_in_as(app, client, "alice")
    assert f'action="/sessions/{job}/extend" hidden>' in page(client)  # no Extend offered
    post(client, f"/sessions/{job}/extend", {"minutes": "15"})
    assert "Extend by: this session ends with its reservation alice-0900" in page(client)
    assert not sched.extended
