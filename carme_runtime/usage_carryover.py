# SPDX-License-Identifier: GPL-3.0-or-later
"""This month's GPU-minutes carried across a Slurm upgrade (issue 34, docs/upgrade.md "Budgets across the upgrade").

Slurm 24.11 starts with a fresh accounting database and fresh usage, and Slurm can set an association's usage only to
0. So the usage is carried as a record, and the budget is held by the limit instead: for the record's month each
association's ``GrpTRESMins=gres/gpu`` is its declared budget minus the minutes it had used (never below 0); in any
other month the declared budget again.

* The record (:func:`record`) is taken from slurmctld before the upgrade (``scontrol show assoc_mgr flags=assoc``,
  :func:`parse_assoc_mgr`): per association the minutes of the number Slurm enforces ``GrpTRESMins`` against, the
  ``N`` of ``gres/gpu=LIMIT(N)`` (the whole minutes of its raw usage; an account's includes its users').
* The slurm role applies it (:func:`apply_carryover`, through ``roles/slurm/module_utils/carme_usage_carryover.py``)
  and writes what it applied (:func:`applied`) for the portal, which adds the carried minutes to the usage it shows
  (:func:`carried_minutes`).

Pure functions; the role reaches this file through a link, so it imports nothing but the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

FORMAT = 1
TRES = "gres/gpu"
MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])")
_HEAD = re.compile(r"^ClusterName=(\S*) Account=(\S+) UserName=(\S*)")


def assoc_name(account: str, user: str = "") -> str:
    """``user@account`` for a user's association, ``account`` for the account's own."""
    return f"{user}@{account}" if user else account


def parse_assoc_mgr(text: str, tres: str = TRES) -> dict[str, int]:
    """Every association's used minutes of ``tres`` from ``scontrol show assoc_mgr flags=assoc``: the ``N`` of its
    ``GrpTRESMins=...,gres/gpu=LIMIT(N)`` line, where N > 0. The user's name is printed with its uid, ``bob(1001)``."""
    used: dict[str, int] = {}
    name = ""
    for line in text.splitlines():
        head = _HEAD.match(line.strip())
        if head:
            name = assoc_name(head.group(2), head.group(3).split("(", 1)[0])
            continue
        body = line.strip()
        if name and body.startswith("GrpTRESMins="):
            found = re.search(rf"(?:^|[=,]){re.escape(tres)}=[^(,]*\((\d+)\)", body)
            if found and int(found.group(1)) > 0:
                used[name] = int(found.group(1))
            name = ""
    return used


def record(
    minutes: Mapping[str, int], month: str, taken: str, cluster: str = "", slurm_version: str = ""
) -> dict[str, Any]:
    """The carry-over record: ``minutes`` (association name -> used minutes) belong to ``month`` (YYYY-MM)."""
    made = {"format": FORMAT, "tres": TRES, "month": month, "taken": taken, "cluster": cluster,
            "slurm_version": slurm_version, "minutes": {k: int(v) for k, v in sorted(minutes.items())}}  # fmt: skip
    problems = record_problems(made)
    if problems:
        raise ValueError("; ".join(problems))
    return made


def record_problems(rec: object) -> list[str]:
    """What makes ``rec`` no carry-over record ([] when it is one; an empty mapping is none, and fine)."""
    if not rec:
        return []
    if not isinstance(rec, Mapping):
        return [f"the carry-over record is not a mapping: {type(rec).__name__}"]
    problems = []
    if rec.get("format") != FORMAT or rec.get("tres") != TRES:
        problems.append(f"format {rec.get('format')!r} / tres {rec.get('tres')!r}: expected {FORMAT} / {TRES}")
    if not isinstance(rec.get("month"), str) or not MONTH.fullmatch(rec["month"]):
        problems.append(f"month {rec.get('month')!r} is not YYYY-MM")
    minutes = rec.get("minutes")
    if not isinstance(minutes, Mapping) or any(
        not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in minutes.values()
    ):
        problems.append("minutes must map association names to whole minutes >= 0")
    return problems


