# SPDX-License-Identifier: GPL-3.0-or-later
"""The dashboard's long poll while a session starts (issue 32): ``GET /api/sessions?wait=N`` answers when a starting
session changes (its app ready) instead of after the dashboard's next 0.5 s poll, answers at once when nothing starts
or the worker's waiting slots are taken, and refuses a bad ``wait`` with a 400 naming it."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from flask import Flask

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import log_in_as


def sessions(client: Any, query: str = "") -> Any:
    resp = client.get(f"/api/sessions{query}")
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()


def wait_while_slurm_runs(client: Any, sched: FakeScheduler, job: int, *, ready: bool) -> tuple[Any, Any]:
    """``GET /api/sessions?wait=10`` while, 0.3 s into it, Slurm runs ``job`` (its launcher ``ready`` or not):
    the answer, and the job's view in it."""
    timer = threading.Timer(0.3, sched.run, args=(job,), kwargs={"ready": ready})
    timer.start()
    try:
        body = sessions(client, "?wait=10")
    finally:
        timer.cancel()
    return body, next(s for s in body["sessions"] if s["job_id"] == job)


@pytest.mark.parametrize("bad", ["soon", "-1", "11", "nan", "inf"])
def test_a_bad_wait_is_refused_naming_it(app: Flask, client: Any, bad: str) -> None:
    log_in_as(app, client, "alice")
    resp = client.get(f"/api/sessions?wait={bad}")
    assert resp.status_code == 400
    assert "wait" in resp.get_data(as_text=True)


def test_nothing_watched_answers_at_once(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    add_session(app, fake_scheduler, "alice", running=True, ready=True)
    log_in_as(app, client, "alice")
    body = sessions(client, "?wait=10")
    assert body["waited"] is False and body["sessions"][0]["ready"]


def test_a_pending_session_is_answered_when_it_runs(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job = add_session(app, fake_scheduler, "alice", running=False)
    log_in_as(app, client, "alice")
    body, view = wait_while_slurm_runs(client, fake_scheduler, job, ready=False)
    assert body["waited"] is True and view["state"] == "RUNNING" and view["starting"]


def test_the_answer_comes_when_the_app_is_ready(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job = add_session(app, fake_scheduler, "alice", running=True, ready=False)
    log_in_as(app, client, "alice")
    assert not sessions(client)["sessions"][0]["ready"]
    body, view = wait_while_slurm_runs(client, fake_scheduler, job, ready=True)  # "ready" published meanwhile
    assert body["waited"] is True and view["ready"] and view["connect_url"] == f"/sessions/{job}/connect"


def test_unchanged_it_answers_after_the_wait(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job = add_session(app, fake_scheduler, "alice", running=True, ready=False)
    log_in_as(app, client, "alice")
    before = fake_scheduler.queries
    body = sessions(client, "?wait=0.5")
    view = next(s for s in body["sessions"] if s["job_id"] == job)
    assert body["waited"] is True and view["starting"] and not view["ready"]
    # the state was read again while it waited (every LONG_POLL_STEP_SECONDS), not once
    assert fake_scheduler.queries - before >= 3


def test_taken_slots_answer_at_once(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    add_session(app, fake_scheduler, "alice", running=True, ready=False)
    log_in_as(app, client, "alice")
    app.config["LONG_POLL_SLOTS"] = 1
    from webui.sessions.status import _slots

    with app.app_context():
        slots = _slots()
    assert slots.acquire(blocking=False)  # another dashboard holds the worker's only slot
    try:
        body = sessions(client, "?wait=10")
    finally:
        slots.release()
    assert body["waited"] is False  # the dashboard asks again after STARTING_POLL_SECONDS


def test_the_dashboard_asks_with_a_wait(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    add_session(app, fake_scheduler, "alice", running=True, ready=False)
    log_in_as(app, client, "alice")
    html = client.get("/").get_data(as_text=True)
    assert 'data-poll-wait-s="3"' in html
    resp = client.get("/static/dashboard.js")
    js = resp.get_data(as_text=True)
    resp.close()
    assert '"?wait=" + waitS' in js and "body.waited" in js
