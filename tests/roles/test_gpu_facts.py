# SPDX-License-Identifier: GPL-3.0-or-later
"""The Slurm role's GPU fact module (nvidia-smi -> facts) and gres.conf rendered from those facts.

nvidia-smi is not obtainable here: tests/fixtures/bin/nvidia-smi is a named stand-in that prints the exact CSV
the real tool prints for that query. The module runs through real Ansible.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.roles.harness import REPO_ROOT
from tests.roles.harness import render
from tests.roles.harness import run_module

FAKE_SMI = REPO_ROOT / "tests" / "fixtures" / "bin" / "nvidia-smi"


def gpu_facts(nvidia_smi: Path) -> dict[str, Any]:
    return run_module("slurm", "slurm_gpu_facts", {"nvidia_smi": str(nvidia_smi)}).result


def test_module_reads_nvidia_smi() -> None:
    res = gpu_facts(FAKE_SMI)
    facts = res["ansible_facts"]["slurm_gpus"]
    assert facts["available"] is True
    assert facts["count"] == 2
    assert [g["file"] for g in facts["gpus"]] == ["/dev/nvidia0", "/dev/nvidia1"]
    assert {g["type"] for g in facts["gpus"]} == {"a100-sxm4-80gb"}


def test_module_without_nvidia_smi_reports_none() -> None:
    res = gpu_facts(Path("/nonexistent/nvidia-smi"))
    assert res["ansible_facts"]["slurm_gpus"] == {
        "available": False,
        "count": 0,
        "gpus": [],
        "gres_conf": [],
        "node_gres": "",
    }


def test_gres_conf_from_facts(tmp_path: Path) -> None:
    gpus = [{"index": i, "file": f"/dev/nvidia{i}", "type": "a100-sxm4-80gb"} for i in range(2)]
    result = render(
        REPO_ROOT / "inventories" / "demo" / "hosts.yml",
        tmp_path,
        {
            "slurm_gpu_facts": True,
            "slurm_gpus": {"available": True, "count": 2, "gpus": gpus},
            # no gpu_files: the device files come from each node's facts
            "slurm_node_groups": [
                {
                    "name": "gpu",
                    "hosts": ["node1", "node2"],
                    "cpus": 2,
                    "real_memory": 2000,
                    "gpus": 2,
                    "gpu_type": "fake",
                }
            ],
        },
    )
    assert result.returncode == 0, result.output[-3000:]
    lines = [line for line in result.text("gres.conf").splitlines() if line.startswith("NodeName")]
    assert lines == [
        "NodeName=node1 Name=gpu Type=fake File=/dev/nvidia0",
        "NodeName=node1 Name=gpu Type=fake File=/dev/nvidia1",
        "NodeName=node2 Name=gpu Type=fake File=/dev/nvidia0",
        "NodeName=node2 Name=gpu Type=fake File=/dev/nvidia1",
    ]
