# SPDX-License-Identifier: GPL-3.0-or-later
"""A project's owner (PI) and end date (issue 31): the create form's fields and their 400s, the inventory's terms
(PROJECT_TERMS), what the list and report pages show, the start form's refusal of an ended project, and the tick
that sets an ended portal project's GrpSubmitJobs=0 once. Slurm refusing an ended account's sbatch: the host test in
tests/integration/test_slurm_accounting.py."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from webui.extensions import db
from webui.models import AuditLog
from webui.notifications.models import Notification
from webui.projects import accounting
from webui.projects import terms
from webui.projects.models import ProjectTerms
from webui.slurm.errors import SlurmError
from webui.slurm.records import SlurmProject
from webui.utilisation import tick

from .conftest import FakeReservations
from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import make_app
from .conftest import post
from .test_projects_manage import FakeAccounting

RESEARCH = SlurmProject("research", "Demo research group", ("alice",), ("alice", "bob"), None)
TODAY = terms.today()
NEXT_YEAR = (TODAY + dt.timedelta(days=365)).isoformat()
NEW = {"name": "vision", "description": "Vision team", "gpu_hours": "10", "manager": "alice"}
START = {"app": "jupyterlab", "image": "pytorch", "partition": "gpu", "gpus": "1", "time_minutes": "60"}
INVENTORY_TERMS = {"research": {"pi": "alice", "end_date": "2030-12-31"}, "broken": {"end_date": "soon"}}


@pytest.fixture
def acct(fake_scheduler: FakeScheduler) -> FakeAccounting:
    fake_scheduler.project_list = (RESEARCH,)
    return FakeAccounting(fake_scheduler)


@pytest.fixture
def app(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, fake_reservations: FakeReservations, acct: Any
) -> Iterator[Flask]:
    config = {**base_config, "SCHEDULER": fake_scheduler, "RESERVATIONS": fake_reservations, "ACCOUNTING": acct}
    yield make_app({**config, "PROJECT_TERMS": INVENTORY_TERMS})


def audit_of(app: Flask, action: str) -> list[AuditLog]:
    with app.app_context():
        return list(db.session.scalars(select(AuditLog).where(AuditLog.action == action)))


def test_the_argv_that_ends_an_account() -> None:
    assert accounting.submit_argv("vision", 0) == [
        "modify", "account", "where", "name=vision", "set", "GrpSubmitJobs=0",
    ]  # fmt: skip
    with pytest.raises(SlurmError):
        accounting.submit_argv("vision;rm", 0)


def test_a_new_project_has_a_pi_and_an_end_date_shown_on_its_pages(app: Flask, client: FlaskClient) -> None:
    log_in_as(app, client, "carol", admin=True)
    form = client.get("/projects/").get_data(as_text=True)
    assert 'name="pi"' in form and 'name="end_date" type="date"' in form
    assert post(client, "/projects/new", {**NEW, "pi": "bob", "end_date": NEXT_YEAR}).status_code == 302
    with app.app_context():
        row = db.session.get(ProjectTerms, "vision")
        assert row is not None and (row.pi, row.end_date, row.ended_at) == (
            "bob",
            dt.date.fromisoformat(NEXT_YEAR),
            None,
        )
    [created] = audit_of(app, "project.create")
    assert created.details["pi"] == "bob" and created.details["end_date"] == NEXT_YEAR
    page = client.get("/projects/").get_data(as_text=True)
    row_html = page[page.index('id="project-vision"') :]
    assert '<td class="pi">bob</td>' in row_html and f'<td class="end-date">{NEXT_YEAR}</td>' in row_html
    report = client.get("/projects/vision/report").get_data(as_text=True)
    assert '<span class="pi">bob</span>' in report and f'<span class="end-date">{NEXT_YEAR}</span>' in report

    assert post(client, "/projects/new", {**NEW, "name": "nlp"}).status_code == 302  # no PI, no end date
    with app.app_context():
        row = db.session.get(ProjectTerms, "nlp")
        assert row is not None and (row.pi, row.end_date) == ("alice", None)  # the manager, open-ended
    page = client.get("/projects/").get_data(as_text=True)
    assert '<td class="end-date">open-ended</td>' in page[page.index('id="project-nlp"') :]


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"end_date": "2027-13-01"}, "end_date", "YYYY-MM-DD"),
        ({"end_date": "20300101"}, "end_date", "YYYY-MM-DD"),
        ({"end_date": (TODAY - dt.timedelta(days=1)).isoformat()}, "end_date", "in the past"),
        ({"pi": "mallory"}, "pi", "not a user Slurm knows"),
        ({"pi": "bob;rm -rf"}, "pi", "not a user name"),
    ],
)
def test_bad_terms_are_refused_naming_the_field(
    app: Flask, client: FlaskClient, acct: FakeAccounting, data: dict[str, str], field: str, words: str
) -> None:
    log_in_as(app, client, "carol", admin=True)
    resp = post(client, "/projects/new", {**NEW, **data})
    assert resp.status_code == 400 and f"{field}: " in resp.get_data(as_text=True)
    assert words in resp.get_data(as_text=True) and acct.calls == []
    with app.app_context():
        assert db.session.get(ProjectTerms, "vision") is None


def test_the_inventorys_terms_come_from_project_terms(app: Flask, client: FlaskClient) -> None:
    log_in_as(app, client, "bob")
    page = client.get("/projects/").get_data(as_text=True)
    assert '<td class="pi">alice</td>' in page and '<td class="end-date">2030-12-31</td>' in page
    assert terms.inventory_terms(INVENTORY_TERMS) == {"research": terms.Terms("alice", dt.date(2030, 12, 31))}
    log_in_as(app, client, "alice")
    report = client.get("/projects/research/report").get_data(as_text=True)
    assert '<span class="end-date">2030-12-31</span>' in report


def end_vision(app: Flask, client: FlaskClient, acct: FakeAccounting, end: dt.date) -> None:
    """carol makes vision (bob a member) and its end date is then moved to ``end``, as if time had passed."""
    log_in_as(app, client, "carol", admin=True)
    assert post(client, "/projects/new", {**NEW, "end_date": NEXT_YEAR}).status_code == 302
    acct.sacctmgr(accounting.member_argv("vision", "bob", add=True))
    with app.app_context():
        row = db.session.get(ProjectTerms, "vision")
        assert row is not None
        row.end_date = end
        db.session.commit()


def test_the_tick_ends_a_portal_project_once_and_tells_its_managers(
    app: Flask, client: FlaskClient, acct: FakeAccounting
) -> None:
    end_vision(app, client, acct, TODAY - dt.timedelta(days=1))
    with app.app_context():
        assert terms.expire(on=TODAY - dt.timedelta(days=1)) == 0  # its last day: not ended yet
        outcomes = tick.run_tasks({k: tick.TASKS[k] for k in ("projects", "notifications")})  # the tick's order
        assert outcomes["projects"] == "1" and "ended 1" in outcomes["notifications"]
        assert acct.calls[-1] == ["modify", "account", "where", "name=vision", "set", "GrpSubmitJobs=0"]
        calls = len(acct.calls)
        assert terms.expire() == 0 and len(acct.calls) == calls  # once
        assert "ended 0" in tick.run_tasks({"notifications": tick.TASKS["notifications"]})["notifications"]
        row = db.session.get(ProjectTerms, "vision")
        assert row is not None and row.ended_at is not None
        notes = list(db.session.scalars(select(Notification).where(Notification.kind == "project_ended")))
        assert [n.username for n in notes] == ["alice"] and notes[0].title == "Project vision has ended"
        assert (
            notes[0].body
            == f"Its end date was {(TODAY - dt.timedelta(days=1)).isoformat()}: Slurm takes no new job in it."
        )
    [ended] = audit_of(app, "project.end")
    assert ended.target == "vision" and ended.actor == "-"
    log_in_as(app, client, "alice")
    assert "(ended)" in client.get("/projects/").get_data(as_text=True)


def test_a_refused_end_is_tried_again_and_inventory_projects_are_left_to_the_deploy(
    app: Flask, client: FlaskClient, acct: FakeAccounting
) -> None:
    end_vision(app, client, acct, TODAY - dt.timedelta(days=3))
    with app.app_context():
        db.session.add(ProjectTerms(account="research", pi="alice", end_date=dt.date(2020, 1, 1)))  # not the portal's
        db.session.commit()
        acct.refuse = "sacctmgr: slurmdbd is down"
        with pytest.raises(SlurmError, match="slurmdbd is down"):
            terms.expire()
        acct.refuse = ""
        assert terms.expire() == 1
        assert [c for c in acct.calls if c[0] == "modify"] == [
            ["modify", "account", "where", "name=vision", "set", "GrpSubmitJobs=0"]
        ]


def test_the_start_form_refuses_a_session_in_an_ended_project(
    app: Flask, client: FlaskClient, acct: FakeAccounting, fake_scheduler: FakeScheduler
) -> None:
    end_vision(app, client, acct, TODAY - dt.timedelta(days=1))
    log_in_as(app, client, "bob")
    form = client.get("/sessions/new").get_data(as_text=True)
    assert 'data-ended="vision"' in form and 'data-ended="research"' not in form  # said before Start
    refused = post(client, "/sessions/new", {**START, "project": "vision", "gpus": "0"})
    text = refused.get_data(as_text=True)
    assert refused.status_code == 400 and "Project: " in text  # the start form's label of the field
    assert f"vision ended on {(TODAY - dt.timedelta(days=1)).isoformat()}" in text and not fake_scheduler.submitted
    assert post(client, "/sessions/new", {**START, "project": "research"}).status_code == 302  # ends 2030-12-31
