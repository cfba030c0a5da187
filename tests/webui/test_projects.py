# SPDX-License-Identifier: GPL-3.0-or-later
"""Projects are Slurm accounts (issue 31): who sees which project, who sees its report, the report's figures and
its CSV, and what a page says when Slurm's accounting cannot be read."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from webui.slurm.records import AccountJob
from webui.slurm.records import SlurmProject
from webui.slurm.records import parse_projects

from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import post

RESEARCH = SlurmProject("research", "Demo research group", ("alice",), ("alice", "bob"), 600)
VISION = SlurmProject("vision", "", (), ("dave",), None)
NOV = int(dt.datetime(2026, 11, 3, 10, 0, tzinfo=dt.UTC).timestamp())


def job(job_id: int, user: str, gpus: int, hours: float, *, comment: str = "", name: str = "train") -> AccountJob:
    return AccountJob(
        job_id=job_id, user=user, name=name, state="COMPLETED", start_time=NOV, end_time=NOV + int(hours * 3600),
        elapsed=int(hours * 3600), gpu_hours=gpus * hours, comment=comment, workdir="/home/" + user, std_out="",
        account="research", gpus=gpus,
    )  # fmt: skip


def cluster(fake: FakeScheduler) -> None:
    fake.project_list = (RESEARCH, VISION)
    fake.accounting = (
        job(11, "alice", 1, 2.0, comment="carme:v1;app=jupyterlab", name="carme-jupyterlab"),
        job(12, "bob", 2, 1.5),
        job(13, "bob", 1, 0.5, name='=HYPERLINK("http://x")'),
    )


def test_members_see_their_projects_managers_and_admins_their_reports(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    cluster(fake_scheduler)
    log_in_as(app, client, "bob")
    page = client.get("/projects/").get_data(as_text=True)
    assert 'data-project="research"' in page and 'data-project="vision"' not in page
    assert "10.00 (" in page  # 600 GPU-minutes
    assert "/projects/research/report" not in page  # a member, not a manager
    assert client.get("/projects/research/report?month=2026-11").status_code == 403
    assert client.get("/projects/research/report.csv?month=2026-11").status_code == 403

    log_in_as(app, client, "alice")
    assert "/projects/research/report" in client.get("/projects/").get_data(as_text=True)
    report = client.get("/projects/research/report?month=2026-11")
    assert report.status_code == 200
    text = report.get_data(as_text=True)
    assert 'data-user="bob"><td>bob</td><td>2</td><td class="gpu-hours">3.50</td>' in text
    assert 'data-job="11"' in text and ">portal<" in text and ">sbatch<" in text
    assert client.get("/projects/vision/report?month=2026-11").status_code == 403  # not hers to manage
    assert client.get("/projects/nope/report").status_code == 404

    log_in_as(app, client, "carol", admin=True)
    page = client.get("/projects/").get_data(as_text=True)
    assert 'data-project="research"' in page and 'data-project="vision"' in page
    assert client.get("/projects/vision/report?month=2026-11").status_code == 200


def test_the_csv_has_every_job_with_its_gpu_hours_and_no_formula(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    cluster(fake_scheduler)
    log_in_as(app, client, "alice")
    resp = client.get("/projects/research/report.csv?month=2026-11")
    assert resp.status_code == 200 and resp.mimetype == "text/csv"
    assert resp.headers["Content-Disposition"] == 'attachment; filename="research-2026-11.csv"'
    rows = list(csv.DictReader(io.StringIO(resp.get_data(as_text=True))))
    assert [(r["job_id"], r["user"], r["source"], r["gpus"], r["gpu_hours"]) for r in rows] == [
        ("13", "bob", "sbatch", "1", "0.500000"),
        ("12", "bob", "sbatch", "2", "3.000000"),
        ("11", "alice", "portal", "1", "2.000000"),
    ]
    assert rows[0]["name"].startswith("'=")  # a spreadsheet shows it, does not run it
    assert rows[2]["start_utc"] == "2026-11-03T10:00:00Z"
    assert client.get("/projects/research/report.csv?month=2026-10").get_data(as_text=True).count("\n") == 1


def test_a_bad_month_is_a_400_naming_the_field(app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler) -> None:
    cluster(fake_scheduler)
    log_in_as(app, client, "alice")
    for bad in ("2026-13", "november", "2026-1", "<script>"):
        resp = client.get("/projects/research/report", query_string={"month": bad})
        assert resp.status_code == 400 and "month" in resp.get_data(as_text=True), bad


def test_slurm_unreadable_is_said_not_a_500(app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler) -> None:
    cluster(fake_scheduler)
    fake_scheduler.error = "slurmdbd is down"
    log_in_as(app, client, "alice")
    page = client.get("/projects/")
    assert page.status_code == 200 and "cannot be read right now (slurmdbd is down)" in page.get_data(as_text=True)
    assert client.get("/projects/research/report").status_code == 503


def assoc(account: str, user: str | None, minutes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An association as slurmrestd 22.05 (dbv0.0.38) prints it (the fields read here)."""
    return {"account": account, "user": user, "max": {"tres": {"group": {"minutes": minutes or [], "active": []}}}}


