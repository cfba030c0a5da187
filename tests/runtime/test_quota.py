from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC
from datetime import datetime
from pathlib import Path

import pytest

from carme_runtime import quota
from carme_runtime.quota_cli import main as quota_main

POLICY = {
    "groups": {
        "gpuusers": {
            "gpus_per_job": 2,
            "concurrent_sessions": 1,
            "interactive_walltime_minutes": 480,
            "gpu_hours_per_month": 100,
        },
        "students": {"gpus_per_job": 1, "concurrent_sessions": 2, "interactive_walltime_minutes": 240},
    }
}


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_desired_qos() -> None:
    desired = quota.desired_qos(quota.policy_from_dict(POLICY))
    assert desired["carme-gpuusers"] == {
        "MaxTRESPerJob": "gres/gpu=2",
        "MaxJobsPerUser": "1",
        "MaxSubmitJobsPerUser": "",
        "MaxWall": "480",
        "GrpTRESMins": "gres/gpu=6000",
    }
    assert desired["carme-students"]["GrpTRESMins"] == ""


def test_reject_mode_uses_max_submit() -> None:
    pol = quota.policy_from_dict({"groups": {"g": {"concurrent_sessions": 1, "session_limit": "reject"}}})
    d = quota.desired_qos(pol)["carme-g"]
    assert d["MaxSubmitJobsPerUser"] == "1"
    assert d["MaxJobsPerUser"] == ""


@pytest.mark.parametrize(
    ("groups", "needle"),
    [
        ({"g": {"gpus_per_job": -2}}, "gpus_per_job"),
        ({"g": {"gpus_per_job": "2"}}, "gpus_per_job"),
        ({"g": {"gpus_per_job": True}}, "gpus_per_job"),
        ({"g": {"colour": 1}}, "colour"),
        ({"g": {"qos": "Bad QOS"}}, "qos"),
        ({"g h": {}}, "invalid group"),
        ({"a": {"qos": "x"}, "b": {"qos": "x"}}, "already used"),
        ({"g": {"session_limit": "maybe"}}, "session_limit"),
    ],
)
def test_policy_errors_name_group_and_field(groups: dict[str, object], needle: str) -> None:
    with pytest.raises(quota.PolicyError, match=needle):
        quota.policy_from_dict({"groups": groups})


def test_current_qos_parses_sacctmgr(data: Callable[[str], str]) -> None:
    current = quota.current_qos(data("sacctmgr_qos.txt"))
    assert current["carme-gpuusers"] == {
        "MaxTRESPerJob": "gres/gpu=2",
        "MaxJobsPerUser": "1",
        "MaxSubmitJobsPerUser": "",
        "MaxWall": "480",
        "GrpTRESMins": "gres/gpu=6000",
    }
    assert current["normal"]["MaxWall"] == ""


def test_diff_is_empty_when_in_sync(data: Callable[[str], str]) -> None:
    current = quota.current_qos(data("sacctmgr_qos.txt"))
    desired = quota.desired_qos(
        quota.policy_from_dict({"groups": {"gpuusers": POLICY["groups"]["gpuusers"]}})
    )
    assert quota.diff(current, desired) == []


def test_diff_and_apply_argv(data: Callable[[str], str]) -> None:
    policy = dict(POLICY)
    policy["groups"] = {
        **POLICY["groups"],
        "students": {"gpus_per_job": 1, "concurrent_sessions": 1},
        "new": {"gpus_per_job": 4},
    }
    changes = quota.diff(
        quota.current_qos(data("sacctmgr_qos.txt")), quota.desired_qos(quota.policy_from_dict(policy))
    )
    assert [str(c) for c in changes] == [
        "+ qos carme-new",
        "~ qos carme-new: MaxTRESPerJob (unset) -> gres/gpu=4",
        "~ qos carme-students: MaxJobsPerUser 2 -> 1",
        "~ qos carme-students: MaxWall 240 -> (unset)",
    ]
    assert quota.apply_argv(changes) == [
        ["sacctmgr", "-i", "add", "qos", "carme-new"],
        ["sacctmgr", "-i", "modify", "qos", "where", "name=carme-new", "set", "MaxTRESPerJob=gres/gpu=4"],
        [
            "sacctmgr", "-i", "modify", "qos", "where", "name=carme-students", "set",
            "MaxJobsPerUser=1", "MaxWall=-1",
        ],
    ]  # fmt: skip


