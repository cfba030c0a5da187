# SPDX-License-Identifier: GPL-3.0-or-later
"""Limits that concurrent requests must not slip past (security issue #27, items 6 and 7).

Real concurrency: threads post at once, each through its own test client and so its own database connection, against
the file-backed database of the ``app`` fixture (SQLite here, MariaDB under ``CARME_PORTAL_DB=mariadb``), as
gunicorn's workers do in production.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import func
from sqlalchemy import select

from webui.extensions import db
from webui.models import PortalSession
from webui.models import ReservationRequest
from webui.models import SessionStart
from webui.slurm.session_spec import SessionSpec

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import csrf_token
from .conftest import log_in_as
from .conftest import set_slurm_limits
from .test_reservations import form as reservation_form
from .test_reservations import tomorrow

START = {"app": "jupyterlab", "image": "pytorch", "partition": "gpu", "gpus": "0", "time_minutes": "60"}
THREADS = 6


def at_once(app: Flask, username: str, url: str, data: dict[str, str], n: int = THREADS) -> list[Any]:
    """``n`` POSTs of ``data`` to ``url`` by ``username``, each from its own client, released together."""
    clients = [app.test_client() for _ in range(n)]
    for client in clients:
        log_in_as(app, client, username)
    barrier = threading.Barrier(n)
    answers: list[Any] = [None] * n

    def one(i: int) -> None:
        # first all at once through a request that reads the database: each thread's connection is open before the
        # POSTs (connecting to MariaDB took longer than a whole request, and kept the POSTs apart)
        barrier.wait()
        token = clients[i].get("/api/csrf-token").get_json()["csrf_token"]
        barrier.wait()
        headers = {"Referer": "https://localhost/"}
        answers[i] = clients[i].post(url, data={**data, "csrf_token": token}, headers=headers)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(a is not None for a in answers), "a request did not finish"
    return answers


def serialised(fake: FakeScheduler, monkeypatch: pytest.MonkeyPatch, delay: float = 0.05) -> None:
    """The fake scheduler made safe for threads (Slurm serialises its own calls), and slow to submit, as slurmrestd
    is: the window in which concurrent starts all counted the same sessions."""
    lock = threading.Lock()

    def locked(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return method(*args, **kwargs)

        return call

    real_submit = fake.submit

    def submit(spec: SessionSpec, secret: str) -> int:
        time.sleep(delay)
        return int(locked(real_submit)(spec, secret))

    monkeypatch.setattr(fake, "state", locked(fake.state))
    monkeypatch.setattr(fake, "submit", submit)


# --- item 7: the session limit ---------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def two_jobs_in_slurm(fake_scheduler: FakeScheduler) -> None:
    """alice's association holds her at 2 running jobs (MaxJobs=2): the portal's session limit (issue 31)."""
    set_slurm_limits(fake_scheduler, "alice", max_jobs=2)


@pytest.mark.parametrize("url", ["/api/sessions", "/sessions/new"])
def test_concurrent_starts_stay_within_the_session_limit(
    app: Flask, fake_scheduler: FakeScheduler, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    add_session(app, fake_scheduler, "alice")  # one running; Slurm's MaxJobs allows 2
    serialised(fake_scheduler, monkeypatch)
    answers = at_once(app, "alice", url, START)
    started = [a for a in answers if a.status_code in (201, 302)]
    refused = [a for a in answers if a.status_code == 400]
    assert len(started) == 1, [a.status_code for a in answers]
    assert len(refused) == THREADS - 1
    for a in refused:
        assert "the limit is 2" in a.get_data(as_text=True)
    assert len(fake_scheduler.submitted) == 1
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(PortalSession)) == 2
        assert db.session.scalar(select(func.count()).select_from(SessionStart)) == 0  # no start left in flight


def test_concurrent_starts_under_the_limit_all_start(
    app: Flask, fake_scheduler: FakeScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock serialises the count, not the starts: three at once with room for three all start."""
    set_slurm_limits(fake_scheduler, "alice", max_jobs=3)
    serialised(fake_scheduler, monkeypatch)
    answers = at_once(app, "alice", "/api/sessions", START, n=3)
    assert [a.status_code for a in answers] == [201, 201, 201]
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(PortalSession)) == 3


def test_a_failed_submission_gives_its_place_back(
    app: Flask, fake_scheduler: FakeScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webui.slurm.errors import SlurmError

    def refuse(spec: SessionSpec, secret: str) -> int:
        raise SlurmError("Slurm reported: slurmctld is down")

    monkeypatch.setattr(fake_scheduler, "submit", refuse)
    (answer,) = at_once(app, "alice", "/api/sessions", START, n=1)
    assert answer.status_code == 503
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(SessionStart)) == 0
    monkeypatch.undo()
    answers = at_once(app, "alice", "/api/sessions", START, n=2)
    assert [a.status_code for a in answers] == [201, 201]


