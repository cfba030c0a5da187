# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU-hour usage reports from ``sacct`` (``carme-quota report``).

Limits are not set here: per-user limits, budgets and QOS are set by the slurm role's ``slurm_accounting`` module
from the inventory (roles/slurm/README.md, "Limits"), the one place that compares and applies them.

Usage: GPU-hours = sum over jobs of (GPUs from AllocTRES x elapsed seconds) / 3600, with jobs that cross
a month boundary clipped to the month.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from datetime import UTC
from datetime import datetime
from datetime import tzinfo
from typing import Any

from carme_runtime.slurm_formats import gpu_count_from_tres
from carme_runtime.slurm_formats import parse_parsable
from carme_runtime.slurm_formats import parse_tres
from carme_runtime.slurmrest import account_job_record


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    user: str
    account: str
    gpus: int
    start: float | None  # epoch seconds; None = never started
    end: float | None  # None = still running


SACCT_FORMAT = "JobID,User,Account,AllocTRES,Start,End,State"


def sacct_argv(month: str, tz: tzinfo | None = None) -> list[str]:
    """``sacct`` for every allocation (``-X``) of all users that overlaps the month, parsable."""
    start, end = month_bounds(month, tz)
    fmt = "%Y-%m-%dT%H:%M:%S"
    tz_ = tz or _local_tz()
    s = datetime.fromtimestamp(start, tz_).strftime(fmt)
    e = datetime.fromtimestamp(end, tz_).strftime(fmt)
    return ["sacct", "-X", "-a", "-P", "-o", SACCT_FORMAT, "-S", s, "-E", e]


def _local_tz() -> tzinfo:
    tz = datetime.now().astimezone().tzinfo
    return tz if tz is not None else UTC


def month_bounds(month: str, tz: tzinfo | None = None) -> tuple[float, float]:
    """``"2026-11"`` -> (epoch of 2026-11-01 00:00, epoch of 2026-12-01 00:00) in ``tz`` (default local)."""
    m = re.fullmatch(r"(\d{4})-(\d{2})", month)
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise ValueError(f"month must be YYYY-MM, got {month!r}")
    year, mon = int(m.group(1)), int(m.group(2))
    tz = tz or _local_tz()
    start = datetime(year, mon, 1, tzinfo=tz)
    nxt = datetime(year + (mon == 12), mon % 12 + 1, 1, tzinfo=tz)
    return start.timestamp(), nxt.timestamp()


def _parse_sacct_time(value: str, tz: tzinfo) -> float | None:
    value = value.strip()
    if value in ("", "Unknown", "None", "N/A"):
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=tz).timestamp()


def parse_sacct_parsable(text: str, tz: tzinfo | None = None) -> list[JobRecord]:
    """``sacct -X -P -o JobID,User,Account,AllocTRES,Start,End[,State]`` -> records (times in ``tz``)."""
    tz = tz or _local_tz()
    out = []
    for row in parse_parsable(text):
        out.append(
            JobRecord(
                job_id=row["JobID"],
                user=row.get("User", ""),
                account=row.get("Account", ""),
                gpus=gpu_count_from_tres(parse_tres(row.get("AllocTRES", ""))),
                start=_parse_sacct_time(row.get("Start", ""), tz),
                end=_parse_sacct_time(row.get("End", ""), tz),
            )
        )
    return out


def job_record(raw: Mapping[str, Any]) -> JobRecord:
    """One job of Slurm's accounting (``sacct --json``, ``GET /slurmdb/.../jobs``; any version
    :func:`carme_runtime.slurmrest.account_job_record` reads) as a record: GPUs from its allocated TRES (a typed
    ``gres/gpu:T`` counted once), start and end (``None``: not started, still running)."""
    job = account_job_record(raw)
    tres = {
        f"gres/{item['name']}": str(item["count"])
        for item in job["tres"]["allocated"]
        if item["type"] == "gres" and item["name"].split(":")[0] == "gpu"
    }
    t = job["time"]
    return JobRecord(
        job_id=str(job["job_id"]),
        user=job["user"],
        account=job["account"],
        gpus=gpu_count_from_tres(tres),
        start=float(t["start"]) if t["start"] else None,
        end=float(t["end"]) if t["end"] else None,
    )


def parse_sacct_json(text: str) -> list[JobRecord]:
    """``sacct --json`` -> records (:func:`job_record`)."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise ValueError("sacct --json: no 'jobs' list")
    return [job_record(raw) for raw in data["jobs"]]


def gpu_hours_within(rec: JobRecord, lo: float, hi: float, now: float) -> float:
    """The one GPU-hour rule (the portal's budget and history, ``carme-quota report``): GPUs x the seconds the job
    ran inside ``[lo, hi)`` / 3600, as Slurm charges a GPU-minute budget that it resets each period. A job still
    running counts up to ``now``; one without GPUs or that never started counts nothing."""
    if rec.gpus <= 0 or rec.start is None:
        return 0.0
    end = rec.end if rec.end is not None else now
    start, stop = max(rec.start, lo), min(end, hi)
    return rec.gpus * (stop - start) / 3600.0 if stop > start else 0.0


@dataclass
class Usage:
    month: str
    by_user: dict[str, float] = field(default_factory=dict)  # GPU-hours
    by_account: dict[str, float] = field(default_factory=dict)
    jobs: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "month": self.month,
            "unit": "gpu_hours",
            "jobs": self.jobs,
            "users": {k: round(v, 6) for k, v in sorted(self.by_user.items())},
            "accounts": {k: round(v, 6) for k, v in sorted(self.by_account.items())},
        }


def usage_from_sacct(
    records: Iterable[JobRecord], month: str, *, tz: tzinfo | None = None, now: float | None = None
) -> Usage:
    """GPU-hours per user and per account for ``month``: sum(GPUs x seconds inside the month) / 3600.

    A job still running counts up to ``now`` (default: the current time); jobs without GPUs or that
    never started count nothing.
    """
    lo, hi = month_bounds(month, tz)
    if now is None:
        now = datetime.now(UTC).timestamp()
    usage = Usage(month)
    for rec in records:
        hours = gpu_hours_within(rec, lo, hi, now)
        if hours <= 0:
            continue
        usage.by_user[rec.user] = usage.by_user.get(rec.user, 0.0) + hours
        usage.by_account[rec.account] = usage.by_account.get(rec.account, 0.0) + hours
        usage.jobs += 1
    return usage


def report_table(usage: Usage) -> str:
    lines = [f"GPU-hours for {usage.month} ({usage.jobs} jobs with GPUs)", ""]
    lines.append(f"{'USER':<24} {'GPU-HOURS':>12}")
    for user, hours in sorted(usage.by_user.items()):
        lines.append(f"{user:<24} {hours:>12.2f}")
    lines += ["", f"{'ACCOUNT':<24} {'GPU-HOURS':>12}"]
    for account, hours in sorted(usage.by_account.items()):
        lines.append(f"{account:<24} {hours:>12.2f}")
    return "\n".join(lines) + "\n"


def report_json(usage: Usage) -> str:
    return json.dumps(usage.as_dict(), indent=2, sort_keys=True) + "\n"


def current_month(now: datetime | None = None) -> str:
    return (now or datetime.now()).strftime("%Y-%m")
