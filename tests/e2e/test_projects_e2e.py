# SPDX-License-Identifier: GPL-3.0-or-later
"""Projects are Slurm accounts, on the live demo (issue 31, first part).

The demo's inventory makes alice the manager (the Slurm coordinator) of the ``research`` project, whose members are
alice and bob. bob runs a plain ``sbatch --account=research --gres=gpu:1``; then

* alice's Projects page lists ``research`` with both members and a Report link; the report for the month lists bob's
  1-GPU portal session (``portal``) and his job (``sbatch``), and its CSV gives the GPU-hours that ``sacct`` shows for
  each (GPUs of AllocTRES x ElapsedRaw), and the account's coordinators in Slurm are the managers shown;
* bob sees the project, no Report link, and the report (HTML and CSV) is 403 for him.

Bounded: one 15-s job; the report is read again until slurmdbd's record is in it (the portal reads an account's jobs
at most every ``QUOTA_CACHE_SECONDS``), at most ``REPORT_TIMEOUT_S``.
"""

from __future__ import annotations

import csv
import io
import time
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import Demo
from tests.fixtures.demo import csrf_headers
from tests.fixtures.demo import goto_until
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import wait_job_end
from tests.fixtures.demo import wait_session_ready

pytestmark = pytest.mark.e2e

REPORT_TIMEOUT_S = 180.0


def bobs_gpu_job() -> tuple[int, str]:
    """(job id, its month YYYY-MM in UTC) of bob's finished 1-GPU job in research."""
    argv = ["runuser", "-u", "bob", "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "--mem=100",
            "--account=research", "--gres=gpu:1", "--time=5", "--wrap=sleep 15"]  # fmt: skip
    proc = on_head(*argv)
    assert proc.returncode == 0, proc.stderr
    job = int(proc.stdout.strip().split(";")[0])
    assert (state := wait_job_end(job, 180)) == "COMPLETED", f"bob's job {job} did not complete: {state}"
    month = on_head("env", "TZ=UTC", "sacct", "-X", "-n", "-P", "-j", str(job), "-o", "Start").stdout.strip()[:7]
    return job, month


def bobs_gpu_session(demo: Demo) -> int:
    """bob's 1-GPU JupyterLab session charged to research, started in the portal, ready, then ended: its job id."""
    page, _ = login(demo, "bob")
    try:
        form = {"app": "jupyterlab", "image": "jupyter", "gpus": 1, "time_minutes": 10, "project": "research"}
        started = page.context.request.post(f"{BASE}/api/sessions", data=form, headers=csrf_headers(page.context))
        assert started.status == 201, started.text()
        job = int(started.json()["job_id"])
        wait_session_ready(page.context.request, job)
        on_head("scancel", str(job))
    finally:
        page.context.close()
    wait_job_end(job, 120)
    return job


def sacct_gpu_hours(job: int) -> float:
    tres, elapsed = (
        on_head("sacct", "-X", "-n", "-P", "-j", str(job), "-o", "AllocTRES,ElapsedRaw").stdout.strip().split("|")
    )
    gpus = sum(int(kv.split("=")[1]) for kv in tres.split(",") if kv.split("=")[0] == "gres/gpu")
    return gpus * int(elapsed) / 3600.0


def csv_rows(api: Any, month: str) -> dict[str, dict[str, str]]:
    resp = api.get(f"{BASE}/projects/research/report.csv?month={month}")
    assert resp.status == 200, resp.status
    return {r["job_id"]: r for r in csv.DictReader(io.StringIO(resp.text()))}