def test_association_argv() -> None:
    assert quota.association_argv(["bob", "alice", "bob"], "carme-g") == [
        [
            "sacctmgr",
            "-i",
            "modify",
            "user",
            "where",
            "name=alice",
            "set",
            "QOS+=carme-g",
            "DefaultQOS=carme-g",
        ],
        [
            "sacctmgr",
            "-i",
            "modify",
            "user",
            "where",
            "name=bob",
            "set",
            "QOS+=carme-g",
            "DefaultQOS=carme-g",
        ],
    ]


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("08:00:00", 480), ("1-00:00:00", 1440), ("2-12:30:00", 3630), ("90", 90), ("30:00", 30), ("", None)],
)
def test_wall_to_minutes(text: str, minutes: int | None) -> None:
    assert quota.wall_to_minutes(text) == minutes


def test_usage_two_jobs_with_two_and_one_gpus() -> None:
    records = [
        quota.JobRecord("1", "alice", "research", 2, ts("2026-11-03T10:00:00"), ts("2026-11-03T11:30:00")),
        quota.JobRecord("2", "bob", "research", 1, ts("2026-11-04T09:00:00"), ts("2026-11-04T09:45:00")),
    ]
    usage = quota.usage_from_sacct(records, "2026-11", tz=UTC)
    assert usage.by_user == {"alice": pytest.approx(3.0), "bob": pytest.approx(0.75)}
    assert usage.by_account == {"research": pytest.approx(3.75)}
    assert usage.jobs == 2


def test_usage_clips_month_boundaries_and_running_jobs() -> None:
    records = [
        quota.JobRecord("3", "carol", "vision", 1, ts("2026-10-31T23:00:00"), ts("2026-11-01T01:00:00")),
        quota.JobRecord("4", "carol", "vision", 2, ts("2026-11-30T23:00:00"), ts("2026-12-01T00:30:00")),
        quota.JobRecord("5", "dave", "vision", 4, ts("2026-11-30T22:00:00"), None),  # still running
        quota.JobRecord("6", "erin", "vision", 1, None, None),  # never started
        quota.JobRecord("7", "erin", "vision", 0, ts("2026-11-02T00:00:00"), ts("2026-11-03T00:00:00")),
    ]
    now = ts("2026-11-30T23:30:00")
    usage = quota.usage_from_sacct(records, "2026-11", tz=UTC, now=now)
    assert usage.by_user["carol"] == pytest.approx(1.0 + 2.0)
    assert usage.by_user["dave"] == pytest.approx(4 * 1.5)
    assert "erin" not in usage.by_user
    october = quota.usage_from_sacct(records, "2026-10", tz=UTC, now=now)
    assert october.by_user == {"carol": pytest.approx(1.0)}


def test_parse_sacct_parsable_and_report(data: Callable[[str], str]) -> None:
    records = quota.parse_sacct_parsable(data("sacct_month.txt"), tz=UTC)
    assert [r.gpus for r in records] == [2, 1, 0, 1, 1]
    assert records[4].start is None
    usage = quota.usage_from_sacct(records, "2026-11", tz=UTC)
    assert usage.by_user == {
        "alice": pytest.approx(3.0),
        "bob": pytest.approx(0.75),
        "carol": pytest.approx(1.0),
    }
    doc = json.loads(quota.report_json(usage))
    assert doc["users"]["alice"] == 3.0
    assert doc["accounts"] == {"research": 3.75, "vision": 1.0}
    table = quota.report_table(usage)
    assert "alice" in table and "3.00" in table


