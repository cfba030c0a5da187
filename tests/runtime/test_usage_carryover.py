# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU-minutes carried over an upgrade (carme_runtime/usage_carryover.py): the record read from slurmctld, the
lowered budgets the slurm role applies in the record's month only, the portal's carried usage and declared budget,
and the same code reached by the roles' filters through their module_utils links.

Against a real slurmctld and slurmdbd 22.05: tests/integration/test_usage_carryover.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from carme_runtime import usage_carryover as uc
from tests.roles.harness import load_file

# scontrol show assoc_mgr flags=assoc of Slurm 22.05.8, cut to the lines read (bob: 2 GPU-minutes of a budget of 3)
ASSOC_MGR = """Current Association Manager state

Association Records

ClusterName=hosttest Account=root UserName= Partition= Priority=0 ID=1
    UsageRaw/Norm/Efctv=130.00/1.00/1.00
    GrpTRESMins=cpu=N(2),mem=N(6),energy=N(0),node=N(2),billing=N(2),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(2)
ClusterName=hosttest Account=research UserName= Partition= Priority=0 ID=3
    GrpTRESMins=cpu=N(2),mem=N(6),energy=N(0),node=N(2),billing=N(2),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=600(2)
    GrpTRESRunMins=cpu=N(0),mem=N(0),energy=N(0),node=N(0),billing=N(0),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(9)
ClusterName=hosttest Account=research UserName=alice(1000) Partition= Priority=0 ID=4
    GrpTRESMins=cpu=N(0),mem=N(0),energy=N(0),node=N(0),billing=N(0),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=60(0)
ClusterName=hosttest Account=research UserName=bob(1001) Partition= Priority=0 ID=5
    GrpTRESMins=cpu=N(2),mem=N(6),energy=N(0),node=N(2),billing=N(2),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=3(2)
"""

RECORD = uc.record({"research": 400, "bob@research": 50, "vision": 10}, "2026-11", "2026-11-27T15:00:00Z")
ACCOUNTS: list[dict[str, Any]] = [
    {"name": "research", "GrpTRESMins": "gres/gpu=6000"},
    {"name": "vision", "GrpTRESMins": "cpu=5,gres/gpu=6"},
    {"name": "other", "GrpTRESMins": "gres/gpu=100"},
    {"name": "nobudget"},
]
USERS: list[dict[str, Any]] = [{"name": "bob", "account": "research", "GrpTRESMins": "gres/gpu=60", "MaxJobs": 2},
         {"name": "bob", "account": "vision", "GrpTRESMins": "gres/gpu=60"},
         {"name": "alice", "account": "research", "GrpTRESMins": "gres/gpu=-1"}]  # fmt: skip


def test_the_record_holds_the_minutes_slurmctld_counts_against_grptresmins() -> None:
    # the N of gres/gpu=LIMIT(N) on the GrpTRESMins line only (not GrpTRESRunMins), with or without a limit; 0 left out
    assert uc.parse_assoc_mgr(ASSOC_MGR) == {"root": 2, "research": 2, "bob@research": 2}
    backup = load_file("roles/carme_backup/filter_plugins/carme_backup_usage.py", "carme_backup_usage_under_test")
    rec = backup.carme_backup_usage_record(ASSOC_MGR, "2026-11", "2026-11-27T15:00:00Z", "22.05.8")
    assert rec == {"format": 1, "tres": "gres/gpu", "month": "2026-11", "taken": "2026-11-27T15:00:00Z",
                   "cluster": "hosttest", "slurm_version": "22.05.8",
                   "minutes": {"bob@research": 2, "research": 2, "root": 2}}  # fmt: skip
    assert uc.record_problems(rec) == [] and uc.record_problems({}) == []


