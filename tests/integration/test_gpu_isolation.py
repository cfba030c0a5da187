# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU isolation and accounting on a real Slurm started from the role's own templates (``host_slurm``).

The node has 4 fake GPUs (/dev/nvidia0-3, major 195, no driver). Inside a job, the device cgroup decides what an
open() gives: an allowed device has no driver behind it (ENXIO), a denied one is refused by the cgroup (EPERM).
"""

from __future__ import annotations

import json

import pytest

from tests.fixtures.hostslurm import HostSlurm

pytestmark = [pytest.mark.host, pytest.mark.slow]

PROBE = """\
python3 - <<'PY'
import errno, json, os
result = {}
for i in range(4):
    path = f"/dev/nvidia{i}"
    try:
        os.close(os.open(path, os.O_RDWR))
        result[path] = "OK"
    except OSError as exc:
        result[path] = errno.errorcode.get(exc.errno, str(exc.errno))
print("PROBE " + json.dumps({
    "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "job_gpus": os.environ.get("SLURM_JOB_GPUS"),
    "user": os.environ.get("USER") or os.environ.get("SLURM_JOB_USER"),
    "open": result,
}))
PY
"""


def _probe(cluster: HostSlurm, user: str, *sbatch_args: str) -> dict[str, object]:
    job = cluster.sbatch(user, PROBE, "--mem=100", "--time=2", *sbatch_args)
    state = cluster.wait_job(job)
    output = cluster.job_output(user, job)
    assert state == "COMPLETED", f"job {job}: {state}\n{output}\n{cluster.log_tail('slurmd')}"
    lines = [line for line in output.splitlines() if line.startswith("PROBE ")]
    assert len(lines) == 1, output
    return dict(json.loads(lines[0].removeprefix("PROBE ")))


def test_one_gpu_job_sees_only_its_device(host_slurm: HostSlurm) -> None:
    probe = _probe(host_slurm, "alice", "--gres=gpu:1")
    cvd = str(probe["cvd"] or "")
    assert len(cvd.split(",")) == 1 and cvd != "", probe
    allocated = f"/dev/nvidia{int(str(probe['job_gpus']))}"
    opens = probe["open"]
    assert isinstance(opens, dict)
    assert opens[allocated] == "ENXIO", probe
    others = {path: err for path, err in opens.items() if path != allocated}
    assert len(others) == host_slurm.gpus - 1
    assert set(others.values()) == {"EPERM"}, probe


def test_job_without_gres_gets_no_gpu(host_slurm: HostSlurm) -> None:
    probe = _probe(host_slurm, "bob")
    assert not probe["cvd"], probe
    opens = probe["open"]
    assert isinstance(opens, dict) and set(opens.values()) == {"EPERM"}, probe


def test_batch_job_is_accounted_with_its_gpu(host_slurm: HostSlurm) -> None:
    job = host_slurm.sbatch("alice", "hostname\n", "--gres=gpu:1", "--mem=100", "--time=2")
    assert host_slurm.wait_job(job) == "COMPLETED"
    assert host_slurm.job_output("alice", job).strip() == host_slurm.node
    rows = host_slurm.sacct(job, fields=("JobID", "User", "Account", "State", "AllocTRES"))
    allocation = next(row for row in rows if row["JobID"] == str(job))
    assert allocation["State"] == "COMPLETED", rows
    assert allocation["User"] == "alice" and allocation["Account"] == host_slurm.account, rows
    assert "gres/gpu=1" in allocation["AllocTRES"].split(","), rows


def test_slurmrestd_answers_with_a_jwt(host_slurm: HostSlurm) -> None:
    ping = host_slurm.rest_get("/slurm/v0.0.38/ping", user="alice")
    assert ping["errors"] == []
    assert [p["ping"] for p in ping["pings"]] == ["UP"]
    assert host_slurm.restd_url.startswith("http://127.0.0.1:")
    assert host_slurm.jwt_key.stat().st_size == 32
