# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from carme_runtime import gpu


def test_parse_nvidia_smi(data: Callable[[str], str]) -> None:
    gpus = gpu.parse_nvidia_smi(data("nvidia_smi_a100.csv"))
    assert [g.index for g in gpus] == [0, 1, 2]
    assert gpus[0].uuid == "GPU-5f1d2c3e-8a7b-4c6d-9e0f-112233445566"
    assert gpus[0].memory_mib == 81920
    assert gpus[0].gres_type == "a100-sxm4-80gb"
    assert gpus[2].gres_type == "tesla_v100-sxm2-16gb"
    assert gpu.gres_conf_lines(gpus) == [
        "Name=gpu Type=a100-sxm4-80gb File=/dev/nvidia0",
        "Name=gpu Type=a100-sxm4-80gb File=/dev/nvidia1",
        "Name=gpu Type=tesla_v100-sxm2-16gb File=/dev/nvidia2",
    ]
    facts = gpu.gpu_facts(gpus)
    assert facts["count"] == 3
    assert facts["node_gres"] == "gpu:a100-sxm4-80gb:2,gpu:tesla_v100-sxm2-16gb:1"


@pytest.mark.parametrize(
    "text",
    [
        "0, GPU-1, A100\n",
        "x, GPU-1, A100, 100\n",
        "0, 1234, A100, 100\n",
        "0, GPU-1, A100, lots\n",
        "0, GPU-1, A100, 100\n0, GPU-2, A100, 100\n",
    ],
)
def test_parse_nvidia_smi_rejects_garbage(text: str) -> None:
    with pytest.raises(gpu.GpuFactsError):
        gpu.parse_nvidia_smi(text)


def test_empty_output_and_fake_backend() -> None:
    assert gpu.parse_nvidia_smi("\n") == []
    fake = gpu.fake_gpus(2)
    assert [g.device_file for g in fake] == ["/dev/nvidia0", "/dev/nvidia1"]
    assert gpu.gres_conf_lines(fake, with_type=False) == [
        "Name=gpu File=/dev/nvidia0",
        "Name=gpu File=/dev/nvidia1",
    ]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SLURM_JOB_GPUS": "0,1", "CUDA_VISIBLE_DEVICES": "0,1"}, (0, 1)),
        ({"SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "0"}, (1,)),  # CVD renumbered inside the job
        ({"SLURM_STEP_GPUS": "2,3"}, (2, 3)),
        ({"CUDA_VISIBLE_DEVICES": "3"}, (3,)),
        ({"SLURM_JOB_GPUS": "0-2,5"}, (0, 1, 2, 5)),
        ({}, ()),
        ({"CUDA_VISIBLE_DEVICES": ""}, ()),
        ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, None),
        ({"CUDA_VISIBLE_DEVICES": "GPU-5f1d2c3e"}, None),
    ],
)
def test_allocated_gpus(env: dict[str, str], expected: tuple[int, ...] | None) -> None:
    assert gpu.allocated_gpus(env) == expected


def test_devices_list_exact_match(data: Callable[[str], str]) -> None:
    check = gpu.check_devices_list(data("devices_ok_0_1.list"), (0, 1))
    assert check.verdict == gpu.OK
    assert check.allowed == (0, 1)


def test_devices_list_extra_gpu_is_mismatch(data: Callable[[str], str]) -> None:
    check = gpu.check_devices_list(data("devices_ok_0_1.list"), (1,))
    assert check.verdict == gpu.MISMATCH
    assert "extra [0]" in check.reason


def test_devices_list_missing_gpu_is_mismatch(data: Callable[[str], str]) -> None:
    check = gpu.check_devices_list(data("devices_ok_0_1.list"), (0, 1, 2))
    assert check.verdict == gpu.MISMATCH
    assert "missing [2]" in check.reason


def test_devices_list_all_nvidia_is_mismatch() -> None:
    check = gpu.check_devices_list("c 195:* rwm\nc 1:3 rwm\n", (0,), all_gpus=[0, 1, 2, 3])
    assert check.verdict == gpu.MISMATCH
    assert "[1, 2, 3]" in check.reason


def test_devices_list_job_without_gpus() -> None:
    assert gpu.check_devices_list("c 1:3 rwm\nc 195:255 rw\n", ()).verdict == gpu.OK
    assert gpu.check_devices_list("c 195:0 rw\n", ()).verdict == gpu.MISMATCH


def test_devices_list_allow_all_is_unverifiable(data: Callable[[str], str]) -> None:
    assert gpu.check_devices_list(data("devices_allow_all.list"), (0,)).verdict == gpu.UNVERIFIABLE


def _make_cgroup(root: Path, text: str, slurm_dir: str = "slurm", uid: int = 1001, job: int = 41) -> None:
    d = root / "devices" / slurm_dir / f"uid_{uid}" / f"job_{job}"
    d.mkdir(parents=True)
    (d / "devices.list").write_text(text)


def test_check_job_isolation_reads_cgroup_v1(tmp_path: Path) -> None:
    _make_cgroup(tmp_path, "c 195:1 rw\n", slurm_dir="slurm_n1")
    assert gpu.find_job_devices_list(str(tmp_path), 1001, 41) is not None
    assert gpu.check_job_isolation(str(tmp_path), 1001, 41, (1,)).verdict == gpu.OK
    assert gpu.check_job_isolation(str(tmp_path), 1001, 41, (0,)).verdict == gpu.MISMATCH
    assert gpu.check_job_isolation(str(tmp_path), 1001, 42, (0,)).verdict == gpu.UNVERIFIABLE
    assert gpu.check_job_isolation(str(tmp_path), 1001, 41, None).verdict == gpu.UNVERIFIABLE


def test_cgroup_v2_is_unverifiable_not_failure(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    check = gpu.check_job_isolation(str(tmp_path), 1001, 41, (0,))
    assert check.verdict == gpu.UNVERIFIABLE
    assert "cgroup v2" in check.reason
