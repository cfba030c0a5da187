# SPDX-License-Identifier: GPL-3.0-or-later
"""carme_runtime.hostlist: the one hostlist expander and compressor (runtime, portal and the slurm role's filter)."""

from __future__ import annotations

import pytest

from carme_runtime.hostlist import HostlistError
from carme_runtime.hostlist import compress_hostlist
from carme_runtime.hostlist import expand_hostlist
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import load_file


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("gpu[01-03,07],cpu1", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]),
        ("n[1-2]-ib,x", ["n1-ib", "n2-ib", "x"]),
        ("vm", ["vm"]),
        ("", []),
        (None, []),
        ("(null)", []),
        ("None assigned", []),
    ],
)
def test_expand(expr: str | None, hosts: list[str]) -> None:
    assert expand_hostlist(expr) == hosts


def test_expand_refuses_a_bad_range() -> None:
    with pytest.raises(HostlistError, match="a-b"):
        expand_hostlist("n[a-b]")


@pytest.mark.parametrize(
    "names",
    [
        ["node001", "node002", "node003", "node007"],
        ["gpu1", "gpu2", "cpu10", "login"],
        ["n1-ib", "n2-ib", "n3"],
    ],
)
def test_compress_then_expand_gives_the_names_back(names: list[str]) -> None:
    assert sorted(expand_hostlist(compress_hostlist(names))) == sorted(names)


def test_compress_is_sorted_and_folds_ranges() -> None:
    assert compress_hostlist(["node003", "node001", "node002", "node007", "login"]) == "login,node[001-003,007]"


def test_the_slurm_role_filter_is_this_function() -> None:
    link = REPO_ROOT / "roles" / "slurm" / "module_utils" / "carme_hostlist.py"
    assert link.resolve() == (REPO_ROOT / "carme_runtime" / "hostlist.py").resolve()
    module = load_file("roles/slurm/filter_plugins/slurm_filters.py", "slurm_filters_under_test")
    assert module.FilterModule().filters()["slurm_hostlist"](["vm2", "vm1"]) == "vm[1-2]"
