"""Quota policy per LDAP group, applied as Slurm QOS limits, and GPU-hour usage reports.

Policy (JSON or TOML file, or a dict)::

    [groups.gpuusers]
    qos = "carme-gpuusers"          # optional; default "carme-<group>"
    gpus_per_job = 2                # -> MaxTRESPerJob=gres/gpu=2
    concurrent_sessions = 1         # -> MaxJobsPerUser=1 (a second job waits PENDING: QOSMaxJobsPerUserLimit)
    session_limit = "hold"          # or "reject": MaxSubmitJobsPerUser=1 (sbatch fails instead)
    interactive_walltime_minutes = 480   # -> MaxWall=480
    gpu_hours_per_month = 100       # -> GrpTRESMins=gres/gpu=6000

A limit left out (or ``null``/-1) is cleared in Slurm (``-1``). ``GrpTRESMins`` is a usage budget that
Slurm only resets if slurm.conf has ``PriorityType=priority/multifactor`` and
``PriorityUsageResetPeriod=MONTHLY`` (and ``AccountingStorageEnforce`` includes ``limits,qos``); without
the reset period the budget is a lifetime budget. GPU TRES must be tracked:
``AccountingStorageTRES=gres/gpu``.

``carme-quota apply`` is idempotent: :func:`current_qos` reads ``sacctmgr -P show qos``, :func:`diff`
compares normalised values, :func:`apply_argv` builds ``sacctmgr -i`` argv lists for the differences only.
Users are bound to the QOS through their association (``QOS=``/``DefaultQOS=``, see
:func:`association_argv`), so every submission path (portal, sbatch, srun, REST) is limited.

The slurm role does not call ``carme-quota apply``. Per-user limits and budgets are set on each user's association
by the role's ``slurm_accounting`` module, from the inventory (roles/slurm/README.md, "Limits"), and the role
resets association QOS lists to the inventory's. A QOS made here limits only the users bound to it until the next
role run. Its ``MaxJobsPerUser`` would replace the association's ``MaxJobs`` for that QOS's jobs, and its
``GrpTRESMins`` is one budget shared by everyone in the QOS. ``carme-quota report`` only reads.

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
from datetime import timedelta
from datetime import tzinfo
from pathlib import Path

from carme_runtime.slurm import gpu_count_from_tres
from carme_runtime.slurm import parse_parsable
from carme_runtime.slurm import parse_tres

QOS_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")  # slurmdbd stores names in lower case
GROUP_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
MANAGED_KEYS = ("MaxTRESPerJob", "MaxJobsPerUser", "MaxSubmitJobsPerUser", "MaxWall", "GrpTRESMins")
SHOW_QOS_ARGV = ["sacctmgr", "-P", "show", "qos", "format=Name," + ",".join(MANAGED_KEYS)]
#: sacctmgr prints abbreviated column headers
_HEADER_ALIASES = {
    "MaxTRES": "MaxTRESPerJob",
    "MaxTRESPerJob": "MaxTRESPerJob",
    "MaxJobsPU": "MaxJobsPerUser",
    "MaxJobsPerUser": "MaxJobsPerUser",
    "MaxSubmitPU": "MaxSubmitJobsPerUser",
    "MaxSubmitJobsPerUser": "MaxSubmitJobsPerUser",
    "MaxWall": "MaxWall",
    "GrpTRESMins": "GrpTRESMins",
    "Name": "Name",
}
RESET_NOTE = (
    "GrpTRESMins is a budget: set PriorityType=priority/multifactor and PriorityUsageResetPeriod=MONTHLY "
    "in slurm.conf so it resets each month"
)


class PolicyError(ValueError):
    """Invalid policy; names the group and the field."""


@dataclass(frozen=True)
class GroupPolicy:
    group: str
    qos: str
    gpus_per_job: int | None = None
    concurrent_sessions: int | None = None
    session_limit: str = "hold"  # hold | reject
    interactive_walltime_minutes: int | None = None
    gpu_hours_per_month: int | None = None


@dataclass(frozen=True)
class Policy:
    groups: tuple[GroupPolicy, ...] = ()

    def by_group(self) -> dict[str, GroupPolicy]:
        return {g.group: g for g in self.groups}


_INT_FIELDS = ("gpus_per_job", "concurrent_sessions", "interactive_walltime_minutes", "gpu_hours_per_month")


def policy_from_dict(data: Mapping[str, object]) -> Policy:
    groups = data.get("groups")
    if not isinstance(groups, Mapping):
        raise PolicyError("policy: 'groups' must be a table/object of group -> limits")
    out = []
    qos_seen: dict[str, str] = {}
    for group, raw in sorted(groups.items()):
        if not isinstance(group, str) or not GROUP_NAME_RE.match(group):
            raise PolicyError(f"group {group!r}: invalid group name")
        if not isinstance(raw, Mapping):
            raise PolicyError(f"group {group}: must be a table/object")
        unknown = set(raw) - {*_INT_FIELDS, "qos", "session_limit"}
        if unknown:
            raise PolicyError(f"group {group}: unknown field {sorted(unknown)[0]!r}")
        values: dict[str, int | None] = {}
        for key in _INT_FIELDS:
            value = raw.get(key)
            if value is None or value == -1:
                values[key] = None
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PolicyError(f"group {group}: {key} must be a non-negative integer or -1/null")
            values[key] = value
        qos = raw.get("qos", f"carme-{group.lower()}")
        if not isinstance(qos, str) or not QOS_NAME_RE.match(qos):
            raise PolicyError(f"group {group}: qos {qos!r} must match {QOS_NAME_RE.pattern}")
        if qos in qos_seen:
            raise PolicyError(f"group {group}: qos {qos!r} already used by group {qos_seen[qos]}")
        qos_seen[qos] = group
        mode = raw.get("session_limit", "hold")
        if mode not in ("hold", "reject"):
            raise PolicyError(f"group {group}: session_limit must be 'hold' or 'reject'")
        out.append(
            GroupPolicy(
                group=group,
                qos=qos,
                session_limit=str(mode),
                gpus_per_job=values["gpus_per_job"],
                concurrent_sessions=values["concurrent_sessions"],
                interactive_walltime_minutes=values["interactive_walltime_minutes"],
                gpu_hours_per_month=values["gpu_hours_per_month"],
            )
        )
    return Policy(tuple(out))


def load_policy(path: str | Path) -> Policy:
    """Read a policy from ``.json`` or ``.toml`` (no YAML: the runtime is stdlib-only)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        import tomllib

        try:
            data: object = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"{path}: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PolicyError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise PolicyError(f"{path}: top level must be a table/object")
    try:
        return policy_from_dict(data)
    except PolicyError as exc:
        raise PolicyError(f"{path}: {exc}") from None


