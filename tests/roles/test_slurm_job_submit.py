# SPDX-License-Identifier: GPL-3.0-or-later
"""The slurm role's job_submit.lua (whole-node jobs against GPU limits, README "Limits"), rendered for the demo and
example inventories through real ansible (tests/roles/render_job_submit.yml) and compared byte for byte with
tests/roles/golden/<inventory>/job_submit.lua (``CARME_UPDATE_GOLDEN=1`` rewrites them after an intended change).
What it does with real jobs is tested against Slurm in tests/integration/test_exclusive_limits.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.golden import assert_golden
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import RenderResult
from tests.roles.harness import render

GOLDEN_DIR = Path(__file__).parent / "golden"
PLAYBOOK = Path(__file__).parent / "render_job_submit.yml"


@pytest.fixture(scope="module", params=["demo", "example"])
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, RenderResult]:
    name: str = request.param
    out = tmp_path_factory.mktemp(f"render-{name}")
    return name, render(REPO_ROOT / "inventories" / name, out, playbook=PLAYBOOK).check()


def test_job_submit_lua_matches_golden(rendered: tuple[str, RenderResult]) -> None:
    inventory, result = rendered
    assert_golden(
        result.text("job_submit.lua"), GOLDEN_DIR / inventory / "job_submit.lua", f"{inventory}/job_submit.lua"
    )


@pytest.mark.parametrize("rendered", ["example"], indirect=True)
def test_each_partition_has_the_fewest_gpus_and_most_cpus_of_its_node_groups(
    rendered: tuple[str, RenderResult],
) -> None:
    """batch spans a100 nodes (8 GPUs, 256 CPUs) and t4 nodes (4 GPUs, 64 CPUs): an exclusive job there holds at
    least 4 GPUs per node, and its tasks need at least one node per 256 CPUs."""
    _, result = rendered
    lua = result.text("job_submit.lua")
    assert '  ["batch"] = {gpus = 4, cpus = 256},\n' in lua
    assert '  ["h100"] = {gpus = 8, cpus = 224},\n' in lua
    assert 'local DEFAULT_PARTITION = "interactive"\n' in lua