def test_a_job_that_cannot_be_recorded_is_cancelled_and_its_place_given_back(
    app: Flask, fake_scheduler: FakeScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database error while recording a submitted job (MariaDB answered 1213 "Deadlock found" in CI) leaves no job
    that nobody can see: it is cancelled, the claim given back, and the answer is the database's 503."""
    from sqlalchemy.exc import OperationalError

    from webui.sessions import limit

    def deadlock(self: Any) -> None:
        raise OperationalError("DELETE FROM session_start", {}, Exception("1213 Deadlock found"))

    monkeypatch.setattr(limit.Claim, "settle", deadlock)
    (answer,) = at_once(app, "alice", "/api/sessions", START, n=1)
    assert answer.status_code == 503 and answer.get_json()["database"] == "down"
    assert len(fake_scheduler.submitted) == 1
    assert [user for _job, user in fake_scheduler.cancelled] == ["alice"] and not fake_scheduler.jobs
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(SessionStart)) == 0
        assert db.session.scalar(select(func.count()).select_from(PortalSession)) == 0


def test_a_start_in_flight_counts_and_a_stale_one_does_not(app: Flask, fake_scheduler: FakeScheduler) -> None:
    """A worker killed between its claim and its record leaves the claim: it counts for a while, then no more."""
    import datetime as dt

    from webui.sessions import limit as session_limit

    add_session(app, fake_scheduler, "alice")
    with app.app_context():
        db.session.add(SessionStart(owner="alice", created_at=dt.datetime.now(dt.UTC)))
        db.session.commit()
    (answer,) = at_once(app, "alice", "/api/sessions", START, n=1)
    assert answer.status_code == 400
    assert "you already have 2 sessions (1 of them starting); the limit is 2" in answer.get_data(as_text=True)
    with app.app_context():
        row = db.session.execute(select(SessionStart)).scalar_one()
        row.created_at -= dt.timedelta(seconds=session_limit.CLAIM_SECONDS + 1)
        db.session.commit()
    (answer,) = at_once(app, "alice", "/api/sessions", START, n=1)
    assert answer.status_code == 201
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(SessionStart)) == 0  # the stale one removed


# --- item 6: reservation requests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("auto_approve", [False, True])
def test_concurrent_identical_reservation_requests_leave_one_row(
    app: Flask, auto_approve: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webui.reservations import service as reservation_service

    real_decide = reservation_service.decide

    def slow_decide(*args: Any, **kwargs: Any) -> Any:  # the window between the look for the same request and its row
        time.sleep(0.05)
        return real_decide(*args, **kwargs)

    monkeypatch.setattr(reservation_service, "decide", slow_decide)
    app.config["RESERVATION_AUTO_APPROVE"] = auto_approve
    answers = at_once(app, "alice", "/reservations/request", reservation_form())
    assert [a.status_code for a in answers] == [302] * THREADS, [a.get_data(as_text=True)[:300] for a in answers]
    with app.app_context():
        rows = list(db.session.execute(select(ReservationRequest)).scalars())
    assert len(rows) == 1
    assert rows[0].status == ("approved" if auto_approve else "pending")


def test_an_identical_request_answers_with_the_existing_one(app: Flask) -> None:
    app.config["RESERVATION_AUTO_APPROVE"] = False
    client = app.test_client()
    log_in_as(app, client, "alice")
    data = {**reservation_form(), "csrf_token": csrf_token(client)}
    headers = {"Referer": "https://localhost/"}
    first = client.post("/reservations/request", data=data, headers=headers, follow_redirects=True)
    again = client.post("/reservations/request", data=data, headers=headers, follow_redirects=True)
    assert first.status_code == again.status_code == 200
    with app.app_context():
        row = db.session.execute(select(ReservationRequest)).scalar_one()
    assert f"Request {row.id} waits for an administrator" in first.get_data(as_text=True)
    assert f"Request {row.id} for this time is recorded already" in again.get_data(as_text=True)
    # other resources in the window are another request (refused: it overlaps the first); another window is one too
    other = client.post("/reservations/request", data={**data, "gpus": "2"}, headers=headers)
    assert other.status_code == 400 and "start: overlaps your own reservation" in other.get_data(as_text=True)
    later = {**data, "start": tomorrow(14), "end": tomorrow(16)}
    assert client.post("/reservations/request", data=later, headers=headers).status_code == 302
    bob = app.test_client()
    log_in_as(app, bob, "bob")
    bobs = {**data, "csrf_token": csrf_token(bob)}
    assert bob.post("/reservations/request", data=bobs, headers=headers).status_code == 302
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(ReservationRequest)) == 3
