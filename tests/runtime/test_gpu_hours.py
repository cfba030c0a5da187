# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC
from datetime import datetime
from pathlib import Path

import pytest

from carme_runtime import gpu_hours
from carme_runtime.quota_report import main as quota_main


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_usage_two_jobs_with_two_and_one_gpus() -> None:
    records = [
        gpu_hours.JobRecord("1", "alice", "research", 2, ts("2026-11-03T10:00:00"), ts("2026-11-03T11:30:00")),
        gpu_hours.JobRecord("2", "bob", "research", 1, ts("2026-11-04T09:00:00"), ts("2026-11-04T09:45:00")),
    ]
    usage = gpu_hours.usage_from_sacct(records, "2026-11", tz=UTC)
    assert usage.by_user == {"alice": pytest.approx(3.0), "bob": pytest.approx(0.75)}
    assert usage.by_account == {"research": pytest.approx(3.75)}
    assert usage.jobs == 2


def test_usage_clips_month_boundaries_and_running_jobs() -> None:
    records = [
        gpu_hours.JobRecord("3", "carol", "vision", 1, ts("2026-10-31T23:00:00"), ts("2026-11-01T01:00:00")),
        gpu_hours.JobRecord("4", "carol", "vision", 2, ts("2026-11-30T23:00:00"), ts("2026-12-01T00:30:00")),
        gpu_hours.JobRecord("5", "dave", "vision", 4, ts("2026-11-30T22:00:00"), None),  # still running
        gpu_hours.JobRecord("6", "erin", "vision", 1, None, None),  # never started
        gpu_hours.JobRecord("7", "erin", "vision", 0, ts("2026-11-02T00:00:00"), ts("2026-11-03T00:00:00")),
    ]
    now = ts("2026-11-30T23:30:00")
    usage = gpu_hours.usage_from_sacct(records, "2026-11", tz=UTC, now=now)
    assert usage.by_user["carol"] == pytest.approx(1.0 + 2.0)
    assert usage.by_user["dave"] == pytest.approx(4 * 1.5)
    assert "erin" not in usage.by_user
    october = gpu_hours.usage_from_sacct(records, "2026-10", tz=UTC, now=now)
    assert october.by_user == {"carol": pytest.approx(1.0)}


def test_parse_sacct_parsable_and_report(data: Callable[[str], str]) -> None:
    records = gpu_hours.parse_sacct_parsable(data("sacct_month.txt"), tz=UTC)
    assert [r.gpus for r in records] == [2, 1, 0, 1, 1]
    assert records[4].start is None
    usage = gpu_hours.usage_from_sacct(records, "2026-11", tz=UTC)
    assert usage.by_user == {
        "alice": pytest.approx(3.0),
        "bob": pytest.approx(0.75),
        "carol": pytest.approx(1.0),
    }
    doc = json.loads(gpu_hours.report_json(usage))
    assert doc["users"]["alice"] == 3.0
    assert doc["accounts"] == {"research": 3.75, "vision": 1.0}
    table = gpu_hours.report_table(usage)
    assert "alice" in table and "3.00" in table


def test_parse_sacct_json(data: Callable[[str], str]) -> None:
    records = gpu_hours.parse_sacct_json(data("sacct.json"))
    assert [(r.user, r.gpus) for r in records] == [("alice", 2), ("bob", 1)]
    assert records[0].end is not None and records[0].start is not None
    assert records[0].end - records[0].start == 5400


def test_month_bounds() -> None:
    lo, hi = gpu_hours.month_bounds("2026-12", UTC)
    assert hi - lo == 31 * 86400
    with pytest.raises(ValueError, match="YYYY-MM"):
        gpu_hours.month_bounds("2026-13", UTC)


def test_sacct_argv() -> None:
    argv = gpu_hours.sacct_argv("2026-11", UTC)
    assert argv == [
        "sacct", "-X", "-a", "-P", "-o", gpu_hours.SACCT_FORMAT,
        "-S", "2026-11-01T00:00:00", "-E", "2026-12-01T00:00:00",
    ]  # fmt: skip


def test_cli_report_json(tmp_path: Path, data: Callable[[str], str], fake_runner) -> None:
    fake_runner.answers["sacct"] = (0, data("sacct_month.txt"), "")
    out = io.StringIO()
    assert quota_main(["report", "--json", "--month", "2026-11"], {}, runner=fake_runner, out=out) == 0
    assert fake_runner.calls[0][0] == "sacct"
    doc = json.loads(out.getvalue())
    assert doc["month"] == "2026-11"
    assert set(doc["users"]) == {"alice", "bob", "carol"}