# --- normalisation ----------------------------------------------------------------------------------


def wall_to_minutes(value: str) -> int | None:
    """Slurm time ``[D-]HH:MM:SS`` / ``MM:SS`` / ``MM`` / minutes -> minutes; ``None`` for unset."""
    value = value.strip()
    if value in ("", "-1", "UNLIMITED", "INFINITE", "Partition_Limit"):
        return None
    days = 0
    if "-" in value:
        d, _, value = value.partition("-")
        days = int(d)
        parts = [int(p) for p in value.split(":")]
        while len(parts) < 3:
            parts.append(0)
        h, m, s = parts
    else:
        parts = [int(p) for p in value.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]
        else:
            h, m, s = parts
    return days * 1440 + h * 60 + m + (1 if s else 0)


def _norm_tres(value: str) -> str:
    tres = parse_tres(value) if value.strip() else {}
    kept = {k: v for k, v in tres.items() if v not in ("-1", "")}
    return ",".join(f"{k}={v}" for k, v in sorted(kept.items()))


def _norm_int(value: str) -> str:
    value = value.strip()
    return "" if value in ("", "-1") else str(int(value))


def normalise(key: str, value: str) -> str:
    """The comparable form of a QOS field as sacctmgr prints or accepts it; ``""`` means unset."""
    if key == "MaxWall":
        minutes = wall_to_minutes(value)
        return "" if minutes is None else str(minutes)
    if key in ("MaxTRESPerJob", "GrpTRESMins"):
        return _norm_tres(value)
    return _norm_int(value)


# --- desired / current / diff / apply -----------------------------------------------------------------


def desired_qos(policy: Policy) -> dict[str, dict[str, str]]:
    """QOS name -> managed field -> normalised value (``""`` = unset)."""
    out: dict[str, dict[str, str]] = {}
    for g in policy.groups:
        fields = dict.fromkeys(MANAGED_KEYS, "")
        if g.gpus_per_job is not None:
            fields["MaxTRESPerJob"] = f"gres/gpu={g.gpus_per_job}"
        if g.concurrent_sessions is not None:
            key = "MaxJobsPerUser" if g.session_limit == "hold" else "MaxSubmitJobsPerUser"
            fields[key] = str(g.concurrent_sessions)
        if g.interactive_walltime_minutes is not None:
            fields["MaxWall"] = str(g.interactive_walltime_minutes)
        if g.gpu_hours_per_month is not None:
            fields["GrpTRESMins"] = f"gres/gpu={g.gpu_hours_per_month * 60}"
        out[g.qos] = fields
    return out


