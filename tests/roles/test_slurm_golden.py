# SPDX-License-Identifier: GPL-3.0-or-later
"""Golden-file tests: the slurm role's rendered configuration for the demo and example inventories.

The files are rendered through real ansible (tests/roles/render.yml, fixed test secrets) and compared byte for
byte with tests/roles/golden/<inventory>/. After an intended template change, regenerate them with
``CARME_UPDATE_GOLDEN=1 pytest tests/roles/test_slurm_golden.py`` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.golden import assert_golden
from tests.roles.harness import CONFIG_FILES
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import RenderResult
from tests.roles.harness import render

GOLDEN_DIR = Path(__file__).parent / "golden"
INVENTORIES = ("demo", "example")


@pytest.fixture(scope="module", params=INVENTORIES)
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, RenderResult]:
    name: str = request.param
    out = tmp_path_factory.mktemp(f"render-{name}")
    return name, render(REPO_ROOT / "inventories" / name, out).check()


@pytest.mark.parametrize("filename", CONFIG_FILES)
def test_rendered_file_matches_golden(rendered: tuple[str, RenderResult], filename: str) -> None:
    inventory, result = rendered
    assert_golden(result.text(filename), GOLDEN_DIR / inventory / filename, f"{inventory}/{filename}")


def test_rendered_files_have_no_timestamp_or_real_secret(rendered: tuple[str, RenderResult]) -> None:
    _, result = rendered
    for filename in CONFIG_FILES:
        text = result.text(filename)
        assert text.startswith("#\n# Ansible managed\n#\n"), filename
        assert "vault_" not in text and "CHANGE-ME" not in text


@pytest.mark.parametrize("rendered", ["example"], indirect=True)
def test_example_node_lines_are_one_per_group(rendered: tuple[str, RenderResult]) -> None:
    _, result = rendered
    node_lines = [line for line in result.text("slurm.conf").splitlines() if line.startswith("NodeName=")]
    assert [line.split()[0] for line in node_lines] == [
        "NodeName=gpu-a100-[01-16]",
        "NodeName=gpu-h100-[01-08]",
        "NodeName=gpu-t4-[01-32]",
    ]
    assert "Gres=gpu:a100:8" in node_lines[0] and "Gres=gpu:t4:4" in node_lines[2]
    assert "PartitionName=interactive Nodes=gpu_t4 Default=YES" in result.text("slurm.conf")
    assert "QOS=interactive" in result.text("slurm.conf")


@pytest.mark.parametrize(
    ("value", "line"),
    [([], None), (["batch_sched_delay=2", "bf_interval=10"], "SchedulerParameters=batch_sched_delay=2,bf_interval=10")],
)
def test_scheduler_parameters_are_the_sites_to_change(tmp_path: Path, value: list[str], line: str | None) -> None:
    """``slurm_scheduler_parameters: []`` gives Slurm's own defaults back (no key at all); a list is joined."""
    result = render(REPO_ROOT / "inventories" / "demo", tmp_path, {"slurm_scheduler_parameters": value}).check()
    found = [x for x in result.text("slurm.conf").splitlines() if x.startswith("SchedulerParameters=")]
    assert found == ([line] if line else []), found