def carried(rec: Mapping[str, Any] | None, name: str, month: str) -> int:
    """The minutes carried for association ``name`` in ``month``: the record's, in its own month only."""
    if not rec or rec.get("month") != month:
        return 0
    return int((rec.get("minutes") or {}).get(name, 0))


def tres_minutes(value: object, tres: str = TRES) -> int | None:
    """The ``tres`` minutes of a ``GrpTRESMins`` value (``gres/gpu=6000,cpu=10``); ``None`` when unset or -1."""
    for pair in str(value or "").split(","):
        key, _, number = pair.strip().partition("=")
        if key == tres and number.strip().lstrip("-").isdigit():
            return int(number) if int(number) >= 0 else None
    return None


def _with_tres(value: object, minutes: int, tres: str = TRES) -> str:
    pairs = [p.strip() for p in str(value or "").split(",") if p.strip() and p.strip().partition("=")[0] != tres]
    return ",".join([*pairs, f"{tres}={minutes}"])


def _name(item: Mapping[str, Any], kind: str) -> str:
    return assoc_name(str(item.get("account")), str(item["name"])) if kind == "users" else str(item["name"])


def _lowered(
    item: Mapping[str, Any], rec: Mapping[str, Any] | None, month: str, kind: str
) -> tuple[str, int, int, int] | None:
    """(name, declared minutes, carried minutes, the lowered limit) of an association with a declared ``gres/gpu``
    budget that carries minutes in ``month``; ``None`` for any other."""
    declared, name = tres_minutes(item.get("GrpTRESMins")), _name(item, kind)
    minus = carried(rec, name, month)
    if declared is None or minus == 0:
        return None
    return name, declared, minus, max(0, declared - minus)


def apply_carryover(
    items: Sequence[Mapping[str, Any]], rec: Mapping[str, Any] | None, month: str, kind: str
) -> list[dict[str, Any]]:
    """The slurm role's ``slurm_accounts`` (``kind`` "accounts") or ``slurm_users`` ("users") with each declared
    ``GrpTRESMins=gres/gpu=D`` that carries ``C`` minutes in ``month`` set to ``max(0, D - C)``; the rest unchanged."""
    out = []
    for item in items:
        lowered = _lowered(item, rec, month, kind)
        out.append({**item, "GrpTRESMins": _with_tres(item["GrpTRESMins"], lowered[3])} if lowered else dict(item))
    return out


def applied(
    accounts: Sequence[Mapping[str, Any]], users: Sequence[Mapping[str, Any]], rec: Mapping[str, Any] | None, month: str
) -> dict[str, Any]:
    """What :func:`apply_carryover` put into Slurm for ``month``, for the portal: per association with a declared
    budget and carried minutes, ``{declared, carried, limit}``; ``{}`` in any other month than the record's."""
    out: dict[str, dict[str, int]] = {}
    for kind, items in (("accounts", accounts), ("users", users)):
        for item in items:
            if lowered := _lowered(item, rec, month, kind):
                name, declared, minus, limit = lowered
                out[name] = {"declared": declared, "carried": minus, "limit": limit}
    return {"format": FORMAT, "tres": TRES, "month": month, "associations": out} if out else {}


def carried_minutes(applied_record: Mapping[str, Any] | None, names: Sequence[str], month: str) -> int:
    """The portal's one place for the carried usage: the minutes :func:`applied` says were carried in ``month`` for
    the associations ``names`` (0 in any other month, or with no record)."""
    if not applied_record or applied_record.get("month") != month:
        return 0
    assocs = applied_record.get("associations") or {}
    return sum(int(assocs[n]["carried"]) for n in names if n in assocs)


def declared_minutes(
    applied_record: Mapping[str, Any] | None, name: str, month: str, slurm_limit: int | None
) -> int | None:
    """The budget to show for association ``name``: the declared one where the carry-over lowered Slurm's limit in
    ``month`` and Slurm still holds that lowered limit, else Slurm's own (``slurm_limit``)."""
    if not applied_record or applied_record.get("month") != month:
        return slurm_limit
    entry = (applied_record.get("associations") or {}).get(name)
    if entry is None or slurm_limit != int(entry["limit"]):
        return slurm_limit
    return int(entry["declared"])
