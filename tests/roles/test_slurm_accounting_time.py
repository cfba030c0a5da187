# SPDX-License-Identifier: GPL-3.0-or-later
"""Walltime values in the ``slurm_accounting`` module compare as Slurm stores them (minutes, seconds rounded up)."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.roles.harness import load_file


def _module() -> ModuleType:
    return load_file("roles/slurm/library/slurm_accounting.py", "slurm_accounting_under_test")


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("480", "480"),
        ("30:00", "30"),  # minutes:seconds
        ("08:00:00", "480"),
        ("8:00:00", "480"),
        ("1-00:00:00", "1440"),
        ("2-12", "3600"),  # days-hours
        ("2-12:30", "3630"),  # days-hours:minutes
        ("2-12:30:00", "3630"),
        ("00:00:30", "1"),  # Slurm rounds seconds up to the next minute ...
        ("1:30", "2"),
        ("08:00:01", "481"),
        ("1-00:00:59", "1441"),
        ("", ""),  # ... and these mean no limit
        ("-1", ""),
        ("UNLIMITED", ""),
        ("INFINITE", ""),
    ],
)
def test_walltime_minutes_as_slurm_stores_them(text: str, minutes: str) -> None:
    mod = _module()
    assert mod.norm_time(text) == minutes
    assert mod.norm("MaxWall", text) == minutes


def test_a_seconds_limit_equals_what_sacctmgr_prints_back() -> None:
    mod = _module()
    # MaxWall=00:00:30 is stored as one minute; sacctmgr shows 00:01:00: no change on the next run
    assert mod.norm("MaxWall", "00:01:00") == mod.norm("MaxWall", "00:00:30")
