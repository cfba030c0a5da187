# SPDX-License-Identifier: GPL-3.0-or-later
"""A maintenance window on the live demo (issue 31): carol announces one starting in about an hour on the
reservations admin page; it is a Slurm MAINT reservation of every node; bob's dashboard announces it; his 8-hour
session request comes back with the reason and the time he may have now, a 30-minute one starts; his plain
``sbatch --time=120`` is held by Slurm. carol withdraws it and it is gone from Slurm.

Bounded: no job waits for the window; the window is deleted with scontrol whatever happens.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import Demo
from tests.fixtures.demo import fill_start_form
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head

pytestmark = pytest.mark.e2e


def test_a_maintenance_window_holds_what_would_run_into_it_and_the_portal_says_so(demo: Demo) -> None:
    start = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(minutes=62)
    name = f"maint-{start:%Y%m%d%H%M}"
    jobs: list[str] = []
    try:
        carol, _ = login(demo, "carol")
        carol.goto(f"{BASE}/reservations/admin")
        form = carol.locator("#announce-maintenance")
        form.locator("input[name=start]").fill(start.strftime("%Y-%m-%dT%H:%M"))  # the demo's forms speak UTC
        form.locator("input[name=minutes]").fill("60")
        form.get_by_role("button", name="Announce").click()
        carol.wait_for_selector(f'tr[data-maintenance="{name}"]', timeout=20_000)
        shown = on_head("scontrol", "--oneliner", "show", "reservation", name).stdout
        assert "Flags=MAINT" in shown and "Users=root" in shown, shown

        bob, _ = login(demo, "bob")
        bob.goto(f"{BASE}/")  # the dashboard reads reservations at most every SCHEDULER_CACHE_SECONDS
        bob.wait_for_selector(f'p[data-maintenance="{name}"]', timeout=20_000)
        bob.goto(f"{BASE}/sessions/new")
        fill_start_form(bob, time_minutes=480)
        bob.get_by_role("button", name="Start", exact=True).click()  # not the nav bar's "Log out" submit
        alert = bob.locator("p.error[role=alert]").inner_text()
        assert f"a maintenance window starts at {start:%Y-%m-%d %H:%M} UTC: at most" in alert, alert
        demo.steps.shot(bob, "bob-maintenance-refused")

        proc = on_head("runuser", "-u", "bob", "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null",
                       "--mem=100", "--time=120", "--wrap=sleep 30")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        jobs.append(proc.stdout.strip().split(";")[0])
        deadline = time.monotonic() + 60
        while "maintenance" not in (state := on_head("squeue", "-h", "-j", jobs[0], "-o", "%T|%r").stdout.lower()):
            assert time.monotonic() < deadline and state.startswith("pending"), state
            time.sleep(2)

        carol.goto(f"{BASE}/reservations/admin")
        carol.get_by_role("button", name=f"Withdraw maintenance window {name}").click()
        carol.wait_for_selector(f'tr[data-maintenance="{name}"]', state="detached", timeout=20_000)
        assert name not in on_head("scontrol", "show", "reservation").stdout
    finally:
        on_head("scontrol", "delete", f"ReservationName={name}")
        for job in jobs:
            on_head("scancel", job)