def current_qos(sacctmgr_output: str) -> dict[str, dict[str, str]]:
    """Parse ``sacctmgr -P show qos format=Name,...`` (see :data:`SHOW_QOS_ARGV`) into normalised values."""
    out: dict[str, dict[str, str]] = {}
    for row in parse_parsable(sacctmgr_output):
        named = {_HEADER_ALIASES.get(k, k): v for k, v in row.items()}
        name = named.get("Name", "")
        if not name:
            continue
        out[name] = {k: normalise(k, named[k]) for k in MANAGED_KEYS if k in named}
    return out


@dataclass(frozen=True)
class Change:
    action: str  # "add" (create the QOS) or "modify"
    qos: str
    key: str = ""
    old: str = ""
    new: str = ""

    def __str__(self) -> str:
        if self.action == "add":
            return f"+ qos {self.qos}"
        return f"~ qos {self.qos}: {self.key} {self.old or '(unset)'} -> {self.new or '(unset)'}"


def diff(current: Mapping[str, Mapping[str, str]], desired: Mapping[str, Mapping[str, str]]) -> list[Change]:
    """Changes that turn ``current`` into ``desired``; QOS not in the policy are left alone."""
    changes: list[Change] = []
    for qos in sorted(desired):
        have = current.get(qos)
        if have is None:
            changes.append(Change("add", qos))
            have = {}
        for key in MANAGED_KEYS:
            want = desired[qos].get(key, "")
            old = have.get(key, "")
            if old != want:
                changes.append(Change("modify", qos, key, old, want))
    return changes


def _set_value(key: str, value: str) -> str:
    if value:
        return value
    return "gres/gpu=-1" if key in ("MaxTRESPerJob", "GrpTRESMins") else "-1"


def apply_argv(changes: Iterable[Change]) -> list[list[str]]:
    """sacctmgr argv lists: one ``add qos`` per new QOS, one ``modify qos ... set`` per QOS."""
    adds: list[list[str]] = []
    sets: dict[str, list[str]] = {}
    for ch in changes:
        if ch.action == "add":
            adds.append(["sacctmgr", "-i", "add", "qos", ch.qos])
        elif ch.action == "modify":
            sets.setdefault(ch.qos, []).append(f"{ch.key}={_set_value(ch.key, ch.new)}")
        else:
            raise ValueError(f"unknown change action {ch.action!r}")
    mods = [["sacctmgr", "-i", "modify", "qos", "where", f"name={q}", "set", *kv] for q, kv in sets.items()]
    return adds + mods


def association_argv(users: Iterable[str], qos: str) -> list[list[str]]:
    """Bind users to a QOS through their associations.

    ``QOS+=`` keeps the other QOS of the association, ``DefaultQOS=`` makes this one the default.
    """
    return [
        ["sacctmgr", "-i", "modify", "user", "where", f"name={u}", "set", f"QOS+={qos}", f"DefaultQOS={qos}"]
        for u in sorted(set(users))
    ]


# --- usage ---------------------------------------------------------------------------------------------


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


def parse_sacct_json(text: str) -> list[JobRecord]:
    """``sacct --json`` (Slurm 22.05, openapi dbv0.0.38 job records) -> records."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise ValueError("sacct --json: no 'jobs' list")
    out = []
    for job in data["jobs"]:
        tres = job.get("tres", {}).get("allocated", []) or []
        gpus = 0
        typed = 0
        for item in tres:
            if item.get("type") == "gres" and (item.get("name") or "") == "gpu":
                gpus += int(item.get("count", 0))
            elif item.get("type") == "gres" and str(item.get("name") or "").startswith("gpu:"):
                typed += int(item.get("count", 0))
        t = job.get("time", {})
        start = t.get("start") or None
        end = t.get("end") or None
        out.append(
            JobRecord(
                job_id=str(job.get("job_id")),
                user=str(job.get("user", "")),
                account=str(job.get("account", "")),
                gpus=gpus or typed,
                start=float(start) if start else None,
                end=float(end) if end else None,
            )
        )
    return out


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
        if rec.gpus <= 0 or rec.start is None:
            continue
        end = rec.end if rec.end is not None else now
        start, stop = max(rec.start, lo), min(end, hi)
        if stop <= start:
            continue
        hours = rec.gpus * (stop - start) / 3600.0
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


def previous_month(now: datetime | None = None) -> str:
    now = now or datetime.now()
    first = now.replace(day=1)
    return (first - timedelta(days=1)).strftime("%Y-%m")


def current_month(now: datetime | None = None) -> str:
    return (now or datetime.now()).strftime("%Y-%m")
