# SPDX-License-Identifier: GPL-3.0-or-later
"""Maintenance windows (issue 31): announced by an administrator, a Slurm MAINT reservation of every node; the
dashboard says so and a session that would run into one is refused with the time it may have."""

from __future__ import annotations

import datetime as dt
from typing import Any

from flask import Flask
from sqlalchemy import select

from webui.extensions import db
from webui.models import AuditLog
from webui.reservations.maintenance import refusal
from webui.reservations.slurm import Reservation
from webui.reservations.slurm import maintenance_argv

from .conftest import FakeReservations
from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import post

START = {"app": "jupyterlab", "image": "pytorch", "partition": "gpu", "gpus": "1"}


def form_time(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M")  # the test config's RESERVATION_TIMEZONE is UTC


def test_a_window_holds_sessions_that_would_run_into_it_and_is_shown(
    app: Flask, client: Any, fake_scheduler: FakeScheduler, fake_reservations: FakeReservations
) -> None:
    log_in_as(app, client, "carol", admin=True)
    start = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(minutes=61)
    resp = post(client, "/reservations/admin/maintenance", {"start": form_time(start), "minutes": "120"})
    assert resp.status_code == 302
    name = f"maint-{start:%Y%m%d%H%M}"
    assert fake_reservations.items[name].flags == ("MAINT", "IGNORE_JOBS")
    assert f'data-maintenance="{name}"' in client.get("/reservations/admin").get_data(as_text=True)
    with app.app_context():
        assert db.session.scalars(select(AuditLog.action).where(AuditLog.target == name)).all() == [
            "maintenance.announce"
        ]

    log_in_as(app, client, "bob")
    assert f'data-maintenance="{name}"' in client.get("/").get_data(as_text=True)
    refused = post(client, "/sessions/new", {**START, "time_minutes": "480"})
    text = refused.get_data(as_text=True)
    assert refused.status_code == 400 and f"a maintenance window starts at {start:%Y-%m-%d %H:%M} UTC" in text
    assert "at most 59 minutes now" in text or "at most 60 minutes now" in text, text
    assert not fake_scheduler.submitted
    assert post(client, "/sessions/new", {**START, "time_minutes": "30"}).status_code == 302

    log_in_as(app, client, "carol", admin=True)
    assert post(client, f"/reservations/admin/maintenance/{name}/withdraw").status_code == 302
    assert name not in fake_reservations.items
    log_in_as(app, client, "bob")
    assert post(client, "/sessions/new", {**START, "time_minutes": "480"}).status_code == 302


def test_only_admins_announce_and_bad_input_is_a_400_naming_the_field(
    app: Flask, client: Any, fake_reservations: FakeReservations
) -> None:
    soon = form_time(dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))
    log_in_as(app, client, "bob")
    assert post(client, "/reservations/admin/maintenance", {"start": soon, "minutes": "60"}).status_code == 403
    log_in_as(app, client, "carol", admin=True)
    past = form_time(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    far = form_time(dt.datetime.now(dt.UTC) + dt.timedelta(days=400))
    for data, field in (
        ({"start": past, "minutes": "60"}, "start"),
        ({"start": far, "minutes": "60"}, "start"),
        ({"start": "tomorrow", "minutes": "60"}, "start"),
        ({"start": soon, "minutes": "5"}, "minutes"),
        ({"start": soon, "minutes": "99999"}, "minutes"),
    ):
        resp = post(client, "/reservations/admin/maintenance", data)
        assert resp.status_code == 400 and field in resp.get_data(as_text=True), (data, field)
    fake_reservations.items["carme-alice-1"] = Reservation(
        "carme-alice-1", dt.datetime.now(dt.UTC), dt.datetime.now(dt.UTC) + dt.timedelta(hours=1), users=("alice",)
    )
    resp = post(client, "/reservations/admin/maintenance/carme-alice-1/withdraw")
    assert resp.status_code == 400 and "carme-alice-1" in fake_reservations.items
    assert not [n for n in fake_reservations.items if n.startswith("maint-")]


def window(start_min: int, minutes: int, nodes: tuple[str, ...] = ("n1", "n2")) -> Reservation:
    now = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
    start = now + dt.timedelta(minutes=start_min)
    return Reservation("maint-x", start, start + dt.timedelta(minutes=minutes), nodes=nodes, flags=("MAINT",))


def test_refusal_says_what_time_is_left() -> None:
    now = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
    assert refusal([window(60, 60)], ("n1",), now, 30) is None
    assert refusal([window(60, 60)], ("n1",), now, 90) == (
        "a maintenance window starts at 2026-11-27 13:00 UTC: at most 59 minutes now, or start after it"
    )
    assert refusal([window(-5, 60)], ("n1", "n2"), now, 10) == (
        "maintenance until 2026-11-27 12:55 UTC: no session starts before then"
    )
    assert refusal([window(1, 60)], ("n1",), now, 10) == (
        "a maintenance window starts at 2026-11-27 12:01 UTC: start after 2026-11-27 13:01 UTC"
    )
    assert refusal([window(60, 60, nodes=("n2",))], ("n1",), now, 90) is None  # another partition's nodes only
    assert refusal([window(60, 60)], ("n1", "n3"), now, 90) is None  # n3 stays free: Slurm places it there


def test_maintenance_argv() -> None:
    now = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
    argv = maintenance_argv("maint-202611271300", now + dt.timedelta(hours=1), now + dt.timedelta(hours=3), now)
    assert argv[:3] == ["create", "reservation", "ReservationName=maint-202611271300"]
    assert argv[5:] == ["Nodes=ALL", "Users=root", "Flags=MAINT,IGNORE_JOBS"]
    assert maintenance_argv("maint-202611271300", now, now + dt.timedelta(hours=1), now)[3] == "StartTime=now"
