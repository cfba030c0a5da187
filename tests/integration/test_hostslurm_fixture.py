# SPDX-License-Identifier: GPL-3.0-or-later
"""The host Slurm fixture's guards, without starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures import hostslurm


def test_skips_with_a_reason_when_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostslurm.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception, match="needs root"):
        hostslurm.ensure_packages()


def test_skips_when_packages_are_missing_and_apt_is_absent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(hostslurm.os, "geteuid", lambda: 0)
    monkeypatch.setattr(hostslurm, "REQUIRED_FILES", (tmp_path / "no-such-slurmctld",))
    monkeypatch.setattr(hostslurm.shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="no apt-get"):
        hostslurm.ensure_packages()
