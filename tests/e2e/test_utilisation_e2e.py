# SPDX-License-Identifier: GPL-3.0-or-later
"""Utilisation over time on the live demo (issue 31): "The utilisation chart shows the GPUs that the test's jobs used,
at the right times, after a portal restart."

bob runs a plain ``sbatch --account=research --gres=gpu:2`` (N = 2 GPUs); while it runs, the portal's timer service
(carme-webui-tick.service, started by hand with ``systemctl start`` instead of waiting for its timer) samples Slurm;
the job is cancelled and the portal restarted; then carol's chart at /admin/utilisation and the research project's
chart show at least N GPUs in use (peak) in the minute of that sample, and the research project's chart fewer in the
minute of a sample taken before the job was submitted (the test waits for the next minute before submitting it).

Bounded: at most a minute's wait, a job of a few seconds; the portal restart waits at most ``RESTART_TIMEOUT_S``.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import Demo
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import portal_answers

pytestmark = pytest.mark.e2e

N = 2  # GPUs of bob's job: one demo node's two
RESTART_TIMEOUT_S = 60.0


def head_minute() -> dt.datetime:
    out = on_head("date", "-u", "+%Y-%m-%dT%H:%M").stdout.strip()
    return dt.datetime.fromisoformat(out).replace(tzinfo=dt.UTC)


def bobs_running_job() -> int:
    argv = ["runuser", "-u", "bob", "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "--mem=100",
            "--account=research", f"--gres=gpu:{N}", "--time=5", "--wrap=sleep 300"]  # fmt: skip
    proc = on_head(*argv)
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout.strip().split(";")[0])
    deadline = time.monotonic() + 60
    while (state := on_head("squeue", "-h", "-j", str(job), "-o", "%T").stdout.strip()) != "RUNNING":
        assert time.monotonic() < deadline, f"bob's job {job} is {state!r}, not running, after 60 s"
        time.sleep(1)
    return job


def tick() -> None:
    """A run of the timer's service of its own: started between seconds 5 and 45 of a minute, when the timer's own run
    (at second 0) is over (``systemctl start`` of a oneshot unit that is running waits for that run instead)."""
    deadline = time.monotonic() + 120
    while True:
        second = int(on_head("date", "-u", "+%S").stdout.strip() or "0")
        active = on_head("systemctl", "is-active", "carme-webui-tick.service").stdout.strip()
        if 5 <= second <= 45 and active != "activating":
            break
        assert time.monotonic() < deadline, f"carme-webui-tick.service stays {active}"
        time.sleep(1)
    proc = on_head("systemctl", "start", "carme-webui-tick.service", timeout=90)
    status = on_head("systemctl", "status", "--no-pager", "-n", "20", "carme-webui-tick.service").stdout
    assert proc.returncode == 0, f"{proc.stderr}\n{status}"


def restart_portal() -> None:
    proc = on_head("systemctl", "restart", "carme-webui.service", timeout=90)
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + RESTART_TIMEOUT_S
    while (why := portal_answers()) is not None:
        assert time.monotonic() < deadline, f"the portal does not answer after its restart: {why}"
        time.sleep(1)


def peak_at(page: Any, url: str, minutes: list[dt.datetime]) -> float:
    """The chart page's highest "in use (peak)" in the rows of ``minutes``."""
    page.goto(url)
    assert page.locator("svg[role=img] title").count() >= 1, page.content()
    peaks = []
    for minute in minutes:
        cell = page.locator(f'tr[data-time="{minute.isoformat()}"] td.used-peak')
        if cell.count():
            peaks.append(float(cell.first.text_content() or "0"))
    assert peaks, f"no row for {minutes} at {url}"
    return max(peaks)


def test_the_chart_shows_the_gpus_a_job_used_after_a_portal_restart(demo: Demo) -> None:
    tick()
    quiet = head_minute()
    while head_minute() == quiet:  # the job starts in a later minute than the quiet sample
        time.sleep(2)
    job = bobs_running_job()
    try:
        before = head_minute()
        tick()
        after = head_minute()
    finally:
        on_head("scancel", str(job))
    minutes = sorted({before, after})
    restart_portal()
    page, _ = login(demo, "carol")
    cluster = peak_at(page, f"{BASE}/admin/utilisation?range=6h", minutes)
    demo.steps.shot(page, "carol-utilisation")
    assert cluster >= N, f"the cluster chart shows {cluster} GPUs in use at {minutes}, bob's job used {N}"
    project = peak_at(page, f"{BASE}/projects/research/utilisation?range=6h", minutes)
    demo.steps.shot(page, "carol-research-utilisation")
    assert project >= N, f"research's chart shows {project} GPUs in use at {minutes}, bob's job used {N}"
    earlier = peak_at(page, f"{BASE}/projects/research/utilisation?range=6h", [quiet])
    assert earlier < project, f"research's chart shows {earlier} GPUs in use at {quiet}, before bob's job"
