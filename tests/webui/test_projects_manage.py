# SPDX-License-Identifier: GPL-3.0-or-later
"""Projects changed from the portal (issue 31): an administrator creates one, its manager adds and removes members;
what reaches sacctmgr, who may, and what the inventory's projects refuse. sacctmgr itself: the host test in
tests/integration/test_slurm_accounting.py; on the demo: tests/e2e/test_projects_e2e.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from webui.extensions import db
from webui.models import AuditLog
from webui.slurm.errors import SlurmError
from webui.slurm.records import SlurmProject

from .conftest import FakeReservations
from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import make_app
from .conftest import post

RESEARCH = SlurmProject("research", "Demo research group", ("alice",), ("alice", "bob"), None)


class FakeAccounting:
    """sacctmgr as the portal runs it: records each argv and changes the fake scheduler's projects as Slurm would."""

    def __init__(self, sched: FakeScheduler) -> None:
        self.sched = sched
        self.calls: list[list[str]] = []
        self.refuse = ""

    def sacctmgr(self, args: Sequence[str]) -> str:
        if self.refuse:
            raise SlurmError(self.refuse)
        self.calls.append(list(args))
        projects = {p.name: p for p in self.sched.project_list}
        if args[:2] == ["add", "account"]:
            projects[args[2]] = SlurmProject(args[2], "", (), (), int(args[5].split("=")[-1]), source="portal")
        elif args[:2] == ["add", "user"]:
            p = projects[args[3].split("=")[1]]
            projects[p.name] = dataclasses.replace(p, members=tuple(sorted({*p.members, args[2]})))
        elif args[:2] == ["delete", "user"]:
            p = projects[args[4].split("=")[1]]
            user = args[3].split("=")[1]
            projects[p.name] = dataclasses.replace(p, members=tuple(m for m in p.members if m != user))
        elif args[:2] == ["add", "coordinator"]:
            p = projects[args[2].split("=")[1]]
            projects[p.name] = dataclasses.replace(p, managers=(args[3].split("=")[1],))
        self.sched.project_list = tuple(projects.values())
        return ""


@pytest.fixture
def acct(fake_scheduler: FakeScheduler) -> FakeAccounting:
    fake_scheduler.project_list = (RESEARCH,)
    return FakeAccounting(fake_scheduler)


@pytest.fixture
def app(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, fake_reservations: FakeReservations, acct: Any
) -> Iterator[Flask]:
    config = {**base_config, "SCHEDULER": fake_scheduler, "RESERVATIONS": fake_reservations, "ACCOUNTING": acct}
    yield make_app({**config, "SESSION_QOS": "interactive"})


def actions(app: Flask) -> list[tuple[str, str]]:
    with app.app_context():
        return [(a.action, a.target) for a in db.session.scalars(select(AuditLog).order_by(AuditLog.id))]


NEW = {"name": "vision", "description": "Vision team", "gpu_hours": "10", "manager": "alice"}


def test_an_admin_creates_a_project_and_its_manager_adds_and_removes_members(
    app: Flask, client: FlaskClient, acct: FakeAccounting
) -> None:
    log_in_as(app, client, "bob")
    assert post(client, "/projects/new", NEW).status_code == 403
    log_in_as(app, client, "carol", admin=True)
    assert post(client, "/projects/new", NEW).status_code == 302
    assert acct.calls == [
        ["add", "account", "vision", "Description=Vision team", "Organization=carme-portal",
         "GrpTRESMins=gres/gpu=600", "QOS=interactive,normal", "DefaultQOS=normal"],
        ["add", "user", "alice", "Account=vision"],
        ["add", "coordinator", "account=vision", "names=alice"],
    ]  # fmt: skip
    assert ("project.create", "vision") in actions(app)

    log_in_as(app, client, "bob")
    assert post(client, "/projects/vision/members", {"user": "bob"}).status_code == 403  # not its manager
    log_in_as(app, client, "alice")
    assert post(client, "/projects/vision/members", {"user": "bob"}).status_code == 302
    assert acct.calls[-1] == ["add", "user", "bob", "Account=vision"]
    page = client.get("/projects/vision/report").get_data(as_text=True)
    assert 'data-member="bob"' in page and 'aria-label="Remove bob from vision"' in page
    assert post(client, "/projects/vision/members/remove", {"user": "bob"}).status_code == 302
    assert acct.calls[-1] == ["delete", "user", "where", "name=bob", "account=vision"]
    assert [a for a in actions(app) if a[0].startswith("project.member")] == [
        ("project.member_add", "vision"),
        ("project.member_remove", "vision"),
    ]