def test_a_manager_sees_bobs_session_and_sbatch_job_in_the_report_and_its_csv_matches_sacct(demo: Demo) -> None:
    coords = on_head("sacctmgr", "-n", "-P", "show", "account", "research", "withcoord", "format=coordinators")
    assert coords.stdout.strip() == "alice", coords.stdout
    session = bobs_gpu_session(demo)
    job, month = bobs_gpu_job()
    want = {str(job): sacct_gpu_hours(job), str(session): sacct_gpu_hours(session)}
    assert all(hours > 0 for hours in want.values()), want

    page, _ = login(demo, "alice")
    goto_until(page, f"{BASE}/projects/", 'tr[data-project="research"]', timeout_s=30)
    row = page.locator('tr[data-project="research"]')
    assert row.locator("td.members").inner_text() == "alice, bob"
    assert row.get_by_role("link", name="Report of project research").is_visible()
    api = page.context.request
    deadline = time.monotonic() + REPORT_TIMEOUT_S
    while True:
        rows = csv_rows(api, month)
        got = {j: rows.get(j) for j in want}
        if all(r and abs(float(r["gpu_hours"]) - want[j]) < 1e-4 for j, r in got.items()):
            break
        assert time.monotonic() < deadline, f"jobs with sacct's GPU-hours {want} not in the CSV: {got}"
        time.sleep(5)
    sources = {j: (r["user"], r["source"], r["gpus"]) for j, r in got.items() if r}
    assert sources == {str(job): ("bob", "sbatch", "1"), str(session): ("bob", "portal", "1")}, sources
    # each portal worker reads an account's jobs at most every QUOTA_CACHE_SECONDS: the worker answering the page may
    # not yet have what the one that answered the CSV had
    rows = [f'tr[data-job="{j}"]' for j in want]
    goto_until(page, f"{BASE}/projects/research/report?month={month}", *rows, timeout_s=REPORT_TIMEOUT_S)
    assert page.locator(f'tr[data-job="{job}"] td.source').inner_text() == "sbatch"
    assert page.locator(f'tr[data-job="{session}"] td.source').inner_text() == "portal"
    demo.steps.shot(page, "alice-project-report")

    bob, _ = login(demo, "bob")
    bob.goto(f"{BASE}/projects/")
    assert bob.locator('tr[data-project="research"]').count() == 1
    assert bob.get_by_role("link", name="Report of project research").count() == 0
    for path in (f"/projects/research/report?month={month}", f"/projects/research/report.csv?month={month}"):
        assert bob.context.request.get(BASE + path).status == 403, path


def test_a_spent_project_budget_holds_plain_sbatch_and_the_start_form_says_so(demo: Demo) -> None:
    """research's budget set to 0 GPU-minutes (restored in ``finally``): bob's plain GPU sbatch in it is held by Slurm
    with the association's reason, and his start form says so before he clicks Start; a GPU session in it is refused
    with the reason, and nothing is submitted."""
    on_head("sacctmgr", "-i", "modify", "account", "research", "set", "GrpTRESMins=gres/gpu=0")
    held = 0
    try:
        argv = ["runuser", "-u", "bob", "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null",
                "--mem=100", "--account=research", "--gres=gpu:1", "--time=5", "--wrap=sleep 30"]  # fmt: skip
        proc = on_head(*argv)
        assert proc.returncode == 0, proc.stderr
        held = int(proc.stdout.strip().split(";")[0])
        deadline = time.monotonic() + 60
        while (reason := on_head("squeue", "-h", "-j", str(held), "-o", "%T|%r").stdout.strip()) != (
            "PENDING|AssocGrpGRESMinutes"
        ):
            assert time.monotonic() < deadline, reason
            time.sleep(2)

        page, _ = login(demo, "bob")
        deadline = time.monotonic() + REPORT_TIMEOUT_S  # the portal reads budgets at most every QUOTA_CACHE_SECONDS
        while True:
            page.goto(f"{BASE}/sessions/new")
            if page.locator('p[data-spent="research"]').count():
                break
            assert time.monotonic() < deadline, "the start form does not say research's budget is spent"
            time.sleep(5)
        assert "Slurm holds its GPU jobs" in page.locator('p[data-spent="research"]').inner_text()
        page.check('input[name=profile][value="jupyterlab-base-1gpu"]')  # a GPU session, whatever he chose last
        page.select_option("select[name=project]", "research")
        page.get_by_role("button", name="Start", exact=True).click()  # not the nav bar's "Log out" submit
        alert = page.locator("p.error[role=alert]")
        assert "research has used its GPU budget for this month" in alert.inner_text()
        assert on_head("squeue", "-h", "-u", "bob", "-o", "%i").stdout.split() == [str(held)]
        demo.steps.shot(page, "bob-project-budget-spent")
    finally:
        on_head("sacctmgr", "-i", "modify", "account", "research", "set", "GrpTRESMins=gres/gpu=-1")
        if held:
            on_head("scancel", str(held))