@pytest.mark.parametrize(
    ("rec", "problem"),
    [
        ({**RECORD, "month": "2026-13"}, "not YYYY-MM"),
        ({**RECORD, "format": 2}, "format 2"),
        ({**RECORD, "minutes": {"bob@research": -1}}, "whole minutes"),
        ({**RECORD, "minutes": {"bob@research": "5"}}, "whole minutes"),
        ([1], "not a mapping"),
    ],
)
def test_a_record_that_is_none_is_named(rec: Any, problem: str) -> None:
    assert any(problem in p for p in uc.record_problems(rec)), uc.record_problems(rec)
    with pytest.raises(ValueError, match="YYYY-MM"):
        uc.record({}, "November", "")


def test_in_the_records_month_each_declared_budget_is_lowered_by_its_carried_minutes_never_below_zero() -> None:
    assert uc.apply_carryover(ACCOUNTS, RECORD, "2026-11", "accounts") == [
        {"name": "research", "GrpTRESMins": "gres/gpu=5600"},
        {"name": "vision", "GrpTRESMins": "cpu=5,gres/gpu=0"},  # 6 - 10: 0, the other TRES kept
        {"name": "other", "GrpTRESMins": "gres/gpu=100"},  # nothing carried
        {"name": "nobudget"},  # no budget: nothing to lower
    ]
    assert uc.apply_carryover(USERS, RECORD, "2026-11", "users") == [
        {"name": "bob", "account": "research", "GrpTRESMins": "gres/gpu=10", "MaxJobs": 2},
        {"name": "bob", "account": "vision", "GrpTRESMins": "gres/gpu=60"},  # bob carried nothing in vision
        {"name": "alice", "account": "research", "GrpTRESMins": "gres/gpu=-1"},  # no limit stays none
    ]


@pytest.mark.parametrize("month", ["2026-12", "2026-10", "2027-11"])
def test_in_any_other_month_the_declared_budgets_come_back(month: str) -> None:
    assert uc.apply_carryover(ACCOUNTS, RECORD, month, "accounts") == ACCOUNTS
    assert uc.apply_carryover(USERS, RECORD, month, "users") == USERS
    assert uc.applied(ACCOUNTS, USERS, RECORD, month) == {}
    assert uc.apply_carryover(USERS, {}, "2026-11", "users") == USERS  # no record: nothing changes


def test_what_was_applied_tells_the_portal_the_declared_budget_and_the_carried_usage() -> None:
    done = uc.applied(ACCOUNTS, USERS, RECORD, "2026-11")
    assert done == {"format": 1, "tres": "gres/gpu", "month": "2026-11", "associations": {
        "research": {"declared": 6000, "carried": 400, "limit": 5600},
        "vision": {"declared": 6, "carried": 10, "limit": 0},
        "bob@research": {"declared": 60, "carried": 50, "limit": 10}}}  # fmt: skip
    assert uc.carried_minutes(done, ["bob@research", "bob@vision"], "2026-11") == 50
    assert uc.carried_minutes(done, ["bob@research"], "2026-12") == 0  # the month is over: Slurm's own usage only
    assert uc.carried_minutes(None, ["bob@research"], "2026-11") == 0
    # the budget shown is the declared one while Slurm holds the lowered limit (0 too), else Slurm's own
    assert uc.declared_minutes(done, "bob@research", "2026-11", 10) == 60
    assert uc.declared_minutes(done, "vision", "2026-11", 0) == 6
    assert uc.declared_minutes(done, "bob@research", "2026-11", 120) == 120  # changed since: Slurm's figure
    assert uc.declared_minutes(done, "bob@research", "2026-12", 10) == 10
    assert uc.declared_minutes(done, "alice@research", "2026-11", None) is None


def test_the_slurm_roles_filters_are_this_code() -> None:
    module = load_file("roles/slurm/filter_plugins/slurm_filters.py", "slurm_filters_carryover")
    filters = module.FilterModule().filters()
    assert filters["slurm_usage_carryover"](USERS, RECORD, "2026-11", "users")[0]["GrpTRESMins"] == "gres/gpu=10"
    assert filters["slurm_usage_carryover_applied"](ACCOUNTS, USERS, RECORD, "2026-11") == uc.applied(
        ACCOUNTS, USERS, RECORD, "2026-11"
    )
    assert filters["slurm_usage_carryover_problems"]({"month": "x"})
