# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared fixtures for the runtime unit tests (no root, no daemons, only 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
SECRET = "s3cr3t-" + "x" * 40


class FakeRunner:
    """Records argv lists; answers from a table keyed by argv[0] (or a callable)."""

    def __init__(self, answers: Mapping[str, tuple[int, str, str]] | None = None) -> None:
        self.answers = dict(answers or {})
        self.calls: list[list[str]] = []
        self.inputs: list[str | None] = []
        self.envs: list[Mapping[str, str] | None] = []

    def __call__(
        self, argv: Sequence[str], *, input_text: str | None = None, env: Mapping[str, str] | None = None
    ) -> tuple[int, str, str]:
        assert isinstance(argv, list | tuple), "argv must be a list, never a string"
        assert all(isinstance(a, str) for a in argv)
        self.calls.append(list(argv))
        self.inputs.append(input_text)
        self.envs.append(env)
        return self.answers.get(argv[0], (0, "", ""))


@pytest.fixture
def fake_runner() -> FakeRunner:
    return FakeRunner()


@pytest.fixture
def data() -> Callable[[str], str]:
    def read(name: str) -> str:
        return (DATA / name).read_text(encoding="utf-8")

    return read


@pytest.fixture
def hook_env(tmp_path: Path) -> dict[str, str]:
    """A realistic prolog/epilog environment of a Carme session (as slurmd 22.05 sets it) pointing at temp dirs."""
    return {
        "SLURM_JOB_ID": "41",
        "SLURM_JOB_COMMENT": "carme:v1;app=jupyter;state=submitted",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_UID": "1001",
        "SLURM_JOB_GPUS": "0",
        "CUDA_VISIBLE_DEVICES": "0",
        "SLURMD_NODENAME": "vm",
        "SLURM_JOB_PARTITION": "debug",
        "SLURM_JOB_ACCOUNT": "research",
        "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
        "CARME_CONFIG": str(tmp_path / "no-config.json"),
        "CARME_LOG_DIR": str(tmp_path / "log"),
        "CARME_SCRATCH_ROOT": str(tmp_path / "scratch"),
        "CARME_CGROUP_ROOT": str(tmp_path / "cgroup"),
    }
