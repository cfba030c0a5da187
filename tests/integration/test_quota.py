"""Quota policy and GPU-hour report of carme_runtime on a real Slurm with slurmdbd (``host_slurm``).

* ``carme-quota apply`` turns a policy of 1 concurrent session into a QOS (``MaxJobsPerUser=1``); bound to
  carol's association, it holds her second job PENDING with a QOS reason even when she submits with plain
  ``sbatch`` (no portal, no ``--qos``). Apply is idempotent.
* ``carme-quota report --json`` gives dave exactly the GPU-hours that ``sacct`` gives for his two finished
  jobs with 2 and 1 GPUs.

carol and dave are used by no other test, so the QOS binding and the usage sums are theirs alone; the QOS and
the binding are removed at the end.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from carme_runtime import quota
from carme_runtime.slurm import gpu_count_from_tres
from carme_runtime.slurm import parse_tres
from tests.fixtures.hostslurm import HostSlurm

pytestmark = [pytest.mark.host, pytest.mark.slow]

GROUP = "carmetest"
QOS = f"carme-{GROUP}"
HELD_USER = "carol"
REPORT_USER = "dave"
CARME_QUOTA = str(Path(sys.executable).parent / "carme-quota")


def carme_quota(cluster: HostSlurm, *args: str) -> str:
    return cluster.run([CARME_QUOTA, *args], timeout=120).stdout


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("quota") / "policy.json"
    path.write_text(json.dumps({"groups": {GROUP: {"concurrent_sessions": 1, "gpus_per_job": 2}}}))
    return path


@pytest.fixture(scope="module")
def applied_policy(host_slurm: HostSlurm, policy_file: Path) -> Iterator[str]:
    first = carme_quota(host_slurm, "apply", str(policy_file))
    try:
        assert f"+ qos {QOS}" in first, first
        for argv in quota.association_argv([HELD_USER], QOS):
            host_slurm.run(argv)
        yield first
    finally:
        host_slurm.run(["scancel", "-u", HELD_USER], check=False)
        host_slurm.run(
            ["sacctmgr", "-i", "modify", "user", "where", f"name={HELD_USER}", "set", "QOS=normal", "DefaultQOS=-1"],
            check=False,
        )
        host_slurm.run(["sacctmgr", "-i", "delete", "qos", QOS], check=False)


def test_apply_creates_the_qos_and_is_idempotent(host_slurm: HostSlurm, policy_file: Path, applied_policy: str) -> None:
    shown = host_slurm.run(quota.SHOW_QOS_ARGV).stdout
    current = quota.current_qos(shown)
    assert current[QOS]["MaxJobsPerUser"] == "1", shown
    assert current[QOS]["MaxTRESPerJob"] == "gres/gpu=2", shown
    again = carme_quota(host_slurm, "apply", str(policy_file))
    assert "nothing to do" in again, again
    dry = carme_quota(host_slurm, "apply", "--dry-run", str(policy_file))
    assert "nothing to do" in dry, dry
    assoc = host_slurm.run(["sacctmgr", "-n", "-P", "show", "assoc", f"user={HELD_USER}", "format=user,qos,defaultqos"])
    assert f"{HELD_USER}|" in assoc.stdout and QOS in assoc.stdout, assoc.stdout


def _wait(cluster: HostSlurm, job: int, want: str, timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    fields: dict[str, str] = {}
    while time.monotonic() < deadline:
        out = cluster.run(["squeue", "--noheader", "-j", str(job), "--format=%T|%r|%q"], check=False).stdout.strip()
        state, _, rest = out.partition("|")
        reason, _, qos = rest.partition("|")
        fields = {"state": state, "reason": reason, "qos": qos}
        if want == "RUNNING" and state == "RUNNING":
            return fields
        if want == "HELD" and state == "PENDING" and reason.startswith("QOS"):
            return fields
        time.sleep(0.3)
    return fields


def test_second_plain_sbatch_is_held_by_the_session_limit(host_slurm: HostSlurm, applied_policy: str) -> None:
    first = host_slurm.sbatch(HELD_USER, "sleep 300\n", "--mem=100", "--time=10")
    second = None
    try:
        running = _wait(host_slurm, first, "RUNNING")
        assert running["state"] == "RUNNING" and running["qos"] == QOS, running
        second = host_slurm.sbatch(HELD_USER, "sleep 300\n", "--mem=100", "--time=10")
        held = _wait(host_slurm, second, "HELD")
        assert held == {"state": "PENDING", "reason": "QOSMaxJobsPerUserLimit", "qos": QOS}, held
        # the node has room (4 GPUs, idle cores): only the QOS keeps the job waiting
        assert host_slurm.node_state().startswith("MIXED"), host_slurm.node_state()
    finally:
        host_slurm.run(["scancel", str(first), *([str(second)] if second else [])], check=False)
        host_slurm.wait_job(first)


def test_report_equals_sacct_gpu_hours(host_slurm: HostSlurm) -> None:
    jobs = [
        host_slurm.sbatch(REPORT_USER, "sleep 3\n", "--gres=gpu:2", "--mem=100", "--time=2"),
        host_slurm.sbatch(REPORT_USER, "sleep 2\n", "--gres=gpu:1", "--mem=100", "--time=2"),
    ]
    for job in jobs:
        assert host_slurm.wait_job(job) == "COMPLETED"
        host_slurm.sacct(job)  # waits until slurmdbd has the final state
    month = quota.current_month()
    start = datetime.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%S")
    out = host_slurm.run(
        ["sacct", "-X", "-n", "-P", "-u", REPORT_USER, "-S", start, "-o", "JobID,AllocTRES,ElapsedRaw,State"]
    ).stdout
    rows = [line.split("|") for line in out.splitlines() if line]
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
