# SPDX-License-Identifier: GPL-3.0-or-later
"""BeeGFS quotas: the getquota command line and its CSV, read through the stand-in tests/fixtures/bin/beegfs-ctl."""

from __future__ import annotations

from pathlib import Path

import pytest

from carme_runtime import storage_quota
from carme_runtime.command_runner import SubprocessRunner

STANDIN = str(Path(__file__).resolve().parents[1] / "fixtures" / "bin" / "beegfs-ctl")


def test_argv() -> None:
    assert storage_quota.getquota_argv("alice") == ["beegfs-ctl", "--getquota", "--uid", "alice", "--csv"]
    assert storage_quota.getquota_argv("bob", ("sudo", "-n", "/usr/bin/beegfs-ctl"))[:4] == [
        "sudo",
        "-n",
        "/usr/bin/beegfs-ctl",
        "--getquota",
    ]


def test_user_with_limits_through_the_stand_in() -> None:
    quota = storage_quota.user_quota("alice", SubprocessRunner(), (STANDIN,))
    assert quota is not None
    assert (quota.uid, quota.size_used, quota.size_limit) == (20001, 1610612736, 10737418240)
    assert (quota.files_used, quota.files_limit, quota.percent) == (1200, 100000, 15)


def test_unlimited_user_has_no_percent() -> None:
    quota = storage_quota.user_quota("bob", SubprocessRunner(), (STANDIN,))
    assert quota is not None and quota.size_limit is None and quota.files_limit is None and quota.percent is None


def test_tool_failure_is_an_error_not_a_zero() -> None:
    with pytest.raises(storage_quota.StorageQuotaError, match="rc=1: Error: unknown user: carol"):
        storage_quota.user_quota("carol", SubprocessRunner(), (STANDIN,))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "quota for alice: 1 GiB\n",
        "name,id,size,hard,files,hard\nalice,20001,12\n",
        "name,id,size,hard,files,hard\nalice,x,1,2,3,4\n",
    ],
)
def test_unexpected_output_is_refused(text: str) -> None:
    with pytest.raises(storage_quota.StorageQuotaError):
        storage_quota.parse_getquota_csv(text)
