# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU-minutes carried over the upgrade to Slurm 24.11 (docs/upgrade.md "Budgets across the upgrade").

The new Slurm starts with no usage, so in the month of the upgrade the slurm role lowers each budget in Slurm by the
minutes its association had used, and writes what it did (``SLURM_USAGE_CARRYOVER_FILE``, the role's
``slurm_usage_carryover_file``: per association the declared budget, the carried minutes and the lowered limit). The
portal shows the declared budget and the usage with the carried minutes added, for that month only; the arithmetic is
:mod:`carme_runtime.usage_carryover`'s. No file (the default), or another month: nothing is carried. Once the month
is over the tick gives Slurm the declared budgets back (:func:`restore_declared`), unless a deploy did so first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from flask import current_app

from carme_runtime import usage_carryover
from webui.models import utcnow
from webui.projects import accounting
from webui.slurm.scheduler import current_scheduler


def _month() -> str:
    return utcnow().strftime("%Y-%m")


_read: dict[str, tuple[float, Mapping[str, Any] | None]] = {}


def applied_record() -> Mapping[str, Any] | None:
    """The role's record of what it carried (``None``: no file set, none there, or unreadable), read again when the
    file changes."""
    path = current_app.config.get("SLURM_USAGE_CARRYOVER_FILE") or ""
    if not path:
        return None
    try:
        mtime = os.stat(path).st_mtime
        cached = _read.get(path)
        if cached is None or cached[0] != mtime:
            with open(path, encoding="utf-8") as f:
                found = json.load(f)
            _read[path] = (mtime, found if isinstance(found, Mapping) else None)
        return _read[path][1]
    except (OSError, ValueError):
        return None


def carried_gpu_hours(username: str) -> float:
    """GPU-hours ``username``'s associations used this month before the upgrade (0 in any other month)."""
    record = applied_record()
    if not record:
        return 0.0
    names = [n for n in record.get("associations") or {} if n.partition("@")[0] == username and "@" in n]
    return usage_carryover.carried_minutes(record, names, _month()) / 60.0


def declared_gpu_minutes(name: str, slurm_limit: int | None) -> int | None:
    """The budget of association ``name`` (``user@account`` or ``account``) to show and check against: the declared
    one while Slurm holds it lowered by the carried minutes this month, else Slurm's own."""
    return usage_carryover.declared_minutes(applied_record(), name, _month(), slurm_limit)


def restore_declared() -> str:
    """The tick's task: once the carry-over's month is over, each association that Slurm still holds at its lowered
    limit gets its declared budget back (``sacctmgr`` as the portal's Operator user), as the next deploy would; says
    how many. Slurm reset the usage on the 1st (``PriorityUsageResetPeriod=MONTHLY``)."""
    record = applied_record()
    if not record or record.get("month") == _month():
        return "nothing to restore"
    sched, restored = current_scheduler(), 0
    for name, entry in sorted((record.get("associations") or {}).items()):
        user, _, account = name.rpartition("@")
        if not all(accounting.NAME.fullmatch(n) for n in (account, *([user] if user else []))):
            continue
        if user:
            now = next(
                (a.gpu_minutes for a in sched.associations_of(user) if a.user == user and a.account == account), None
            )
            where = ["modify", "user", "where", f"name={user}", f"account={account}"]
        else:
            now = next((p.gpu_minutes for p in sched.projects() if p.name == account), None)
            where = ["modify", "account", "where", f"name={account}"]
        if now is not None and now == int(entry["limit"]) != int(entry["declared"]):
            accounting.backend().sacctmgr([*where, "set", f"GrpTRESMins=gres/gpu={int(entry['declared'])}"])
            restored += 1
    return f"{restored} budget(s) restored after the carry-over's month"
