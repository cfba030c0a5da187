# SPDX-License-Identifier: GPL-3.0-or-later
"""Utilisation over time (issue 31): the timer's sample, hourly rollups and pruning with a fake clock, the charts, who
sees them, and that a page never samples."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select

from tests.webui.conftest import FakeScheduler
from webui.extensions import db
from webui.slurm.state import Job
from webui.slurm.state import Node
from webui.utilisation import sampler
from webui.utilisation import tick
from webui.utilisation.models import HOUR
from webui.utilisation.models import MINUTE
from webui.utilisation.models import UtilisationSample

T0 = dt.datetime(2026, 3, 1, 10, 0, tzinfo=dt.UTC)


def busy_cluster(sched: FakeScheduler) -> None:
    """Three nodes of 4 GPUs: gpu01 with 3 in use (vision 2, research 1), gpu02 idle, gpu03 drained with 1 in use;
    two jobs pending (3 GPUs)."""
    sched.nodes = [
        Node(name="gpu01", state="mixed", gpus_total=4, gpus_used=3, partitions=("gpu",)),
        Node(name="gpu02", state="idle", gpus_total=4, gpus_used=0, partitions=("gpu",)),
        Node(name="gpu03", state="mixed+drain", gpus_total=4, gpus_used=1, partitions=("gpu",)),
    ]
    running = {"state": "RUNNING", "partition": "gpu", "nodes": ("gpu01",)}
    sched.jobs = {
        1: Job(job_id=1, user="bob", name="a", gpus=2, account="vision", **running),  # type: ignore[arg-type]
        2: Job(job_id=2, user="alice", name="b", gpus=1, account="research", **running),  # type: ignore[arg-type]
        3: Job(job_id=3, user="bob", name="c", state="RUNNING", partition="gpu", gpus=1, nodes=("gpu03",)),
        4: Job(job_id=4, user="bob", name="d", state="PENDING", partition="gpu", gpus=2, account="vision"),
        5: Job(job_id=5, user="carol", name="e", state="PENDING", partition="gpu", gpus=1),
    }


def samples(app: Flask, period: int) -> list[UtilisationSample]:
    with app.app_context():
        query = select(UtilisationSample).where(UtilisationSample.period == period).order_by(UtilisationSample.time)
        rows = list(db.session.execute(query).scalars())
        db.session.expunge_all()
        return rows


def run_tick(app: Flask, now: dt.datetime) -> dict[str, int]:
    with app.app_context():
        return sampler.tick(now)


def test_a_sample_counts_gpus_in_use_idle_down_the_queue_and_accounts(
    app: Flask, fake_scheduler: FakeScheduler
) -> None:
    busy_cluster(fake_scheduler)
    before = fake_scheduler.queries
    assert run_tick(app, T0) == {"sampled": 1, "hours": 0, "pruned": 0}
    assert fake_scheduler.queries == before + 1
    (row,) = samples(app, MINUTE)
    assert row.time == T0
    assert (row.gpus_total, row.gpus_used, row.gpus_idle, row.gpus_down) == (12, 4.0, 5.0, 3.0)
    assert (row.jobs_pending, row.gpus_pending) == (2.0, 3.0)
    assert row.accounts == {"vision": [2.0, 2.0], "research": [1.0, 1.0]}


def test_the_sample_reads_slurm_afresh(app: Flask, fake_scheduler: FakeScheduler) -> None:
    asked: list[float | None] = []
    real = fake_scheduler.state

    def state(max_age: float | None = None) -> Any:
        asked.append(max_age)
        return real(max_age)

    fake_scheduler.state = state  # type: ignore[method-assign]
    run_tick(app, T0)
    assert asked == [0]


def test_no_sample_while_slurm_cannot_be_read(app: Flask, fake_scheduler: FakeScheduler) -> None:
    fake_scheduler.error = "slurmrestd down"
    assert run_tick(app, T0)["sampled"] == 0
    assert samples(app, MINUTE) == []


def test_complete_hours_are_rolled_up_once_with_averages_and_maxima(app: Flask, fake_scheduler: FakeScheduler) -> None:
    busy_cluster(fake_scheduler)
    for minute in range(0, 60, 10):  # six samples in 10:00-11:00, vision's job only in the first three
        if minute == 30:
            del fake_scheduler.jobs[1]
            fake_scheduler.nodes[0] = Node(name="gpu01", state="mixed", gpus_total=4, gpus_used=1)
        assert run_tick(app, T0 + dt.timedelta(minutes=minute))["hours"] == 0
    assert run_tick(app, T0 + dt.timedelta(hours=1, minutes=1))["hours"] == 1
    assert run_tick(app, T0 + dt.timedelta(hours=1, minutes=2))["hours"] == 0  # not twice
    (hour,) = samples(app, HOUR)
    assert hour.time == T0
    assert hour.gpus_used == pytest.approx(3.0)  # 4, 4, 4, 2, 2, 2
    assert hour.gpus_used_max == 4
    assert hour.jobs_pending_max == 2
    assert hour.accounts["vision"] == pytest.approx([1.0, 2.0])
    assert hour.accounts["research"] == pytest.approx([1.0, 1.0])
    assert len(samples(app, MINUTE)) == 8  # raw samples stay for RAW_KEEP


def test_pruning_keeps_raw_samples_two_days_and_hours_four_hundred_days(
    app: Flask, fake_scheduler: FakeScheduler
) -> None:
    run_tick(app, T0)
    run_tick(app, T0 + dt.timedelta(hours=1))
    assert [r.time for r in samples(app, HOUR)] == [T0]
    later = T0 + sampler.RAW_KEEP + dt.timedelta(minutes=30)
    result = run_tick(app, later)
    assert result["pruned"] == 1  # the 10:00 sample; 11:00's is younger than two days
    assert [r.time for r in samples(app, MINUTE)] == [T0 + dt.timedelta(hours=1), later]
    assert len(samples(app, HOUR)) == 2  # 10:00 and 11:00 (rolled up before it could be pruned)
    run_tick(app, T0 + sampler.HOURLY_KEEP + dt.timedelta(minutes=30))
    assert min(r.time for r in samples(app, HOUR)) > T0  # the 10:00 rollup is gone after 400 days
    assert dt.timedelta(days=366) <= sampler.HOURLY_KEEP


def test_the_tick_command_runs_every_task_even_when_one_fails(
    runner: FlaskCliRunner, app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []

    def boom() -> object:
        ran.append("boom")
        raise RuntimeError("no mail relay")

    monkeypatch.setattr(tick, "TASKS", {"first": boom, "utilisation": tick.TASKS["utilisation"]})
    result = runner.invoke(args=["carme-tick"])
    assert result.exit_code == 1
    assert "first: failed: no mail relay" in result.output
    assert "utilisation: {'sampled': 1" in result.output
    assert ran == ["boom"]
    assert len(samples(app, MINUTE)) == 1


def test_the_tick_command_samples(runner: FlaskCliRunner, app: Flask) -> None:
    result = runner.invoke(args=["carme-tick"])
    assert "utilisation: {'sampled': 1" in result.output
    assert len(samples(app, MINUTE)) == 1


# --- the pages ---------------------------------------------------------------------------------------------------


def seed(app: Flask, fake_scheduler: FakeScheduler, minutes_ago: int, span: int = 3) -> dt.datetime:
    """``span`` minutes of samples with vision's 2 GPUs in use, starting ``minutes_ago`` minutes before now; the rest
    of the last hour without."""
    now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    busy_cluster(fake_scheduler)
    start = now - dt.timedelta(minutes=minutes_ago)
    for m in range(60, 0, -1):
        when = now - dt.timedelta(minutes=m)
        quiet = not start <= when < start + dt.timedelta(minutes=span)
        fake_scheduler.jobs.pop(1, None) if quiet else None
        if not quiet:
            busy_cluster(fake_scheduler)
        with app.app_context():
            db.session.add(sampler.sample_of(fake_scheduler.state(), when))
            db.session.commit()
    return start


def test_admins_see_the_cluster_chart_with_the_samples(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    from tests.webui.conftest import log_in_as

    start = seed(app, fake_scheduler, minutes_ago=30)
    log_in_as(app, client, "carol", admin=True)
    queries = fake_scheduler.queries
    page = client.get("/admin/utilisation?range=6h").get_data(as_text=True)
    assert fake_scheduler.queries == queries  # the page read no Slurm
    assert '<svg role="img"' in page
    assert '<title id="chart-1-title">GPUs in use, idle and down over 6 hours</title>' in page
    assert "Pending jobs over 6 hours" in page
    assert "GPUs in use: at most 4, on average 4.0, latest 4." in page  # the summary beside each chart
    assert "Pending jobs: at most 2, on average 2.0, latest 2." in page
    row = re.search(rf'<tr data-time="{re.escape(start.isoformat())}">(.*?)</tr>', page)
    assert row is not None, page
    assert '<td class="used-peak">4</td>' in row.group(1)  # vision's 2 and research's 1 on gpu01, 1 on gpu03
    assert 'href="/admin/utilisation"' in client.get("/admin/").get_data(as_text=True)
    # GPUs in use by project: vision's 2 in 3 of the 60 minutes, research's 1 all along
    accounts = re.findall(r'<tr data-account="(\w+)">.*?<td>([\d.]+)</td><td>([\d.]+)</td></tr>', page)
    assert accounts == [("research", "1.00", "1"), ("vision", "0.10", "2")]
    assert 'href="/projects/vision/utilisation?range=6h"' in page


def test_the_chart_draws_one_point_per_minute_at_its_time(app: Flask) -> None:
    from webui.utilisation.chart import line_chart
    from webui.utilisation.series import Point

    since = T0
    until = T0 + dt.timedelta(minutes=10)
    points = [
        Point(T0 + dt.timedelta(minutes=m), 4, float(u), float(u), 4.0 - u, 0.0, 0.0, 0.0)
        for m, u in ((0, 0), (5, 2), (9, 4))
    ]
    chart = line_chart("t", points, [("used", "#000", False, lambda p: p.used)], since, until, "s", step=600)
    # x from 44 to 708 over ten minutes, y from 212 (0 GPUs) to 12 (4 GPUs)
    assert chart.lines[0].segments == ("44.0,212.0 376.0,112.0 641.6,12.0",)
    assert [label for _, label in chart.y_ticks] == ["0", "2", "4"]
    gapped = line_chart("t", points, [("used", "#000", False, lambda p: p.used)], since, until, "s", step=240)
    assert gapped.lines[0].segments == ("44.0,212.0", "376.0,112.0 641.6,12.0")  # 0 -> 5 min: samples missing


def test_a_project_chart_is_for_its_managers_and_admins_only(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    from tests.webui.conftest import log_in_as
    from webui.slurm.records import SlurmProject

    fake_scheduler.project_list = (SlurmProject("vision", "", ("alice",), ("alice", "bob"), 600, "portal"),)
    start = seed(app, fake_scheduler, minutes_ago=20)
    log_in_as(app, client, "bob")
    assert client.get("/projects/vision/utilisation").status_code == 403
    assert client.get("/admin/utilisation").status_code == 403
    assert client.get("/projects/nosuch/utilisation").status_code == 404
    log_in_as(app, client, "alice")
    page = client.get("/projects/vision/utilisation?range=6h").get_data(as_text=True)
    assert "GPUs in use by project vision over 6 hours" in page
    row = re.search(rf'<tr data-time="{re.escape(start.isoformat())}">(.*?)</tr>', page)
    assert row is not None and '<td class="used-peak">2</td>' in row.group(1)
    assert client.get("/projects/vision/utilisation?range=1y").status_code == 400


def test_long_ranges_use_the_hourly_rollups(app: Flask) -> None:
    from webui.utilisation.series import rows_in

    with app.app_context():
        db.session.add(sampler.rollup_of(T0, [sampler.sample_of(FakeScheduler().state(), T0)]))
        db.session.add(sampler.sample_of(FakeScheduler().state(), T0 + dt.timedelta(minutes=5)))  # rolled up already
        db.session.add(sampler.sample_of(FakeScheduler().state(), T0 + dt.timedelta(hours=1, minutes=5)))
        db.session.commit()
        rows = rows_in(T0 - dt.timedelta(days=7), T0 + dt.timedelta(hours=2))
        assert [(r.period, r.time) for r in rows] == [(HOUR, T0), (MINUTE, T0 + dt.timedelta(hours=1, minutes=5))]


def test_lines_break_only_where_samples_are_missing() -> None:
    from webui.utilisation.series import largest_step

    assert largest_step("6h") == 150.0  # a minute apart: two missed samples in a row break the line
    assert largest_step("7d") == 9000.0  # hourly rows: two missed hours in a row
