# SPDX-License-Identifier: GPL-3.0-or-later
"""The Zabbix agent's GPU check (roles/zabbix_agent/files/carme-zabbix-gpu): one nvidia-smi call, JSON for all GPUs.

nvidia-smi is not obtainable here: tests/fixtures/bin/nvidia-smi is a named stand-in that prints the CSV a driver
prints for this exact query. Real GPUs are checked only on real sites (README, "Verified where").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "roles" / "zabbix_agent" / "files" / "carme-zabbix-gpu"
STAND_IN_SMI = REPO_ROOT / "tests" / "fixtures" / "bin" / "nvidia-smi"


def run(smi: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(smi)], capture_output=True, text=True, check=False)


def test_every_gpu_in_one_json_list() -> None:
    res = run(STAND_IN_SMI)
    assert res.returncode == 0, res.stderr
    gpus = json.loads(res.stdout)
    assert [g["index"] for g in gpus] == ["0", "1"]
    assert gpus[0] == {
        "index": "0",
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": "GPU-5f1d2c3e-8a7b-4c6d-9e0f-112233445566",
        "utilization": 87.0,
        "memory_used": 40960 * 1024 * 1024,
        "memory_total": 81920 * 1024 * 1024,
        "temperature": 64.0,
    }
    assert gpus[1]["utilization"] is None  # "[N/A]": that value is missing, the GPU is still listed


def test_no_nvidia_smi_means_no_gpus_not_an_error() -> None:
    res = run(Path("/nonexistent/nvidia-smi"))
    assert (res.returncode, res.stdout.strip()) == (0, "[]")


def test_a_failing_nvidia_smi_makes_the_item_unsupported(tmp_path: Path) -> None:
    broken = tmp_path / "nvidia-smi"
    message = "NVIDIA-SMI has failed because it could not communicate with the driver"
    broken.write_text(f"#!/bin/sh\necho '{message}'\nexit 9\n")
    broken.chmod(0o755)
    res = run(broken)
    assert res.returncode == 1
    assert "could not communicate with the driver" in res.stderr
    assert res.stdout == ""
