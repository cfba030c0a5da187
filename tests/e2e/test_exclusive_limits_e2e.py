# SPDX-License-Identifier: GPL-3.0-or-later
"""Whole-node jobs against GPU limits on the live demo (issue 33): plain ``sbatch --exclusive`` as alice.

The demo's nodes have 2 CPUs and 2 GPUs each; alice may hold 2 GPUs at once (QOS ``normal`` and her association),
1 in QOS ``interactive`` (inventories/demo/group_vars/all/slurm.yml). The slurm role's job_submit.lua counts an
exclusive job as every GPU of its nodes at submit (roles/slurm/README.md "Limits"), so:

* ``sbatch -n4 --exclusive`` (2 whole nodes, 4 GPUs; what Slurm's own test suite found pending forever as
  ``QOSMaxGRESPerUser``) is refused at submit, naming the limit and saying that the job holds all 4 GPUs;
* ``sbatch --qos=interactive --exclusive`` (one node, 2 GPUs, over the session QOS's 1) is refused the same way;
* ``sbatch --exclusive`` (one node, 2 GPUs, within her limits) runs and holds both GPUs of its node.

alice's jobs are cancelled at the end (``sbatch`` and the ``clean`` fixture of test_promises_limits_e2e.py). Uses
the ``demo`` fixture (tests/fixtures/demo.py): skips without a demo unless ``CARME_E2E_REQUIRED=1``.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.test_promises_limits_e2e import REFUSED
from tests.e2e.test_promises_limits_e2e import clean  # noqa: F401 (a fixture, used by name)
from tests.e2e.test_promises_limits_e2e import sbatch
from tests.fixtures.demo import on_head

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("clean")]

LIMITS = ("QOSMaxGRESPerUser", "AssocGrpGRES")


def job_fields(job: int) -> dict[str, str]:
    out = on_head("scontrol", "show", "job", "-o", str(job)).stdout
    return dict(token.split("=", 1) for token in out.split() if "=" in token)


@pytest.mark.parametrize(
    ("args", "holds"),
    [(("-n4",), "all 4 GPUs of its 2 node(s)"), (("--qos=interactive",), "all 2 GPUs of its 1 node(s)")],
    ids=["two-nodes", "session-qos"],
)
def test_exclusive_over_the_gpu_limit_is_refused_at_submit(args: tuple[str, ...], holds: str) -> None:
    job, error = sbatch("--exclusive", *args, "--time=5")
    assert job is None, f"sbatch --exclusive {' '.join(args)} was accepted: {job_fields(job)}"
    assert REFUSED in error and any(limit in error for limit in LIMITS) and holds in error, error


def test_exclusive_within_the_limits_runs_with_both_gpus_of_its_node() -> None:
    job, messages = sbatch("--exclusive", "--time=5")
    assert job is not None, messages
    deadline = time.monotonic() + 90
    fields = job_fields(job)
    while fields.get("JobState") != "RUNNING" and time.monotonic() < deadline:
        time.sleep(1)
        fields = job_fields(job)
    assert fields.get("JobState") == "RUNNING", fields
    # scontrol's TRES= of 22.05 is AllocTRES= on 24.11
    assert "gres/gpu=2" in fields.get("AllocTRES", fields.get("TRES", "")), fields