def test_the_inventorys_projects_bad_input_and_slurms_refusal(
    app: Flask, client: FlaskClient, acct: FakeAccounting
) -> None:
    log_in_as(app, client, "alice")
    resp = post(client, "/projects/research/members", {"user": "dave"})
    assert resp.status_code == 409 and "declared in the inventory" in resp.get_data(as_text=True)
    assert "declared in the inventory" in client.get("/projects/research/report").get_data(as_text=True)
    assert post(client, "/projects/nope/members", {"user": "dave"}).status_code == 404
    log_in_as(app, client, "carol", admin=True)
    for data, field in (
        ({**NEW, "name": "Vision!"}, "name"),
        ({**NEW, "name": "research"}, "name"),
        ({**NEW, "gpu_hours": "-1"}, "gpu_hours"),
        ({**NEW, "manager": "alice;rm -rf"}, "manager"),
        ({**NEW, "description": "<script>"}, "description"),
    ):
        resp = post(client, "/projects/new", data)
        assert resp.status_code == 400 and field in resp.get_data(as_text=True), (data, field)
    assert acct.calls == []
    assert post(client, "/projects/new", NEW).status_code == 302
    for data in ({"user": "x y"}, {"user": "alice"}):  # not a name; a member already
        assert post(client, "/projects/vision/members", data).status_code == 400
    acct.refuse = "Problem adding user: no such user"
    resp = post(client, "/projects/vision/members", {"user": "zed"}, follow_redirects=True)
    assert "Slurm refused: Problem adding user: no such user" in resp.get_data(as_text=True)
    assert ("project.member_add", "vision") not in actions(app)


def test_a_manager_requests_a_budget_and_an_admin_approves_or_declines_it(
    app: Flask, client: FlaskClient, acct: FakeAccounting, fake_scheduler: FakeScheduler
) -> None:
    log_in_as(app, client, "carol", admin=True)
    assert post(client, "/projects/new", NEW).status_code == 302
    log_in_as(app, client, "bob")
    ask = {"gpu_hours": "40", "purpose": "ablation runs"}
    assert post(client, "/projects/vision/allocation", ask).status_code == 403  # a member at most, no manager
    log_in_as(app, client, "alice")
    assert post(client, "/projects/research/allocation", ask).status_code == 409  # the inventory's
    assert post(client, "/projects/vision/allocation", ask).status_code == 302
    again = post(client, "/projects/vision/allocation", ask)
    assert again.status_code == 400 and "waiting for an administrator already" in again.get_data(as_text=True)
    assert post(client, "/projects/vision/allocation", {"gpu_hours": "-3", "purpose": "x"}).status_code == 400

    log_in_as(app, client, "bob")
    assert post(client, "/projects/allocations/1/decide", {"action": "approve"}).status_code == 403
    log_in_as(app, client, "carol", admin=True)
    assert 'data-allocation="1"' in client.get("/projects/").get_data(as_text=True)
    assert post(client, "/projects/allocations/1/decide", {"action": "decline"}).status_code == 400  # no reason
    assert post(client, "/projects/allocations/1/decide", {"action": "approve"}).status_code == 302
    assert acct.calls[-1] == ["modify", "account", "where", "name=vision", "set", "GrpTRESMins=gres/gpu=2400"]
    assert post(client, "/projects/allocations/1/decide", {"action": "approve"}).status_code == 409
    assert post(client, "/projects/allocations/9/decide", {"action": "approve"}).status_code == 404

    log_in_as(app, client, "alice")
    assert post(client, "/projects/vision/allocation", {"gpu_hours": "80", "purpose": "more"}).status_code == 302
    page = client.get("/projects/vision/report").get_data(as_text=True)
    assert 'data-allocation="1"' in page and ">approved<" in page and 'data-allocation="2"' in page
    log_in_as(app, client, "carol", admin=True)
    acct.refuse = "Problem modifying account"
    post(client, "/projects/allocations/2/decide", {"action": "approve"})
    log_in_as(app, client, "alice")
    assert ">failed<" in client.get("/projects/vision/report").get_data(as_text=True)
    assert [a for a in actions(app) if a[0].startswith("allocation.")] == [
        ("allocation.request", "vision"),
        ("allocation.approved", "vision"),
        ("allocation.request", "vision"),
        ("allocation.failed", "vision"),
    ]