def test_carol_creates_a_project_alice_adds_bob_and_his_plain_sbatch_runs_in_it(demo: Demo) -> None:
    """The acceptance's first step (issue 31): carol creates a project with 10 GPU-hours and alice as its manager;
    alice adds bob on its page; bob's plain ``sbatch --account=NAME --gres=gpu:1`` runs. The account is deleted
    afterwards (a fresh name per run)."""
    name = f"vision{int(time.time()) % 100000}"
    try:
        carol, _ = login(demo, "carol")
        carol.goto(f"{BASE}/projects/")
        form = carol.locator("#new-project")
        for field, value in (("name", name), ("description", "e2e vision"), ("gpu_hours", "10"), ("manager", "alice")):
            form.locator(f"input[name={field}]").fill(value)
        with carol.expect_navigation():
            form.get_by_role("button", name="Create project").click()
        said = carol.locator("p.flash").all_inner_texts()
        assert any(f"Project {name} created" in text for text in said), said  # Slurm's refusal, if it refused
        # each portal worker reads the projects at most every QUOTA_CACHE_SECONDS: the list is read again until then
        goto_until(carol, f"{BASE}/projects/", f'tr[data-project="{name}"]', timeout_s=90)
        assert carol.locator(f'tr[data-project="{name}"]').count(), carol.locator("main").inner_text()
        assert carol.locator(f'tr[data-project="{name}"] td.budget').inner_text().startswith("10.00")

        alice, _ = login(demo, "alice")
        alice.goto(f"{BASE}/projects/{name}/report")
        alice.locator("#add-member input[name=user]").fill("bob")
        alice.get_by_role("button", name="Add member").click()
        goto_until(alice, f"{BASE}/projects/{name}/report", 'li[data-member="bob"]', timeout_s=90)
        demo.steps.shot(alice, "alice-adds-bob")
        argv = ["runuser", "-u", "bob", "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null",
                "--mem=100", f"--account={name}", "--gres=gpu:1", "--time=5", "--wrap=sleep 2"]  # fmt: skip
        proc = on_head(*argv)
        assert proc.returncode == 0, proc.stderr
        job = proc.stdout.strip().split(";")[0]
        assert (state := wait_job_end(job, 120)) == "COMPLETED", state

        # alice asks for 20 GPU-hours a month, carol approves: Slurm's budget of the account follows
        form = alice.locator("#request-allocation")
        form.locator("input[name=gpu_hours]").fill("20")
        form.locator("textarea[name=purpose]").fill("e2e: more runs")
        form.get_by_role("button", name="Request").click()
        alice.wait_for_selector("text=waits for an administrator", timeout=20_000)
        carol.goto(f"{BASE}/projects/")
        row = carol.locator("#allocations tr[data-allocation]").filter(has_text=name)
        row.get_by_role("button", name="Approve").click()
        carol.wait_for_selector("text=: approved.", timeout=20_000)
        shown = on_head("sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={name}", "format=User,GrpTRESMins")
        assert "|gres/gpu=1200" in shown.stdout.splitlines(), shown.stdout  # the account's own association
    finally:
        on_head("sacctmgr", "-i", "delete", "account", name)
