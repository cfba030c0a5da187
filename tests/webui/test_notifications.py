# SPDX-License-Identifier: GPL-3.0-or-later
"""Notifications (issue 31): each event recorded once, the portal's list and mark-as-read, and mail through a real
SMTP server on 127.0.0.1 (tests/fixtures/smtp.py), retried when the relay refuses."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from carme_runtime.gpu_hours import month_bounds
from tests.fixtures.smtp import SmtpServer
from webui.auth.logins import CurrentUser
from webui.extensions import db
from webui.models import AllocationRequest
from webui.notifications import service
from webui.notifications import watch
from webui.notifications.models import Notification
from webui.projects.allocations import decide
from webui.projects.service import this_month
from webui.slurm.records import AccountJob
from webui.slurm.records import SlurmProject
from webui.slurm.state import Job

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import log_in_as
from .conftest import make_app
from .conftest import post


def rows(app: Flask, username: str | None = None) -> list[Notification]:
    with app.app_context():
        stmt = select(Notification).order_by(Notification.id)
        if username is not None:
            stmt = stmt.where(Notification.username == username)
        found = list(db.session.scalars(stmt))
        db.session.expunge_all()
        return found


def check(app: Flask) -> str:
    with app.app_context():
        return watch.check()


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    with SmtpServer() as server:
        yield server


@pytest.fixture
def mail_app(base_config: dict[str, Any], fake_scheduler: FakeScheduler, smtp: SmtpServer) -> Iterator[Flask]:
    config = {"MAIL_RELAY": smtp.relay, "MAIL_FROM": "carme@example.org", "MAIL_DOMAIN": "example.org"}
    application = make_app({**base_config, "SCHEDULER": fake_scheduler, **config, "MAIL_LDAP_ATTRIBUTE": ""})
    yield application
    with application.app_context():
        db.engine.dispose()


def test_an_event_is_recorded_once_per_user(app: Flask) -> None:
    with app.app_context():
        assert service.record("session_ready", "session_ready:7", ["bob"], "ready") == 1
        db.session.commit()
        assert service.record("session_ready", "session_ready:7", ["bob", "alice"], "ready") == 1
        db.session.commit()
    assert [(n.username, n.event, n.mail_state) for n in rows(app)] == [
        ("bob", "session_ready:7", "none"),  # no relay configured: the portal only
        ("alice", "session_ready:7", "none"),
    ]


def test_a_ready_session_is_notified_once(app: Flask, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "bob", ready=False)
    check(app)
    assert rows(app) == []  # running, its app not ready yet
    fake_scheduler.run(job_id, ready=True)
    check(app)
    check(app)
    [n] = rows(app)
    assert (n.username, n.kind, n.event) == ("bob", "session_ready", f"session_ready:{job_id}")
    assert f"session {job_id}" in n.title and "ready" in n.title


def test_a_session_ending_in_15_minutes_is_notified_once(app: Flask, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "bob")
    job = fake_scheduler.jobs[job_id]
    fake_scheduler.jobs[job_id] = Job(**{**job.__dict__, "start_time": int(time.time()) - 50 * 60})  # 10 min left
    check(app)
    check(app)
    kinds = [n.kind for n in rows(app, "bob")]
    assert kinds.count("session_ending") == 1
    ending = next(n for n in rows(app) if n.kind == "session_ending")
    assert "ends in 10 minutes" in ending.title


def test_a_failed_session_is_notified_once(app: Flask, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "bob")
    job = fake_scheduler.jobs[job_id]
    fake_scheduler.jobs[job_id] = Job(**{**job.__dict__, "state": "FAILED", "end_time": int(time.time())})
    check(app)
    del fake_scheduler.jobs[job_id]  # Slurm forgot it: the portal's record still says it failed
    check(app)
    assert [(n.kind, n.event) for n in rows(app)] == [("session_failed", f"session_failed:{job_id}")]


def _project(fake_scheduler: FakeScheduler, used_hours: float) -> None:
    lo, _ = month_bounds(this_month(), dt.UTC)
    fake_scheduler.project_list = (SlurmProject("vision", "", ("alice",), ("alice", "bob"), 10 * 60, "portal"),)
    fake_scheduler.accounting = (
        AccountJob(
            job_id=77, user="bob", name="train", state="COMPLETED", start_time=int(lo) + 60,
            end_time=int(lo) + 3600, elapsed=3540, gpu_hours=used_hours, comment="", workdir="/home/bob",
            std_out="", account="vision", gpus=1,
        ),
    )  # fmt: skip


def test_budget_thresholds_reach_managers_and_members_once_a_month(app: Flask, fake_scheduler: FakeScheduler) -> None:
    _project(fake_scheduler, 7.9)
    check(app)
    assert rows(app) == []
    _project(fake_scheduler, 8.0)
    check(app)
    check(app)
    month = this_month()
    assert sorted((n.username, n.event) for n in rows(app)) == [
        ("alice", f"budget:vision:{month}:80"),
        ("bob", f"budget:vision:{month}:80"),
    ]
    _project(fake_scheduler, 10.0)
    check(app)
    assert sorted(n.kind for n in rows(app, "bob")) == ["budget_100", "budget_80"]
    assert "used its GPU budget" in next(n.title for n in rows(app, "bob") if n.kind == "budget_100")


def test_an_unreachable_slurm_breaks_no_check(app: Flask, fake_scheduler: FakeScheduler) -> None:
    add_session(app, fake_scheduler, "bob")
    fake_scheduler.error = "slurmrestd down"
    assert "sessions failed: slurmrestd down" in check(app)
    fake_scheduler.error = None
    assert "sessions 1" in check(app)


def test_an_allocation_decision_tells_the_requester(app: Flask) -> None:
    with app.app_context():
        row = AllocationRequest(project="vision", username="alice", gpu_hours=20, purpose="more", status="pending")
        db.session.add(row)
        db.session.commit()
        with app.test_request_context("/"):
            decide(CurrentUser("carol", is_admin=True), row.id, {"action": "decline", "reason": "not this month"})
    [n] = rows(app)
    assert (n.username, n.kind, n.event) == ("alice", "allocation_decided", f"allocation:{n.event.split(':')[1]}")
    assert n.title == "Your allocation request for vision was declined"
    assert "not this month" in n.body


def test_the_list_shows_only_mine_and_marks_read_with_csrf(app: Flask, client: FlaskClient) -> None:
    with app.app_context():
        service.record("session_ready", "session_ready:1", ["bob"], "Bob's session is ready")
        service.record("session_ready", "session_ready:2", ["alice"], "Alice's session is ready")
        db.session.commit()
    mine = rows(app, "bob")[0].id
    theirs = rows(app, "alice")[0].id
    log_in_as(app, client, "bob")
    page = client.get("/notifications/").get_data(as_text=True)
    assert "Bob&#39;s session is ready" in page and "Alice" not in page
    assert "Notifications (1 unread)" in client.get("/").get_data(as_text=True)
    assert client.post(f"/notifications/{mine}/read", headers={"Referer": "https://localhost/"}).status_code == 400
    assert post(client, f"/notifications/{theirs}/read").status_code == 302
    assert rows(app, "alice")[0].read_at is None  # another user's notification is not touched
    assert post(client, f"/notifications/{mine}/read").status_code == 302
    assert rows(app, "bob")[0].read_at is not None
    assert "Notifications (" not in client.get("/").get_data(as_text=True)


def test_ready_is_mailed_once_through_the_relay(
    mail_app: Flask, fake_scheduler: FakeScheduler, smtp: SmtpServer
) -> None:
    job_id = add_session(mail_app, fake_scheduler, "bob")
    check(mail_app)
    check(mail_app)
    [mail] = smtp.mails
    assert mail.recipients == ["bob@example.org"] and mail.sender == "carme@example.org"
    assert f"Subject: [Carme] Your session {job_id}" in mail.data
    assert [n.mail_state for n in rows(mail_app)] == ["sent"]


def test_a_refusing_relay_is_retried_by_the_next_check(
    mail_app: Flask, fake_scheduler: FakeScheduler, smtp: SmtpServer
) -> None:
    add_session(mail_app, fake_scheduler, "bob")
    smtp.state.refuse = True
    check(mail_app)
    [n] = rows(mail_app)
    assert (n.mail_state, n.mail_tries) == ("pending", 1) and "451" in n.mail_error
    smtp.state.refuse = False
    check(mail_app)
    assert [m.recipients for m in smtp.mails] == [["bob@example.org"]]
    assert rows(mail_app)[0].mail_state == "sent"


def test_the_address_is_the_ldap_mail_else_the_mail_domain(base_config: dict[str, Any], slapd_server: Any) -> None:
    import ldap3  # type: ignore[import-untyped]

    from webui.notifications.mail import address_of

    alice = f"uid=alice,ou=people,{slapd_server.base_dn}"
    root = ldap3.Connection(slapd_server.uri, slapd_server.root_dn, slapd_server.root_password, auto_bind=True)
    root.modify(alice, {"mail": [(ldap3.MODIFY_REPLACE, ["alice@lab.example"])]})
    try:
        config = {
            **base_config,
            **slapd_server.portal_config(),
            "LDAP_BIND_DN": slapd_server.root_dn,
            "LDAP_BIND_PASSWORD": slapd_server.root_password,
            "MAIL_LDAP_ATTRIBUTE": "mail",
        }
        assert address_of(config, "alice") == "alice@lab.example"
        assert address_of(config, "bob") is None  # no mail in LDAP, no MAIL_DOMAIN
        assert address_of({**config, "MAIL_DOMAIN": "example.org"}, "bob") == "bob@example.org"
    finally:
        root.modify(alice, {"mail": [(ldap3.MODIFY_DELETE, [])]})
        root.unbind()
