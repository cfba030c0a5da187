# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU-hour report of carme_runtime on a real Slurm with slurmdbd (``host_slurm``).

``carme-quota report --json`` gives dave exactly the GPU-hours that ``sacct`` gives for his two finished jobs with
2 and 1 GPUs. dave's usage sums are his alone. (Limits are the slurm role's ``slurm_accounting`` module's: see
test_limits.py.)
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from carme_runtime import gpu_hours
from carme_runtime.slurm_formats import ENDED_STATES
from carme_runtime.slurm_formats import gpu_count_from_tres
from carme_runtime.slurm_formats import parse_tres
from tests.fixtures.hostslurm import HostSlurm
from tests.fixtures.hostslurm import HostSlurmError

pytestmark = [pytest.mark.host, pytest.mark.slow]

GROUP = "carmetest"
QOS = f"carme-{GROUP}"
HELD_USER = "carol"
REPORT_USER = "dave"
CARME_QUOTA = str(Path(sys.executable).parent / "carme-quota")


def carme_quota(cluster: HostSlurm, *args: str) -> str:
    return cluster.run([CARME_QUOTA, *args], timeout=120).stdout


def user_rows_once_recorded(cluster: HostSlurm, jobs: list[int], start: str, timeout: float = 60) -> list[list[str]]:
    """dave's allocations this month (``sacct -X -u``), polled until every one of ``jobs`` is there, finished.

    slurmctld hands job records to slurmdbd asynchronously (the start and the end are separate messages, queued
    while the connection is busy), so on a loaded machine a query by user can come before the last record lands,
    even after ``sacct -j`` showed one job finished. Raises with slurmdbd's log when ``timeout`` passes.
    """
    argv = ["sacct", "-X", "-n", "-P", "-u", REPORT_USER, "-S", start, "-o", "JobID,AllocTRES,ElapsedRaw,State"]
    deadline = time.monotonic() + timeout
    while True:
        rows = [line.split("|") for line in cluster.run(argv).stdout.splitlines() if line]
        finished = {int(r[0]) for r in rows if r[3].split(" ")[0] in ENDED_STATES}
        if finished >= set(jobs):
            return rows
        if time.monotonic() >= deadline:
            raise HostSlurmError(f"sacct -u {REPORT_USER} lacks {sorted(set(jobs) - finished)} after {timeout} s: "
                                 f"{rows}\n{cluster.log_tail('slurmdbd')}")
        time.sleep(0.5)


def test_report_equals_sacct_gpu_hours(host_slurm: HostSlurm) -> None:
    jobs = [
        host_slurm.sbatch(REPORT_USER, "sleep 3\n", "--gres=gpu:2", "--mem=100", "--time=2"),
        host_slurm.sbatch(REPORT_USER, "sleep 2\n", "--gres=gpu:1", "--mem=100", "--time=2"),
    ]
    for job in jobs:
        assert host_slurm.wait_job(job) == "COMPLETED"
        host_slurm.sacct(job)  # polls until slurmdbd has the final state (raises after its deadline)
    month = gpu_hours.current_month()
    start = datetime.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%S")
    rows = user_rows_once_recorded(host_slurm, jobs, start)
    assert sorted(int(r[0]) for r in rows) == sorted(jobs), rows
    gpus = {int(r[0]): gpu_count_from_tres(parse_tres(r[1])) for r in rows}
    assert [gpus[j] for j in jobs] == [2, 1], rows
    expected = sum(gpu_count_from_tres(parse_tres(r[1])) * int(r[2]) for r in rows) / 3600
    assert expected > 0

    report = json.loads(carme_quota(host_slurm, "report", "--json", "--month", month))
    assert report["unit"] == "gpu_hours" and report["month"] == month
    assert report["users"][REPORT_USER] == pytest.approx(round(expected, 6), abs=1e-6), (report, rows)
    table = carme_quota(host_slurm, "report", "--month", month)
    assert f"{REPORT_USER} " in table and f"{expected:.2f}" in table, table
