# SPDX-License-Identifier: GPL-3.0-or-later
"""Terminal progress for ansible-runner events: pure, fed one event dict at a time.

``ProgressPrinter.handle`` is given to ``ansible_runner.run(event_handler=...)``; tests feed it recorded
events. The number of tasks of a run cannot be known up front (includes, conditionals, handlers), so the
progress shows how many tasks are done, the current play and task, and the hosts that started it.

On a terminal one status line is rewritten in place; otherwise (CI logs) one line is printed per finished
task, with the hosts it ran on. Failures are printed at once, whatever the mode.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import TextIO

STAT_KEYS = ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")
# ansible's callback names -> the words of the play recap
RECAP_NAMES = {
    "ok": "ok",
    "changed": "changed",
    "failures": "failed",
    "dark": "unreachable",
    "skipped": "skipped",
    "rescued": "rescued",
    "ignored": "ignored",
}
TASK_START_EVENTS = ("playbook_on_task_start", "playbook_on_handler_task_start")
TAIL_LINES = 5
MSG_MAX = 600


@dataclass
class Failure:
    task: str
    host: str
    msg: str
    unreachable: bool = False

    def line(self) -> str:
        what = "unreachable: " if self.unreachable else ""
        return f"FAILED  task={self.task} host={self.host}: {what}{self.msg}"


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass
class _Task:
    label: str
    hosts: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _tail(text: Any, lines: int = TAIL_LINES) -> str:
    if isinstance(text, list):
        text = "\n".join(str(x) for x in text)
    if not isinstance(text, str) or not text.strip():
        return ""
    return " | ".join(line for line in text.strip().splitlines()[-lines:] if line.strip())


def failure_message(res: Any) -> str:
    """The most useful one-line message of a failed (or unreachable) task result."""
    if not isinstance(res, Mapping):
        return str(res)[:MSG_MAX] if res else "(no message)"
    results = res.get("results")
    if isinstance(results, list):
        for item in results:
            if isinstance(item, Mapping) and (item.get("failed") or item.get("unreachable")):
                label = item.get("_ansible_item_label", item.get("item"))
                inner = failure_message(item)
                return (f"item={label}: {inner}" if label is not None else inner)[:MSG_MAX]
    msg = res.get("msg")
    msg = msg.strip() if isinstance(msg, str) else ("" if msg is None else json.dumps(msg, default=str))
    output = _tail(res.get("stderr")) or _tail(res.get("stdout")) or _tail(res.get("module_stderr"))
    if msg and output and (msg.startswith("non-zero return code") or msg.startswith("MODULE FAILURE")):
        msg = f"{msg}: {output}"
    elif not msg:
        if output:
            msg = output
        elif "rc" in res:
            msg = f"rc={res['rc']}"
        else:
            shown = {k: v for k, v in res.items() if not str(k).startswith("_ansible")}
            msg = json.dumps(shown, default=str, sort_keys=True) if shown else "(no message)"
    return " ".join(msg.split())[:MSG_MAX]


def task_label(event_data: Mapping[str, Any]) -> str:
    """``role : task`` as ansible prints it (sub-file task names carry a ``file |`` prefix)."""
    name = str(event_data.get("task") or event_data.get("name") or "(unnamed task)").strip()
    role = str(event_data.get("role") or "").strip()
    return f"{role} : {name}" if role and not name.startswith(f"{role} : ") else name


class ProgressPrinter:
    """Turns ansible-runner events into progress lines, failures, and the final recap."""

    def __init__(self, stream: TextIO, *, tty: bool | None = None, width: int = 120) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.width = max(width, 40)
        self.play = ""
        self.tasks_done = 0
        self.task: _Task | None = None
        self.failures: list[Failure] = []
        self.stats: dict[str, HostStats] | None = None
        self.warnings: list[str] = []
        self.output_tail: deque[str] = deque(maxlen=20)  # non-callback output (ERROR! lines and such)
        self._status_shown = False

    # -- event intake ---------------------------------------------------------------------------------------
    def handle(self, event: Mapping[str, Any]) -> bool:
        """ansible-runner ``event_handler``: returns True so that runner keeps the event in the artifacts."""
        kind = str(event.get("event", ""))
        raw = event.get("event_data")
        data: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        if kind == "playbook_on_play_start":
            self._end_task()
            self.play = str(data.get("play") or data.get("name") or "").strip()
            if not self.tty:
                self._print(f"PLAY {self.play}" if self.play else "PLAY")
        elif kind in TASK_START_EVENTS:
            self._end_task()
            self.task = _Task(label=task_label(data))
            self._status()
        elif kind == "runner_on_start":
            self._host_started(data)
        elif kind in ("runner_on_ok", "runner_on_async_ok"):
            self._host_result(data, changed=_changed(data))
        elif kind == "runner_on_skipped":
            self._host_result(data, skipped=True)
        elif kind in ("runner_on_failed", "runner_on_async_failed"):
            if data.get("ignore_errors"):
                self._host_result(data)
            else:
                self._failed(data, unreachable=False)
        elif kind == "runner_on_unreachable":
            self._failed(data, unreachable=True)
        elif kind == "playbook_on_stats":
            self._end_task()
            self.stats = stats_from_event(data)
        elif kind == "warning":
            text = " ".join(str(event.get("stdout", "")).split())
            if text:
                self.warnings.append(text)
                self._print(text)
        elif kind in ("verbose", "error"):
            text = str(event.get("stdout", "")).strip()
            if text:
                self.output_tail.extend(text.splitlines())
        return True

    # -- results --------------------------------------------------------------------------------------
    @property
    def changed_total(self) -> int:
        return sum(s.changed for s in (self.stats or {}).values())

    @property
    def failed_total(self) -> int:
        if self.stats is None:
            return sum(1 for f in self.failures if not f.unreachable)
        return sum(s.failed for s in self.stats.values())

    @property
    def unreachable_total(self) -> int:
        if self.stats is None:
            return sum(1 for f in self.failures if f.unreachable)
        return sum(s.unreachable for s in self.stats.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "tasks_done": self.tasks_done,
            "changed": self.changed_total,
            "failed": self.failed_total,
            "unreachable": self.unreachable_total,
            "hosts": {h: asdict(s) for h, s in sorted((self.stats or {}).items())},
            "failures": [asdict(f) for f in self.failures],
        }

    def finish(self, *, status: str, rc: int, artifacts: str) -> None:
        """Print the play recap, the one-line summary and where the artifacts are."""
        self._end_task()
        self._clear_status()
        if self.stats:
            self._print("")
            self._print("PLAY RECAP")
            wide = max(len(h) for h in self.stats)
            for host, s in sorted(self.stats.items()):
                counts = " ".join(f"{name}={getattr(s, name)}" for name in asdict(s))
                self._print(f"  {host:<{wide}} : {counts}")
        elif rc != 0 and self.output_tail:
            self._print("ansible-playbook stopped before the play recap; its last output:")
            for line in self.output_tail:
                self._print(f"  {line}")
        self._print(
            f"changed={self.changed_total} failed={self.failed_total} unreachable={self.unreachable_total}"
            f" tasks={self.tasks_done} status={status} rc={rc}"
        )
        self._print(f"artifacts: {artifacts}")

    # -- internals -------------------------------------------------------------------------------------------
    def _host_started(self, data: Mapping[str, Any]) -> None:
        host = str(data.get("host", "?"))
        if self.task is None:  # a runner event without a task start (should not happen); make one up
            self.task = _Task(label=task_label(data))
        if host not in self.task.hosts:
            self.task.hosts.append(host)
        self._status()

    def _host_result(self, data: Mapping[str, Any], *, changed: bool = False, skipped: bool = False) -> None:
        if self.task is None:
            return
        host = str(data.get("host", "?"))
        if host not in self.task.hosts:
            self.task.hosts.append(host)
        if changed and host not in self.task.changed:
            self.task.changed.append(host)
        if skipped and host not in self.task.skipped:
            self.task.skipped.append(host)

    def _failed(self, data: Mapping[str, Any], *, unreachable: bool) -> None:
        failure = Failure(
            task=task_label(data) if data.get("task") else (self.task.label if self.task else "?"),
            host=str(data.get("host", "?")),
            msg=failure_message(data.get("res")),
            unreachable=unreachable,
        )
        self.failures.append(failure)
        self._clear_status()
        self._print(failure.line())
        self._status()

    def _end_task(self) -> None:
        if self.task is None:
            return
        self.tasks_done += 1
        if not self.tty:
            self._print(self._task_line(self.task))
        self.task = None

    def _task_line(self, task: _Task, *, running: bool = False) -> str:
        line = f"[{self.tasks_done:>3} done] "
        if running and self.play:
            line += f"{self.play} | "
        line += task.label
        if task.hosts:
            line += f"  ({', '.join(task.hosts)})"
        if not running:
            changed = [h for h in task.hosts if h in task.changed]  # in start order, like the hosts
            skipped = [h for h in task.hosts if h in task.skipped]
            if changed:
                line += f"  changed: {', '.join(changed)}"
            if skipped and len(skipped) < len(task.hosts):
                line += f"  skipped: {', '.join(skipped)}"
            elif task.skipped:
                line += "  skipped"
        return line

    def _status(self) -> None:
        if not self.tty or self.task is None:
            return
        line = self._task_line(self.task, running=True)
        if len(line) > self.width - 1:
            line = line[: self.width - 2] + "…"
        self.stream.write("\r\x1b[K" + line)
        self.stream.flush()
        self._status_shown = True

    def _clear_status(self) -> None:
        if self.tty and self._status_shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._status_shown = False

    def _print(self, line: str) -> None:
        self._clear_status()
        self.stream.write(line + "\n")
        self.stream.flush()


def _changed(data: Mapping[str, Any]) -> bool:
    res = data.get("res")
    return bool(isinstance(res, Mapping) and res.get("changed"))


def stats_from_event(data: Mapping[str, Any]) -> dict[str, HostStats]:
    """Per-host recap from a ``playbook_on_stats`` event's data."""
    hosts: dict[str, HostStats] = {}
    for key in STAT_KEYS:
        per_host = data.get(key)
        if not isinstance(per_host, Mapping):
            continue
        for host, count in per_host.items():
            stats = hosts.setdefault(str(host), HostStats())
            setattr(stats, RECAP_NAMES[key], int(count))
    processed = data.get("processed")
    if isinstance(processed, Mapping):
        for host in processed:
            hosts.setdefault(str(host), HostStats())
    return hosts
