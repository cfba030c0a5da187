# SPDX-License-Identifier: GPL-3.0-or-later
"""What ``carme upgrade`` asks of the portal (issue 34), against the in-memory Slurm (conftest.FakeReservations):
``reservations-sync`` creates again the approved reservations Slurm lost (created / present / failed with Slurm's
reason, exit 1, the others still tried; idempotent; audited), and ``news-post KEY TEXT`` / ``news-remove KEY`` keep one
dashboard notice per key."""

from __future__ import annotations

import datetime as dt
from typing import Any

from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select

from webui.extensions import db
from webui.models import AuditLog
from webui.models import News
from webui.models import ReservationRequest
from webui.models import utcnow
from webui.reservations.slurm import ReservationSpec
from webui.reservations.slurm import create_argv
from webui.slurm.errors import SlurmError

from .conftest import SPECIAL
from .conftest import FakeReservations
from .conftest import log_in_as
from .conftest import post
from .test_reservations import form
from .test_reservations import tomorrow

ACTOR = ["--actor", "carme-upgrade"]


def approved(app: Flask, client: Any, user: str, start: int, end: int) -> str:
    """USER's request, approved by the policy (the approval's own path): its reservation's name."""
    log_in_as(app, client, user)
    assert post(client, "/reservations/request", form(tomorrow(start), tomorrow(end))).status_code == 302
    with app.app_context():
        row = db.session.execute(select(ReservationRequest).order_by(ReservationRequest.id.desc())).scalars().first()
        assert row is not None and row.status == "approved" and row.name
        return row.name


def test_reservations_sync_creates_what_slurm_lost_leaves_what_it_holds_and_reports_refusals(
    app: Flask, client: Any, runner: FlaskCliRunner, fake_reservations: FakeReservations
) -> None:
    fake_reservations.nodes = ("gpu01", "gpu02")
    lost, kept = approved(app, client, "alice", 10, 12), approved(app, client, "bob", 14, 16)
    refused = approved(app, client, "dave", 18, 20)
    by_name = {spec.name: spec for spec in fake_reservations.created}
    with app.app_context():  # an approved reservation that ended: not created again
        past = utcnow() - dt.timedelta(days=2)
        db.session.add(ReservationRequest(username="erin", gpus=1, nodes=1, start_at=past,
                                          end_at=past + dt.timedelta(hours=1), purpose="old", status="approved",
                                          name="carme-erin-99"))  # fmt: skip
        db.session.commit()
    del fake_reservations.items[lost], fake_reservations.items[refused]  # the upgrade: Slurm forgot these two
    fake_reservations.created.clear()
    create = fake_reservations.create

    def refuse_one(spec: ReservationSpec) -> str:
        if spec.name == refused:
            raise SlurmError(SPECIAL)
        return create(spec)

    fake_reservations.create = refuse_one  # type: ignore[method-assign]
    first = runner.invoke(args=["reservations-sync", *ACTOR])
    assert first.exit_code == 1, first.output
    lines = first.output.splitlines()
    assert f"reservation {lost} (request {lost.rsplit('-', 1)[1]}): created" in lines
    assert f"reservation {kept} (request {kept.rsplit('-', 1)[1]}): present" in lines
    assert any(line.startswith(f"reservation {refused} ") and line.endswith(": failed: " + SPECIAL.splitlines()[0])
               for line in lines)  # fmt: skip
    assert "carme-erin-99" not in first.output
    assert fake_reservations.created == [by_name[lost]]  # the approval's spec, the same argv in Slurm
    with app.app_context():
        audits = db.session.execute(select(AuditLog).where(AuditLog.action.like("reservation.resync.%"))).scalars()
        assert sorted((a.actor, a.action, a.details["name"]) for a in audits) == [
            ("cli:carme-upgrade", "reservation.resync.created", lost),
            ("cli:carme-upgrade", "reservation.resync.failed", refused),
        ]
        statuses = {r.name: r.status for r in db.session.execute(select(ReservationRequest)).scalars()}
        assert statuses[refused] == "approved"  # still the portal's: the admin decides

    fake_reservations.create = create  # type: ignore[method-assign]
    second = runner.invoke(args=["reservations-sync", *ACTOR])
    assert second.exit_code == 0, second.output
    assert second.output.count(": present") == 2 and second.output.count(": created") == 1
    third = runner.invoke(args=["reservations-sync", *ACTOR])  # idempotent
    assert third.exit_code == 0 and third.output.count(": present") == 3 and "created" not in third.output


def test_reservations_sync_creates_nothing_when_slurm_cannot_be_read(
    app: Flask, client: Any, runner: FlaskCliRunner, fake_reservations: FakeReservations
) -> None:
    name = approved(app, client, "alice", 10, 12)
    del fake_reservations.items[name]
    fake_reservations.created.clear()
    fake_reservations.error = "slurmrestd: connection refused"
    result = runner.invoke(args=["reservations-sync"])
    assert result.exit_code == 1 and "could not be read: slurmrestd: connection refused" in result.output
    assert fake_reservations.created == []


