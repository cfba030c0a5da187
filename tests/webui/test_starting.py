# SPDX-License-Identifier: GPL-3.0-or-later
"""A starting session: its owner sees Connect soon after the app is ready, without the page's 15 s refresh.

While a session runs and its app is not yet ready, the portal shows it from a state at most
``STARTING_STATE_SECONDS`` old (one fetch per worker, shared by every user), and the dashboard loads
``dashboard.js``, which asks ``/api/sessions`` every ``STARTING_POLL_SECONDS`` (15 s otherwise) and updates the rows.
A session submitted in the last ``STARTING_WINDOW_SECONDS`` and still pending is watched the same way, from fresh
state too (its start is seen as soon as Slurm shows it, issue 32); a ready one is not watched at all.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Flask

from webui.slurm.state import ClusterState

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import log_in_as


class AgedScheduler(FakeScheduler):
    """Returns snapshots ``age`` seconds old unless asked for a fresher one; records each ``max_age`` asked."""

    def __init__(self, inner: FakeScheduler, age: float = 1.5) -> None:
        self.__dict__.update(inner.__dict__)
        self.age = age
        self.asked: list[float | None] = []

    def state(self, max_age: float | None = None) -> ClusterState:
        self.asked.append(max_age)
        fresh = super().state(max_age)
        stamp = time.time() - (self.age if max_age is None else 0.0)
        return ClusterState(fresh.jobs, fresh.nodes, fresh.partitions, fetched_at=stamp, error=fresh.error)


def aged(app: Flask, fake_scheduler: FakeScheduler) -> AgedScheduler:
    sched = AgedScheduler(fake_scheduler)
    app.extensions["carme_scheduler"] = sched
    return sched


def listing(client: Any) -> dict[int, dict[str, Any]]:
    resp = client.get("/api/sessions")
    assert resp.status_code == 200
    return {s["job_id"]: s for s in resp.get_json()["sessions"]}


def test_a_running_session_not_yet_ready_is_shown_from_fresh_state(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    job = add_session(app, fake_scheduler, "alice", running=True, ready=False)
    log_in_as(app, client, "alice")
    sched = aged(app, fake_scheduler)
    view = listing(client)[job]
    assert view["starting"] and view["watch"] and not view["ready"]
    assert sched.asked == [None, app.config["STARTING_STATE_SECONDS"]]


def test_a_ready_session_costs_no_fresher_state(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    ready = add_session(app, fake_scheduler, "alice", running=True, ready=True)
    log_in_as(app, client, "alice")
    sched = aged(app, fake_scheduler)
    views = listing(client)
    assert views[ready]["ready"] and not views[ready]["starting"] and not views[ready]["watch"]
    assert sched.asked == [None]


def test_a_pending_session_is_shown_from_fresh_state(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    pending = add_session(app, fake_scheduler, "alice", running=False)
    log_in_as(app, client, "alice")
    sched = aged(app, fake_scheduler)
    view = listing(client)[pending]
    assert not view["starting"] and view["watch"]  # watched by the page, its start seen from fresh state
    assert sched.asked == [None, app.config["STARTING_STATE_SECONDS"]]


def test_the_dashboard_watches_only_while_a_session_starts(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    job = add_session(app, fake_scheduler, "alice", running=True, ready=False)
    log_in_as(app, client, "alice")
    page = client.get("/").get_data(as_text=True)
    assert "dashboard.js" in page and 'data-poll="/api/sessions"' in page and 'data-poll-ms="500"' in page
    assert f'data-job="{job}" data-state="RUNNING" data-watch' in page
    fake_scheduler.run(job, ready=True)
    page = client.get("/").get_data(as_text=True)
    assert 'data-poll-ms="15000"' in page and "data-watch" not in page and f"/sessions/{job}/connect" in page
    resp = client.get("/static/dashboard.js")  # served from the portal's origin (CSP script-src 'self')
    body, status = resp.get_data(as_text=True), resp.status_code
    resp.close()
    assert status == 200 and 'getAttribute("data-poll")' in body  # it asks the URL the page names