def test_parse_sacct_json(data: Callable[[str], str]) -> None:
    records = quota.parse_sacct_json(data("sacct.json"))
    assert [(r.user, r.gpus) for r in records] == [("alice", 2), ("bob", 1)]
    assert records[0].end is not None and records[0].start is not None
    assert records[0].end - records[0].start == 5400


def test_month_bounds() -> None:
    lo, hi = quota.month_bounds("2026-12", UTC)
    assert hi - lo == 31 * 86400
    with pytest.raises(ValueError, match="YYYY-MM"):
        quota.month_bounds("2026-13", UTC)


def test_sacct_argv() -> None:
    argv = quota.sacct_argv("2026-11", UTC)
    assert argv == [
        "sacct", "-X", "-a", "-P", "-o", quota.SACCT_FORMAT,
        "-S", "2026-11-01T00:00:00", "-E", "2026-12-01T00:00:00",
    ]  # fmt: skip


def test_cli_apply_dry_run_and_real(tmp_path: Path, data: Callable[[str], str], fake_runner) -> None:
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps({"groups": {"vision": {"gpus_per_job": 1}}}))
    fake_runner.answers["sacctmgr"] = (0, data("sacctmgr_qos.txt"), "")
    out = io.StringIO()
    assert quota_main(["apply", "--dry-run", str(policy_file)], {}, runner=fake_runner, out=out) == 0
    assert fake_runner.calls == [quota.SHOW_QOS_ARGV]
    assert "would run: sacctmgr -i add qos carme-vision" in out.getvalue()
    out = io.StringIO()
    assert quota_main(["apply", str(policy_file)], {}, runner=fake_runner, out=out) == 0
    assert fake_runner.calls[-2:] == [
        ["sacctmgr", "-i", "add", "qos", "carme-vision"],
        ["sacctmgr", "-i", "modify", "qos", "where", "name=carme-vision", "set", "MaxTRESPerJob=gres/gpu=1"],
    ]


def test_cli_apply_is_idempotent(tmp_path: Path, data: Callable[[str], str], fake_runner) -> None:
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(
        "[groups.gpuusers]\ngpus_per_job = 2\nconcurrent_sessions = 1\n"
        "interactive_walltime_minutes = 480\ngpu_hours_per_month = 100\n"
    )
    fake_runner.answers["sacctmgr"] = (0, data("sacctmgr_qos.txt"), "")
    out = io.StringIO()
    assert quota_main(["apply", str(policy_file)], {}, runner=fake_runner, out=out) == 0
    assert len(fake_runner.calls) == 1
    assert "nothing to do" in out.getvalue()


def test_cli_report_json(tmp_path: Path, data: Callable[[str], str], fake_runner) -> None:
    fake_runner.answers["sacct"] = (0, data("sacct_month.txt"), "")
    out = io.StringIO()
    assert quota_main(["report", "--json", "--month", "2026-11"], {}, runner=fake_runner, out=out) == 0
    assert fake_runner.calls[0][0] == "sacct"
    doc = json.loads(out.getvalue())
    assert doc["month"] == "2026-11"
    assert set(doc["users"]) == {"alice", "bob", "carol"}


def test_cli_bad_policy_and_failing_slurm(tmp_path: Path, fake_runner) -> None:
    bad = tmp_path / "p.json"
    bad.write_text('{"groups": {"g": {"gpus_per_job": -5}}}')
    assert quota_main(["apply", str(bad)], {}, runner=fake_runner, out=io.StringIO()) == 3
    good = tmp_path / "q.json"
    good.write_text('{"groups": {"g": {"gpus_per_job": 1}}}')
    fake_runner.answers["sacctmgr"] = (1, "", "sacctmgr: error: Problem talking to the database")
    assert quota_main(["apply", str(good)], {}, runner=fake_runner, out=io.StringIO()) == 4