def notices(app: Flask) -> list[tuple[str | None, str, str]]:
    with app.app_context():
        return [(n.notice_key, n.title, n.body) for n in db.session.execute(select(News)).scalars()]


def test_news_post_twice_is_one_notice_on_the_dashboard_and_remove_takes_it_away(
    app: Flask, client: Any, runner: FlaskCliRunner
) -> None:
    log_in_as(app, client, "carol", admin=True)
    assert post(client, "/admin/news", {"title": "Welcome", "body": "hello"}).status_code == 302  # the form's, kept
    log_in_as(app, client, "alice")
    assert "Upgrade on Monday" not in client.get("/").get_data(as_text=True)  # the news list is now cached
    first = runner.invoke(args=["news-post", *ACTOR, "upgrade", "Upgrade on Monday"])
    assert first.exit_code == 0 and first.output.strip() == "notice upgrade: posted"
    second = runner.invoke(args=["news-post", *ACTOR, "upgrade", "Upgrade on Monday, 08:00"])
    assert second.exit_code == 0 and second.output.strip() == "notice upgrade: replaced"
    assert sorted(notices(app), key=str) == [
        ("upgrade", "Notice", "Upgrade on Monday, 08:00"),
        (None, "Welcome", "hello"),
    ]
    page = client.get("/").get_data(as_text=True)
    assert page.count("Upgrade on Monday") == 1 and "Upgrade on Monday, 08:00" in page and "Welcome" in page

    removed = runner.invoke(args=["news-remove", *ACTOR, "upgrade"])
    assert removed.exit_code == 0 and removed.output.strip() == "notice upgrade: removed"
    assert notices(app) == [(None, "Welcome", "hello")]
    assert "Upgrade on Monday" not in client.get("/").get_data(as_text=True)
    again = runner.invoke(args=["news-remove", "upgrade"])
    assert again.exit_code == 0 and again.output.strip() == "notice upgrade: absent"
    with app.app_context():
        audits = db.session.execute(select(AuditLog).where(AuditLog.actor == "cli:carme-upgrade")).scalars()
        assert [(a.action, a.details["key"]) for a in audits] == [
            ("admin.news.create", "upgrade"),
            ("admin.news.create", "upgrade"),
            ("admin.news.delete", "upgrade"),
        ]


def test_news_post_refuses_a_text_longer_than_the_form_takes_and_a_bad_key(app: Flask, runner: FlaskCliRunner) -> None:
    long = runner.invoke(args=["news-post", "upgrade", "x" * 10001])
    assert long.exit_code == 2 and "TEXT" in long.output and "must be at most 10000 characters" in long.output
    empty = runner.invoke(args=["news-post", "upgrade", " "])
    assert empty.exit_code == 2 and "is required" in empty.output
    bad = runner.invoke(args=["news-post", "up grade", "text"])
    assert bad.exit_code == 2 and "KEY" in bad.output
    assert runner.invoke(args=["news-post", "upgrade", "x" * 10000]).exit_code == 0
    assert notices(app)[0][2] == "x" * 10000


def test_the_commands_take_their_arguments_after_a_double_dash_as_carme_portal_passes_them(
    app: Flask, runner: FlaskCliRunner
) -> None:
    """carme-portal runs ``flask --app webui ACTION --actor WHO -- ARGS`` (tests/admin/test_portal_cli.py)."""
    posted = runner.invoke(args=["news-post", *ACTOR, "--", "upgrade", "-- not an option"])
    assert posted.exit_code == 0, posted.output
    assert notices(app) == [("upgrade", "Notice", "-- not an option")]
    assert runner.invoke(args=["news-remove", *ACTOR, "--", "upgrade"]).exit_code == 0
    unlock = runner.invoke(args=["unlock", *ACTOR, "--", "nosuch"])
    assert unlock.exit_code == 1 and "no such user: nosuch" in unlock.output
    synced = runner.invoke(args=["reservations-sync", *ACTOR, "--"])
    assert synced.exit_code == 0 and synced.output == ""


def test_a_reservation_that_has_begun_is_created_from_now_to_its_end(
    app: Flask, runner: FlaskCliRunner, fake_reservations: FakeReservations
) -> None:
    now = utcnow().replace(microsecond=0)
    with app.app_context():
        row = ReservationRequest(username="frank", gpus=1, nodes=1, start_at=now - dt.timedelta(hours=1),
                                 end_at=now + dt.timedelta(hours=1), purpose="running", status="approved")  # fmt: skip
        db.session.add(row)
        db.session.flush()
        row.name = f"carme-frank-{row.id}"
        db.session.commit()
    result = runner.invoke(args=["reservations-sync"])
    assert result.exit_code == 0 and result.output.endswith(": created\n"), result.output
    (spec,) = fake_reservations.created
    argv = create_argv(spec, utcnow())
    assert "StartTime=now" in argv and f"EndTime={(now + dt.timedelta(hours=1)).astimezone():%Y-%m-%dT%H:%M:%S}" in argv
