# SPDX-License-Identifier: GPL-3.0-or-later
"""Limits Slurm enforces for every job on the live demo (issue 11): plain sbatch cannot get past them.

Against the deployed demo (policy in inventories/demo/group_vars/all/slurm.yml: per user 2 GPUs and 4 running jobs
across all QOS and partitions, 1 GPU in QOS ``interactive``, a monthly budget of 6000 GPU-minutes):

* alice cannot get more GPUs than her policy through sbatch, whatever QOS (``normal``, ``interactive``, one that
  does not exist) or partition (``interactive``, ``batch``) she names: refused at submit, or held with an
  ``Assoc``/``QOS`` reason while GPUs are free;
* running jobs count across QOS against the association's MaxJobs (lowered to 2 for the test, restored);
* a job over the partition's MaxTime is refused at submit with the reason (``EnforcePartLimits=ALL``);
* a GPU-minute budget lowered to 2 minutes (restored in ``finally``) holds her next GPU job once used.

Uses the ``demo`` fixture's helpers (tests/fixtures/demo.py): skips without a demo unless ``CARME_E2E_REQUIRED=1``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from tests.fixtures.demo import Demo
from tests.fixtures.demo import on_head

pytestmark = pytest.mark.e2e

USER = "alice"
ACCOUNT = "research"
REFUSED = "Job violates accounting/QOS policy"


def sbatch(*args: str, seconds: int = 300) -> tuple[int | None, str]:
    """Plain sbatch as alice; (job id, sbatch's messages) when accepted, (None, its error) when refused (also used
    by test_exclusive_limits_e2e.py, with the ``clean`` fixture)."""
    argv = ["runuser", "-u", USER, "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "--mem=100",
            *args, f"--wrap=sleep {seconds}"]  # fmt: skip
    proc = on_head(*argv)
    if proc.returncode == 0:
        return int(proc.stdout.strip().split(";")[0]), proc.stderr.strip()
    return None, proc.stderr.strip()


def job_state(job: int) -> tuple[str, str]:
    out = on_head("squeue", "--noheader", "-j", str(job), "--format=%T|%r").stdout.strip()
    state, _, reason = out.partition("|")
    return state, reason


def wait_for(job: int, want: str, timeout: float = 60) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    got = job_state(job)
    while got[0] != want and time.monotonic() < deadline:
        time.sleep(1)
        got = job_state(job)
    return got


def wait_reason(jobs: list[int], wanted: tuple[str, ...], timeout: float = 30) -> dict[int, tuple[str, str]]:
    """Poll until every job pends with a reason starting with one of ``wanted`` (the scheduler has judged it), or
    the timeout passes; the caller asserts on the states returned."""
    deadline = time.monotonic() + timeout
    while True:
        states = {job: job_state(job) for job in jobs}
        if all(s == "PENDING" and r.startswith(wanted) for s, r in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(1)


def running_gpus() -> int:
    out = on_head("squeue", "--noheader", "-u", USER, "-t", "RUNNING", "--format=%b").stdout
    return sum(int(x.rsplit(":", 1)[1]) for x in out.split() if x.startswith(("gres:gpu", "gpu")) and x[-1].isdigit())


@pytest.fixture
def clean(demo: Demo) -> Iterator[Demo]:
    on_head("scancel", "-u", USER)
    try:
        yield demo
    finally:
        on_head("scancel", "-u", USER)
        time.sleep(3)


def test_sbatch_cannot_exceed_the_gpu_limit_in_any_qos_or_partition(clean: Demo) -> None:
    # 4 GPUs (2 on each node, so no node limit gets in the way) is over the 2 of her policy; 2 over interactive's 1
    over = (
        ("--gres=gpu:2", "--nodes=2"),
        ("--qos=interactive", "--gres=gpu:2"),
        ("--partition=batch", "--gres=gpu:2", "--nodes=2"),
    )
    for args in over:
        job, error = sbatch(*args, "--time=10")
        assert job is None and REFUSED in error, (args, job, error)
    for args in (("--qos=no-such-qos",), ("--partition=no-such-partition",), ("--account=no-such-account",)):
        job, error = sbatch(*args, "--time=10")
        assert job is None and "invalid" in error.lower(), (args, error)
    held = []
    first, error = sbatch("--gres=gpu:2", "--time=10")
    assert first is not None and wait_for(first, "RUNNING")[0] == "RUNNING", error
    for args in (("--qos=normal",), ("--qos=interactive",), ("--partition=batch",), ("--partition=interactive",)):
        job, error = sbatch(*args, "--gres=gpu:1", "--time=10")
        assert job is not None, (args, error)
        held.append(job)
    states = wait_reason(held, ("Assoc", "QOS"))
    assert running_gpus() <= 2, on_head("squeue", "-u", USER).stdout
    for job, (state, reason) in states.items():
        assert state == "PENDING" and reason.startswith(("Assoc", "QOS")), (job, state, reason)


def test_running_jobs_count_across_qos(clean: Demo) -> None:
    """MaxJobs lives on the association: jobs in one QOS count against the other (lowered to 2 here, since the demo
    has just 4 CPUs and 4 jobs would fill it; restored in ``finally``)."""
    where = ["where", f"name={USER}", f"account={ACCOUNT}"]
    before = on_head("sacctmgr", "-n", "-P", "show", "assoc", *where, "format=maxjobs").stdout.strip()
    try:
        assert on_head("sacctmgr", "-i", "modify", "user", *where, "set", "MaxJobs=2").returncode == 0
        jobs = [sbatch(f"--qos={qos}", "--time=10")[0] for qos in ("normal", "interactive", "normal", "interactive")]
        assert all(jobs), jobs
        deadline = time.monotonic() + 30
        while True:  # until two run and two pend on the limit, or 30 s
            states = {job: job_state(job) for job in jobs if job}
            reasons = sorted(r for s, r in states.values() if s == "PENDING")
            if reasons == ["AssocMaxJobsLimit"] * 2 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert sum(1 for s, _ in states.values() if s == "RUNNING") == 2, states
        assert sorted(r for s, r in states.values() if s == "PENDING") == ["AssocMaxJobsLimit"] * 2, states
    finally:
        on_head("scancel", "-u", USER)
        on_head("sacctmgr", "-i", "modify", "user", *where, "set", f"MaxJobs={before or -1}")


def test_a_job_over_the_partition_time_limit_is_refused_at_submit(clean: Demo) -> None:
    job, error = sbatch("--partition=interactive", "--time=08:00:01")
    assert job is None, f"job {job} accepted over MaxTime=08:00:00"
    assert "Requested time limit is invalid (missing or exceeds some limit)" in error, error


def test_a_used_gpu_minute_budget_holds_new_gpu_jobs(clean: Demo) -> None:
    where = ["where", f"name={USER}", f"account={ACCOUNT}"]
    before = on_head("sacctmgr", "-n", "-P", "show", "assoc", *where, "format=grptresmins").stdout.strip()
    try:
        # this month's earlier GPU jobs of alice (other e2e tests) must not count: start from zero usage
        for setting in ("GrpTRESMins=gres/gpu=2", "RawUsage=0"):
            change = on_head("sacctmgr", "-i", "modify", "user", *where, "set", setting)
            assert change.returncode == 0, change.stderr
        job, error = sbatch("--gres=gpu:1", "--time=3")
        assert job is None and "AssocGrpGRESMinutes" in error, error  # alone more than the whole budget
        used, error = sbatch("--gres=gpu:1", "--time=2", seconds=70)
        assert used is not None, error
        deadline = time.monotonic() + 240  # runs 70 s; usage is counted every PriorityCalcPeriod (1 minute)
        while True:
            out = on_head("scontrol", "show", "assoc_mgr", f"users={USER}", f"accounts={ACCOUNT}", "flags=assoc").stdout
            # alice's own record, its GrpTRESMins line (GrpTRES has a gres/gpu=2(...) of its own: running GPUs)
            used_minutes = re.search(rf"UserName={USER}\(.*?\n\s*GrpTRESMins=[^\n]*gres/gpu=2\((\d+)\)", out, re.S)
            if used_minutes and int(used_minutes.group(1)) >= 1:
                break
            assert time.monotonic() < deadline, out
            time.sleep(5)
        held, error = sbatch("--gres=gpu:1", "--time=2")
        assert held is not None, error
        assert wait_reason([held], ("AssocGrpGRESMinutes",))[held] == ("PENDING", "AssocGrpGRESMinutes")
    finally:
        on_head("scancel", "-u", USER)
        on_head("sacctmgr", "-i", "modify", "user", *where, "set", f"GrpTRESMins={before or 'gres/gpu=-1'}")
        on_head("sacctmgr", "-i", "modify", "user", *where, "set", "RawUsage=0")
