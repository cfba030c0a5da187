# SPDX-License-Identifier: GPL-3.0-or-later
"""Whole-node jobs against GPU limits on Slurm 24.11 (Debian 13), with plain ``sbatch --exclusive``.

The same checks as tests/integration/test_exclusive_limits.py (Slurm 22.05 on the host), against a one-node Slurm
24.11 with accounting and 4 fake GPUs in a ``localhost/carme-node:debian13`` container (tests/fixtures/slurm2411.py:
tests/integration/data/slurm2411-setup.sh limits), running the slurm role's job_submit.lua rendered from the role's
template for that node. Opt-in, like the other 24.11 container tests (a container and a Slurm of its own): runs only
with ``CARME_SLURM2411_TESTS=1`` and the image present, otherwise skipped at collection. The container is
``carme-h-limits-<pid>``, removed at the end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.slurm2411 import require_opt_in

require_opt_in()

from tests.fixtures.slurm2411 import NODE  # noqa: E402
from tests.fixtures.slurm2411 import podman  # noqa: E402
from tests.fixtures.slurm2411 import sbatch  # noqa: E402
from tests.fixtures.slurm2411 import scontrol_fields  # noqa: E402
from tests.fixtures.slurm2411 import slurm2411_node  # noqa: E402
from tests.roles.harness import REPO_ROOT  # noqa: E402
from tests.roles.harness import render  # noqa: E402

pytestmark = [pytest.mark.slow]

REFUSED = "Job violates accounting/QOS policy"
HOLDS_ALL = "a whole-node job (--exclusive) holds all 4 GPUs of its 1 node(s)"


def _render_lua(root: Path) -> Path:
    """The role's template for the container's one node group (all its CPUs, 4 GPUs) and one default partition."""
    inventory = root / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(json.dumps({"slurm_dbd": {"hosts": {"localhost": {}}}}))
    group = {"name": "gpu", "hosts": [NODE], "cpus": os.cpu_count() or 1, "gpus": 4}
    slurm = {"slurm_node_groups": [group], "slurm_partitions": [{"name": "debug", "node_groups": ["gpu"],
                                                                  "default": True}]}  # fmt: skip
    (inventory / "group_vars" / "all" / "slurm.yml").write_text(json.dumps(slurm))
    out = root / "lua"
    out.mkdir()
    render(inventory, out, playbook=REPO_ROOT / "tests" / "roles" / "render_job_submit.yml").check()
    return out


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    lua = _render_lua(tmp_path_factory.mktemp("limits"))
    with slurm2411_node("carme-h-limits", "limits", "--cap-add", "MKNOD", "-v", f"{lua}:/lua:ro,Z") as name:
        yield name


def job_fields(node: str, job: int) -> dict[str, str]:
    return scontrol_fields(node, "job", str(job))


CASES = {"plain": (), "tasks": ("-n2",), "gres": ("--gres=gpu:1",), "gpus": ("--gpus=1",)}


@pytest.mark.parametrize("args", list(CASES.values()), ids=list(CASES))
def test_exclusive_over_a_qos_gpu_limit_is_refused_at_submit_on_24_11(node: str, args: tuple[str, ...]) -> None:
    job, error = sbatch(node, "bob", "--exclusive", *args)
    assert job is None, f"sbatch --exclusive {' '.join(args)} was accepted: {job_fields(node, job)}"
    assert "QOSMaxGRESPerUser" in error and REFUSED in error and HOLDS_ALL in error, error


def test_exclusive_within_the_limits_and_shared_jobs_run_on_24_11(node: str) -> None:
    whole, messages = sbatch(node, "bob", "--exclusive", "--qos=exc-wide")
    assert whole is not None and HOLDS_ALL in messages, messages
    fields = job_fields(node, whole)
    assert "gres/gpu=4" in fields.get("TRES", "") or "gres/gpu=4" in fields.get("ReqTRES", ""), fields
    podman("exec", node, "scancel", str(whole))
    shared, messages = sbatch(node, "bob", "--gres=gpu:1")
    assert shared is not None and HOLDS_ALL not in messages, messages
    assert "gres/gpu=1" in job_fields(node, shared).get("ReqTRES", ""), job_fields(node, shared)
    podman("exec", node, "scancel", str(shared))
