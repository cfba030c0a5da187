# SPDX-License-Identifier: GPL-3.0-or-later
"""The preemption policy of the slurm role: the checks on ``slurm_qos`` (``filter_plugins/slurm_filters.py``) and
how the ``slurm_accounting`` module compares the QOS preemption fields with what sacctmgr prints back.

Against a real slurmctld and slurmdbd: tests/integration/test_preemption.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.roles.harness import load_file

FILTERS = load_file("roles/slurm/filter_plugins/slurm_filters.py", "slurm_filters_preemption")
ACCOUNTING = load_file("roles/slurm/library/slurm_accounting.py", "slurm_accounting_preemption")

DEMO = [
    {"name": "normal", "Flags": "DenyOnLimit", "PreemptMode": "requeue", "GraceTime": 30},
    {"name": "interactive", "Flags": "DenyOnLimit", "Preempt": ["normal"]},
]


def errors(qos: list[dict[str, Any]], preempt_type: str = "preempt/qos", mode: str = "REQUEUE") -> list[str]:
    result: list[str] = FILTERS.slurm_preemption_errors(qos, preempt_type, mode)
    return result


def test_the_demo_policy_passes() -> None:
    assert errors(DEMO) == []
    assert errors([{"name": "normal"}], "preempt/none", "OFF") == []  # no preemption at all


@pytest.mark.parametrize(
    ("qos", "preempt_type", "mode", "expected"),
    [
        # an interactive QOS listing itself: one user's session could end another's
        ([{"name": "interactive", "Preempt": ["normal", "interactive"]}, {"name": "normal"}], "preempt/qos", "REQUEUE",
         "slurm_qos[0] (interactive).Preempt names the QOS itself"),
        ([{"name": "interactive", "Preempt": "normal"}, {"name": "normal"}], "preempt/none", "OFF",
         "slurm_qos[0] (interactive).Preempt needs slurm_preempt_type: preempt/qos"),
        ([{"name": "interactive", "Preempt": ["batch"]}], "preempt/qos", "REQUEUE",
         "slurm_qos[0] (interactive).Preempt: 'batch' is not a QOS in slurm_qos"),
        ([{"name": "a", "Preempt": ["b"]}, {"name": "b", "Preempt": "a"}], "preempt/qos", "REQUEUE",
         "slurm_qos: 'a' and 'b' preempt each other"),
        (DEMO, "preempt/qos", "OFF", "slurm_preempt_mode must not be OFF"),
    ],
)  # fmt: skip
def test_a_broken_policy_names_the_variable(
    qos: list[dict[str, Any]], preempt_type: str, mode: str, expected: str
) -> None:
    found = errors(qos, preempt_type, mode)
    assert any(expected in e for e in found), found


@pytest.mark.parametrize(
    ("key", "wanted", "printed"),
    [
        ("Preempt", ["normal", "scavenger"], "scavenger,normal"),  # any order
        ("Preempt", "normal", "normal"),
        ("Preempt", [], ""),
        ("PreemptMode", "REQUEUE", "requeue"),
        ("PreemptMode", None, "cluster"),  # no mode of its own: sacctmgr prints "cluster"
        ("GraceTime", 30, "00:00:30"),  # seconds, as sacctmgr takes them
        ("GraceTime", "120", "00:02:00"),
        ("GraceTime", "1-00:00:00", "1-00:00:00"),
        ("GraceTime", 0, "00:00:00"),
    ],
)
def test_qos_preemption_fields_compare_equal_to_what_sacctmgr_prints(key: str, wanted: Any, printed: str) -> None:
    assert ACCOUNTING.norm(key, wanted) == ACCOUNTING.norm(key, printed)


@pytest.mark.parametrize(
    ("key", "wanted", "printed"),
    [("Preempt", ["normal"], ""), ("PreemptMode", "requeue", "cluster"), ("GraceTime", 30, "00:00:00"),
     ("GraceTime", 30, "00:30:00")],
)  # fmt: skip
def test_a_changed_preemption_field_is_a_change(key: str, wanted: Any, printed: str) -> None:
    assert ACCOUNTING.norm(key, wanted) != ACCOUNTING.norm(key, printed)
