# SPDX-License-Identifier: GPL-3.0-or-later
"""The progress of ``carme upgrade``: ``<project>/.artifacts/upgrade/state.json`` and the times it gives.

The file names the backup set (chosen once), the inventory and, per stage of the upgrade (``stages``) and of a
rollback (``rollback``), when it first started, when it finished and how often it was started (``attempts``). It is
written atomically (a temporary file, 0600 from its creation, renamed over the old one) before and after each stage,
so a SIGKILL at any point leaves the old or the new state, never half of one. ``times`` holds the total and how long
users could not start sessions (from the drain's start to the finish's end); :func:`write_times` writes them for
``bench/results/upgrade.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

from carme_admin.playbook import UsageError
from carme_admin.playbook import artifacts_root
from carme_admin.site import write_private

STAGES = ("preflight", "drain", "backup", "fetch", "hosts", "deploy", "finish")
ROLLBACK_STAGES = ("hosts", "deploy", "restore", "finish")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
FORMAT = 1

State = dict[str, Any]


def upgrade_dir(project: Path) -> Path:
    return artifacts_root(project) / "upgrade"


def state_path(project: Path) -> Path:
    return upgrade_dir(project) / "state.json"


def now_text(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime(TIME_FORMAT)


def epoch(text: str) -> int:
    """Seconds since the epoch of a state time (the drain's notice gives them to the playbook)."""
    return int(datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC).timestamp())


def _seconds(start: str, end: str) -> int:
    parse = datetime.strptime
    return int((parse(end, TIME_FORMAT) - parse(start, TIME_FORMAT)).total_seconds())


def new_state(set_id: str, inventory: Path | None) -> State:
    return {"format": FORMAT, "set": set_id, "inventory": str(inventory.resolve()) if inventory else None,
            "created": now_text(), "stages": {}}  # fmt: skip


def load(project: Path) -> State | None:
    path = state_path(project)
    try:
        state: State = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} cannot be read ({exc}): move it aside to start a new upgrade") from exc
    if state.get("format") != FORMAT or not isinstance(state.get("stages"), dict) or not state.get("set"):
        raise UsageError(f"{path} is not an upgrade state of this version of carme")
    return state


def save(project: Path, state: State) -> None:
    """Write the state with its times atomically, 0600 (its directories 0700)."""
    path = state_path(project)
    for folder in (artifacts_root(project), path.parent):
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)
    state["times"] = times(state)
    write_private(path, json.dumps(state, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def locked(project: Path) -> Iterator[None]:
    """One ``carme upgrade`` at a time in this project (the lock goes with the process, a SIGKILL too)."""
    folder = upgrade_dir(project)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / "lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise UsageError(f"another carme upgrade runs in this project ({folder / 'lock'})") from exc
        yield
    finally:
        os.close(fd)


def records(state: State, rollback: bool) -> dict[str, dict[str, Any]]:
    key = "rollback" if rollback else "stages"
    found: dict[str, dict[str, Any]] = state.setdefault(key, {})
    return found


def next_stage(state: State, rollback: bool = False) -> str | None:
    """The first stage not finished, or None when all are."""
    done = records(state, rollback)
    for stage in ROLLBACK_STAGES if rollback else STAGES:
        if not done.get(stage, {}).get("finished"):
            return stage
    return None


def mark(state: State, stage: str, event: str, rollback: bool = False, now: str | None = None) -> None:
    """Record ``started`` (kept from the first attempt; ``attempts`` counted), ``finished`` or ``failed``."""
    record = records(state, rollback).setdefault(stage, {})
    when = now or now_text()
    if event == "started":
        record.setdefault("started", when)
        record["attempts"] = int(record.get("attempts", 0)) + 1
        record.pop("failed", None)
    else:
        record[event] = when


def _span(first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any] | None:
    if not first.get("started") or not last.get("finished"):
        return None
    return {"started": first["started"], "finished": last["finished"],
            "seconds": _seconds(first["started"], last["finished"])}  # fmt: skip


def times(state: State) -> dict[str, Any]:
    """The upgrade's (and a rollback's) total, and the time users could not start sessions: from the drain's start
    to the end of the last finish (the upgrade's, or the rollback's when there was one)."""
    up, back = state.get("stages", {}), state.get("rollback", {})
    out: dict[str, Any] = {"set": state.get("set")}
    stage_seconds = {name: _span(rec, rec) for name, rec in up.items()}
    out["stages"] = {name: span["seconds"] for name, span in stage_seconds.items() if span}
    total = _span(up.get("preflight", {}), up.get("finish", {}))
    if total:
        out["total_seconds"] = total["seconds"]
    blocked = _span(up.get("drain", {}), up.get("finish", {}))
    if back:
        out["rollback_stages"] = {name: span["seconds"] for name, rec in back.items() if (span := _span(rec, rec))}
        rolled = _span(back.get("hosts", {}), back.get("finish", {}))
        if rolled:
            out["rollback_total_seconds"] = rolled["seconds"]
        blocked = _span(up.get("drain", {}), back.get("finish", {}))
    if blocked:
        out["sessions_blocked_seconds"] = blocked["seconds"]
        out["sessions_blocked"] = {"from": blocked["started"], "to": blocked["finished"]}
    return out


def write_times(state: State, dest: Path) -> None:
    """The times as JSON at ``dest`` (e.g. bench/results/upgrade.json)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(times(state), indent=2, sort_keys=True) + "\n")


def _stage_text(rec: dict[str, Any]) -> str:
    if not rec.get("started"):
        return "-"
    if rec.get("finished"):
        end = f"finished {rec['finished']}"
    elif rec.get("failed"):
        end = f"failed {rec['failed']}"
    else:
        end = "not finished (running, or killed)"
    return f"started {rec['started']}, {end}, attempts {rec.get('attempts', 1)}"


def status_lines(state: State) -> list[str]:
    """``--status``: the set, the inventory, each stage with its times, what runs next and the times."""
    inventory = state.get("inventory") or "ansible.cfg's"
    lines = [f"set {state['set']}, inventory {inventory}, created {state['created']}"]
    for title, rollback, names in (("upgrade", False, STAGES), ("rollback", True, ROLLBACK_STAGES)):
        done = records(dict(state), rollback) if (not rollback or state.get("rollback")) else None
        if done is None:
            continue
        lines.append(f"{title}:")
        for name in names:
            rec = done.get(name, {})
            lines.append(f"  {name:<10} {_stage_text(rec)}")
        following = next_stage(dict(state), rollback)
        lines.append(f"  next: {following}" if following else f"  {title} finished")
    found = times(state)
    if "total_seconds" in found or "sessions_blocked_seconds" in found:
        lines.append("times: " + ", ".join(f"{key} {found[key]} s" for key in
                                            ("total_seconds", "rollback_total_seconds", "sessions_blocked_seconds")
                                            if key in found))  # fmt: skip
    return lines
