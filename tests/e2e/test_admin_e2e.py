# SPDX-License-Identifier: GPL-3.0-or-later
"""Browser end-to-end test of the admin pages and the admin CLI on the demo cluster (issue 30, acceptance).

- `carme portal totp-reset bob`, run on this host (the admin's controller) through ansible, makes bob's next login
  ask for a new TOTP enrolment, and the audit log names who ran it (cli:<login name>);
- carol's users page lists alice's running session with her GPU-hours this month, and carol stops it with a note:
  the session ends in Slurm and the note is in the audit log;
- node health shows percentages with "%", times as "... ago", and no slurmctld item on node1 (a compute node).

bob is left un-enrolled, as fresh_account() leaves him: every test that logs him in enrols him again (login()).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import REPO
from tests.fixtures.demo import Demo
from tests.fixtures.demo import fill_login
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import password_of
from tests.fixtures.demo import squeue_has
from tests.fixtures.demo import start_jupyterlab
from tests.fixtures.demo import wait_gone

pytestmark = pytest.mark.e2e

CARME = Path(sys.executable).parent / "carme"


@pytest.fixture
def alice_job(demo: Demo) -> Iterator[tuple[object, int]]:
    """alice's running 0-GPU JupyterLab session (cancelled afterwards if the test did not stop it)."""
    on_head("scancel", "--user", "alice")
    page, _ = login(demo, "alice")
    job_id = start_jupyterlab(page)
    try:
        yield page, job_id
    finally:
        if squeue_has(job_id):
            on_head("scancel", str(job_id))


def test_carme_portal_totp_reset_makes_bob_enrol_again(demo: Demo) -> None:
    login(demo, "bob")  # enrolled now
    done = subprocess.run(
        [str(CARME), "portal", "totp-reset", "bob"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "CARME_PROJECT_DIR": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "TOTP reset for bob; they enrol again at their next login." in done.stderr
    page = demo.context(viewport={"width": 1400, "height": 900}).new_page()
    fill_login(page, "bob", password_of("bob"))
    page.click("button[type=submit]")
    page.wait_for_selector("code.secret", timeout=20_000)  # the enrolment page, with a new key
    demo.steps.shot(page, "bob-enrols-again-after-carme-portal")
    carol, _ = login(demo, "carol")
    carol.goto(f"{BASE}/admin/audit")
    audit = carol.inner_text("main")
    assert re.search(r"cli:\S+\s+totp\.reset\s+bob", audit), audit[:3000]


def test_carol_sees_and_stops_alices_session_with_a_note(demo: Demo, alice_job: tuple[object, int]) -> None:
    _, job_id = alice_job
    carol, _ = login(demo, "carol")
    row = f"tr[data-user='alice'] .user-session[data-job='{job_id}']"
    deadline = time.monotonic() + 90  # the admin's scheduler view caches a few seconds
    while True:
        carol.goto(f"{BASE}/admin/users")
        if carol.query_selector(row) and "running" in carol.inner_text(row):
            break
        assert time.monotonic() < deadline, carol.content()[:3000]
        time.sleep(3)
    alice_row = carol.inner_text("tr[data-user='alice']")
    assert "jupyterlab" in alice_row
    hours = carol.inner_text("tr[data-user='alice'] td[data-label='GPU-hours this month']")
    assert re.search(r"\d+\.\d|unknown", hours), hours
    demo.steps.shot(carol, "carol-users-page")
    note = f"Maintenance on the node (e2e {job_id}): please save your work and start again."
    carol.fill(f"{row} input[name=note]", note)
    carol.click(f"{row} button.stop")
    carol.wait_for_selector(f"text=Session {job_id} is stopping.", timeout=20_000)
    wait_gone(job_id)
    carol.goto(f"{BASE}/admin/audit")
    assert note in carol.inner_text("main")


def test_node_health_reads_in_units_and_roles(demo: Demo) -> None:
    carol, _ = login(demo, "carol")
    carol.goto(f"{BASE}/admin/health")
    node1 = carol.inner_text("section.node-health[data-node='node1']")
    head = carol.inner_text("section.node-health[data-node='head']")
    assert "slurmctld" not in node1 and "slurmd" in node1 and "Slurm state" in node1
    assert "slurmctld" in head and "running" in head
    assert re.search(r"\d+\.\d %", head + node1), head + node1  # disk use, one decimal
    assert re.search(r"(just now|\d+ (s|min|h) ago)", node1), node1
    assert carol.query_selector("section.node-health[data-node='node1'] time[datetime][title$='UTC']") is not None
    assert "Unix time" not in carol.content()
    carol.set_viewport_size({"width": 390, "height": 844})
    demo.steps.shot(carol, "carol-node-health-390")
    assert carol.evaluate("document.documentElement.scrollWidth") <= 390
