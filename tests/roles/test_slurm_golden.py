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
#: Slurm 24.11 (Debian 13): the same inventories rendered for that series, golden files in
#: golden/<inventory>/slurm-24.11/ (Debian 12's 22.05 keeps golden/<inventory>/, what a render without facts gives)
SERIES_24 = ("demo@24.11", "example@24.11")


def _golden_dir(name: str) -> Path:
    inventory, _, series = name.partition("@")
    return GOLDEN_DIR / inventory / f"slurm-{series}" if series else GOLDEN_DIR / inventory


@pytest.fixture(scope="module", params=INVENTORIES + SERIES_24)
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, RenderResult]:
    name: str = request.param
    inventory, _, series = name.partition("@")
    out = tmp_path_factory.mktemp(f"render-{inventory}")
    extra = {"slurm_series": series} if series else None
    return name, render(REPO_ROOT / "inventories" / inventory, out, extra).check()


@pytest.mark.parametrize("filename", CONFIG_FILES)
def test_rendered_file_matches_golden(rendered: tuple[str, RenderResult], filename: str) -> None:
    name, result = rendered
    assert_golden(result.text(filename), _golden_dir(name) / filename, f"{name}/{filename}")


@pytest.mark.parametrize("rendered", ["example@24.11"], indirect=True)
def test_24_11_differs_from_22_05_only_where_the_series_does(rendered: tuple[str, RenderResult]) -> None:
    """Slurm 24.11 (Debian 13): no CgroupAutomount, the pid files in the daemons' runtime directories; the rest is
    what 22.05 gets."""
    _, result = rendered
    changed = {
        "cgroup.conf": ({"CgroupAutomount=yes"}, set()),
        "slurm.conf": (
            {"SlurmctldPidFile=/run/slurmctld.pid", "SlurmdPidFile=/run/slurmd.pid"},
            {"SlurmctldPidFile=/run/slurmctld/slurmctld.pid", "SlurmdPidFile=/run/slurm/slurmd.pid"},
        ),
        "gres.conf": (set(), set()),
        "slurmdbd.conf": ({"PidFile=/run/slurmdbd.pid"}, {"PidFile=/run/slurmdbd/slurmdbd.pid"}),
    }
    for filename, (only_22, only_24) in changed.items():
        old = (GOLDEN_DIR / "example" / filename).read_text().splitlines()
        new = result.text(filename).splitlines()
        assert (set(old) - set(new), set(new) - set(old)) == (only_22, only_24), filename


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
