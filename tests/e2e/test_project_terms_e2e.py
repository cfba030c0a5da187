# SPDX-License-Identifier: GPL-3.0-or-later
"""A project's owner (PI) and end date on the live demo (issue 31).

* The inventory's ``research`` (users.yml: ``pi: alice``, ``end_date: "2030-12-31"``) shows its PI and end date on
  alice's Projects page (the portal role's ``PROJECT_TERMS``), and Slurm's account has no submit limit (``-1``).
* carol creates a project with alice as manager and PI and an end date of today; its end date is then moved to
  yesterday in the portal's table (time passing), and one run of the portal's tick (or the timer's, whichever comes
  first) sets the account's ``GrpSubmitJobs=0``: alice's plain ``sbatch --account`` is refused by Slurm, her
  Projects page says "(ended)", the start form says so, and she has the "has ended" notification. The account is
  deleted afterwards (a fresh name per run).
"""

from __future__ import annotations

import time

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import PORTAL_CLI
from tests.fixtures.demo import Demo
from tests.fixtures.demo import goto_until
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import run

pytestmark = pytest.mark.e2e

REFUSED = "Job violates accounting/QOS policy"


def grp_submit(account: str) -> str:
    """The account's own association's GrpSubmit, as sacctmgr prints it ("" for none)."""
    out = on_head("sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={account}", "format=User,GrpSubmit")
    return next(line.split("|")[1] for line in out.stdout.splitlines() if line.startswith("|"))


def test_the_inventorys_project_shows_its_pi_and_end_date(demo: Demo) -> None:
    alice, _ = login(demo, "alice")
    alice.goto(f"{BASE}/projects/")
    row = alice.locator('tr[data-project="research"]')
    assert row.locator("td.pi").inner_text() == "alice"
    assert row.locator("td.end-date").inner_text() == "2030-12-31"
    assert grp_submit("research") == ""


def test_an_ended_portal_project_takes_no_new_job(demo: Demo) -> None:
    name = f"ended{int(time.time()) % 100000}"
    try:
        carol, _ = login(demo, "carol")
        carol.goto(f"{BASE}/projects/")
        form = carol.locator("#new-project")
        today = time.strftime("%Y-%m-%d", time.gmtime())
        fields = (("name", name), ("gpu_hours", "10"), ("manager", "alice"), ("pi", "alice"), ("end_date", today))
        for field, value in fields:
            form.locator(f"input[name={field}]").fill(value)
        with carol.expect_navigation():
            form.get_by_role("button", name="Create project").click()
        said = carol.locator("p.flash").all_inner_texts()
        assert any(f"Project {name} created" in text for text in said), said
        sql = f"UPDATE project_terms SET end_date = UTC_DATE() - INTERVAL 1 DAY WHERE account = '{name}'"
        done = on_head("mysql", "carme_webui", "-e", sql)
        assert done.returncode == 0, done.stderr
        ticked = run([*PORTAL_CLI, "carme-tick"], timeout=120)  # or the timer's run just before it ended it
        assert grp_submit(name) == "0", ticked.stdout + ticked.stderr
        argv = ["runuser", "-u", "alice", "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null",
                "--mem=100", f"--account={name}", "--time=5", "--wrap=true"]  # fmt: skip
        refused = on_head(*argv)
        assert refused.returncode != 0 and REFUSED in refused.stderr, refused.stdout + refused.stderr

        alice, _ = login(demo, "alice")
        goto_until(alice, f"{BASE}/projects/", f'tr[data-project="{name}"]', timeout_s=90)
        assert "(ended)" in alice.locator(f'tr[data-project="{name}"] td.end-date').inner_text()
        goto_until(alice, f"{BASE}/sessions/new", f'p[data-ended="{name}"]', timeout_s=90)
        demo.steps.shot(alice, "start-form-says-the-project-ended")
        alice.goto(f"{BASE}/notifications/")
        assert f"Project {name} has ended" in alice.locator("main").inner_text()
    finally:
        on_head("sacctmgr", "-i", "delete", "account", name)