def test_projects_from_slurmdbd_records() -> None:
    accounts = [
        {"name": "research", "description": "Demo research group", "coordinators": [{"name": "alice", "direct": 1}]},
        {"name": "root", "description": "default root account", "coordinators": []},
        {"name": "admins", "description": "Admins", "coordinators": []},
    ]
    gpu = [{"type": "gres", "name": "gpu", "id": 1001, "count": 600}]
    assocs = [
        assoc("research", None, gpu), assoc("research", "bob"), assoc("research", "alice"), assoc("research", "root"),
        assoc("root", None), assoc("root", "root"), assoc("admins", None, [{"type": "cpu", "name": "", "count": 5}]),
        assoc("admins", "carol"),
    ]  # fmt: skip
    assert parse_projects(accounts, assocs) == [
        SlurmProject("admins", "Admins", (), ("carol",), None),
        SlurmProject("research", "Demo research group", ("alice",), ("alice", "bob"), 600),
    ]


class _Client:
    """slurmrestd as SlurmScheduler reads it: accounts, associations, and the account's jobs since a time."""

    def accounts(self, user: str) -> list[dict[str, Any]]:
        return [{"name": "research", "description": "", "coordinators": [{"name": "alice"}]}]

    def associations(self, user: str, *, of_user: str | None = None) -> list[dict[str, Any]]:
        return [assoc("research", None), assoc("research", "bob")]

    def account_jobs(self, user: str, accounts: list[str], since: int) -> list[dict[str, Any]]:
        typed = {"type": "gres", "name": "gpu:a100", "count": 2}
        gpu = {"allocated": [{"type": "gres", "name": "gpu", "count": 2}, typed]}
        oct31 = int(dt.datetime(2026, 10, 31, 23, 0, tzinfo=dt.UTC).timestamp())
        bob = {"user": "bob", "account": "research", "tres": gpu}
        return [
            {"job_id": 1, **bob, "time": {"start": oct31, "end": oct31 + 7200}},
            {"job_id": 2, **bob, "time": {"start": NOV, "end": NOV + 1800}},
            {"job_id": 3, **bob, "time": {"start": 0, "end": 0}},
        ]


def test_the_scheduler_counts_a_project_month_by_the_one_rule() -> None:
    from webui.slurm.scheduler import SlurmScheduler

    sched = SlurmScheduler(_Client(), service_user="carme-portal", cache_seconds=1, quota_cache_seconds=1, app_dirs=())  # type: ignore[arg-type]
    assert [p.name for p in sched.projects()] == ["research"] and sched.projects()[0].managers == ("alice",)
    nov, dec = dt.datetime(2026, 11, 1, tzinfo=dt.UTC), dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    jobs = sched.project_jobs("research", nov, dec)
    # job 1 ran 1 h of its 2 in November (2 GPUs, the typed gres/gpu:a100 not counted twice); job 3 never started
    assert [(j.job_id, j.gpus, j.gpu_hours) for j in jobs] == [(2, 2, 1.0), (1, 2, 2.0)]


START = {"app": "jupyterlab", "image": "pytorch", "partition": "gpu", "gpus": "1", "time_minutes": "60"}


def this_months_job(job_id: int, user: str, gpu_hours: float) -> AccountJob:
    first = dt.datetime.now(dt.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return dataclasses.replace(job(job_id, user, 1, gpu_hours), start_time=int(first.timestamp()) + 60)


def test_a_session_is_charged_to_a_project_of_the_user_and_no_other(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    fake_scheduler.project_list = (RESEARCH, VISION)
    log_in_as(app, client, "bob")
    form = client.get("/sessions/new").get_data(as_text=True)
    assert '<option value="research"' in form and '<option value="vision"' not in form
    refused = post(client, "/sessions/new", {**START, "project": "vision"})
    assert refused.status_code == 400 and "Project: is not one of your projects" in refused.get_data(as_text=True)
    assert not fake_scheduler.submitted
    assert post(client, "/sessions/new", {**START, "project": "research"}).status_code == 302
    assert fake_scheduler.submitted[-1][0].account == "research"
    assert post(client, "/sessions/new", START).status_code == 302
    assert fake_scheduler.submitted[-1][0].account is None  # the user's default account
    assert len(fake_scheduler.submitted) == 2


def test_a_spent_project_budget_is_said_before_start_and_refuses_gpu_sessions_only(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    fake_scheduler.project_list = (dataclasses.replace(RESEARCH, gpu_minutes=60),)  # 1 GPU-hour
    fake_scheduler.accounting = (this_months_job(21, "alice", 1.25),)
    log_in_as(app, client, "bob")
    form = client.get("/sessions/new").get_data(as_text=True)
    assert 'data-spent="research"' in form and "(1.25 of 1.00 GPU-hours used this month)" in form
    refused = post(client, "/sessions/new", {**START, "project": "research"})
    text = refused.get_data(as_text=True)
    assert refused.status_code == 400 and "research has used its GPU budget for this month (1.25 of 1.00" in text
    assert "ask alice" in text and not fake_scheduler.submitted
    assert post(client, "/sessions/new", {**START, "project": "research", "gpus": "0"}).status_code == 302
    assert fake_scheduler.submitted[-1][0].account == "research"
    fake_scheduler.error = "slurmdbd is down"
    unknown = post(client, "/sessions/new", {**START, "project": "research"})
    assert unknown.status_code in (400, 503)
