# SPDX-License-Identifier: GPL-3.0-or-later
"""ProgressPrinter fed with ansible-runner events (recorded from a real run, plus role-task events)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from carme_admin.progress import ProgressPrinter
from carme_admin.progress import failure_message
from carme_admin.progress import task_label

# Recorded by `carme deploy` on a 3-host localhost playbook (alpha, beta: local; gamma: ssh to a closed port),
# job_events trimmed to the fields the printer reads.
RECORDED = Path(__file__).parent / "data" / "events_failed_run.json"


def recorded_events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(RECORDED.read_text(encoding="utf-8"))
    return events


def feed(printer: ProgressPrinter, events: list[dict[str, Any]]) -> None:
    for event in events:
        assert printer.handle(event) is True  # runner keeps every event in the artifacts


def role_task_events() -> list[dict[str, Any]]:
    """A role task on three hosts, as ansible-runner's awx_display callback sends it."""
    task = {"playbook": "site.yml", "play": "Slurm cluster", "role": "slurm", "task": "config | Render slurm.conf"}
    events: list[dict[str, Any]] = [
        {"event": "playbook_on_play_start", "event_data": {"play": "Slurm cluster", "name": "Slurm cluster"}},
        {"event": "playbook_on_task_start", "event_data": {**task, "name": "slurm : config | Render slurm.conf"}},
    ]
    for host in ("head", "node1", "node2"):
        events.append({"event": "runner_on_start", "event_data": {**task, "host": host}})
    events += [
        {"event": "runner_on_ok", "event_data": {**task, "host": "head", "res": {"changed": True}}},
        {"event": "runner_on_ok", "event_data": {**task, "host": "node1", "res": {"changed": False}}},
        {"event": "runner_on_ok", "event_data": {**task, "host": "node2", "res": {"changed": True}}},
        {
            "event": "playbook_on_stats",
            "event_data": {
                "changed": {"head": 1, "node2": 1},
                "dark": {},
                "failures": {},
                "ignored": {},
                "ok": {"head": 1, "node1": 1, "node2": 1},
                "processed": {"head": 1, "node1": 1, "node2": 1},
                "rescued": {},
                "skipped": {},
            },
        },
    ]
    return events


def test_recorded_run_without_tty_prints_a_line_per_task_and_failures() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=False)
    feed(printer, recorded_events())
    printer.finish(status="failed", rc=4, artifacts="/p/.artifacts/runner/artifacts/x")
    lines = out.getvalue().splitlines()

    assert lines[0] == "PLAY Tiny play"
    assert "[  1 done] Say hello  (alpha, beta, gamma)  changed: alpha, beta" in lines
    assert "[  2 done] Skip on beta  (alpha, beta)  skipped: beta" in lines
    assert "[  4 done] Loop fail  (alpha)" in lines
    assert (
        "FAILED  task=Say hello host=gamma: unreachable: Task failed: Failed to connect to the host via ssh: "
        "ssh: connect to host 127.0.0.1 port 1: Connection refused"
    ) in lines
    # the failure comes at once, before the line that closes its task
    failed_beta = lines.index("FAILED  task=Fail on beta host=beta: non-zero return code: boom")
    assert failed_beta < lines.index("[  3 done] Fail on beta  (alpha, beta)  skipped: alpha")
    assert "FAILED  task=Loop fail host=alpha: item=/bin/false: non-zero return code" in lines

    assert "PLAY RECAP" in lines
    assert "  alpha : ok=2 changed=1 failed=1 unreachable=0 skipped=1 rescued=0 ignored=0" in lines
    assert "  gamma : ok=0 changed=0 failed=0 unreachable=1 skipped=0 rescued=0 ignored=0" in lines
    assert lines[-2] == "changed=2 failed=2 unreachable=1 tasks=4 status=failed rc=4"
    assert lines[-1] == "artifacts: /p/.artifacts/runner/artifacts/x"
    assert "\r" not in out.getvalue()


def test_recorded_run_totals_and_json() -> None:
    printer = ProgressPrinter(io.StringIO(), tty=False)
    feed(printer, recorded_events())
    data = printer.as_dict()
    assert (printer.changed_total, printer.failed_total, printer.unreachable_total) == (2, 2, 1)
    assert data["tasks_done"] == 4
    assert data["hosts"]["beta"] == {
        "ok": 1, "changed": 1, "failed": 1, "unreachable": 0, "skipped": 1, "rescued": 0, "ignored": 0,
    }  # fmt: skip
    assert [(f["task"], f["host"], f["unreachable"]) for f in data["failures"]] == [
        ("Say hello", "gamma", True),
        ("Fail on beta", "beta", False),
        ("Loop fail", "alpha", False),
    ]
    json.dumps(data)  # serialisable as is


def test_role_task_line_names_role_file_task_and_hosts() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=False)
    feed(printer, role_task_events())
    assert out.getvalue().splitlines() == [
        "PLAY Slurm cluster",
        "[  1 done] slurm : config | Render slurm.conf  (head, node1, node2)  changed: head, node2",
    ]
    assert printer.changed_total == 2
    assert printer.failed_total == 0


def test_tty_rewrites_one_status_line_with_play_task_and_hosts() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=True, width=200)
    feed(printer, role_task_events()[:5])  # play, task, three host starts
    text = out.getvalue()
    assert "\n" not in text  # nothing but the status line so far
    last = text.split("\r\x1b[K")[-1]
    assert last == "[  0 done] Slurm cluster | slurm : config | Render slurm.conf  (head, node1, node2)"

    feed(printer, role_task_events()[5:])
    printer.finish(status="successful", rc=0, artifacts="/a")
    final = out.getvalue().split("\r\x1b[K")[-1]  # the status line is cleared before the recap
    assert final.splitlines()[-2:] == [
        "changed=2 failed=0 unreachable=0 tasks=1 status=successful rc=0",
        "artifacts: /a",
    ]


def test_tty_status_line_is_cut_to_the_terminal_width() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=True, width=50)
    feed(printer, role_task_events()[:5])
    assert len(out.getvalue().split("\r\x1b[K")[-1]) <= 49


def test_tty_failure_is_printed_on_its_own_line_and_status_comes_back() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=True, width=200)
    events = role_task_events()[:5]
    task = events[1]["event_data"]
    events.append(
        {
            "event": "runner_on_failed",
            "event_data": {**task, "host": "node1", "res": {"msg": "AnsibleUndefinedVariable: slurm_x"}},
        }
    )
    feed(printer, events)
    text = out.getvalue()
    assert (
        "\r\x1b[KFAILED  task=slurm : config | Render slurm.conf host=node1: AnsibleUndefinedVariable: slurm_x\n"
        in text
    )
    assert text.endswith("(head, node1, node2)")  # the status line is drawn again


def test_ignored_errors_are_not_failures() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=False)
    feed(
        printer,
        [
            {"event": "playbook_on_task_start", "event_data": {"task": "Probe"}},
            {"event": "runner_on_start", "event_data": {"task": "Probe", "host": "head"}},
            {
                "event": "runner_on_failed",
                "event_data": {"task": "Probe", "host": "head", "ignore_errors": True, "res": {"msg": "no"}},
            },
        ],
    )
    assert "FAILED" not in out.getvalue()
    assert printer.failures == []


def test_handler_tasks_count_as_tasks() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=False)
    feed(
        printer,
        [
            {"event": "playbook_on_handler_task_start", "event_data": {"role": "slurm", "task": "Restart slurmctld"}},
            {"event": "runner_on_start", "event_data": {"role": "slurm", "task": "Restart slurmctld", "host": "head"}},
            {"event": "playbook_on_stats", "event_data": {"ok": {"head": 1}, "processed": {"head": 1}}},
        ],
    )
    assert out.getvalue().splitlines() == ["[  1 done] slurm : Restart slurmctld  (head)"]


def test_finish_without_stats_shows_ansibles_last_output() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, tty=False)
    feed(
        printer,
        [
            {"event": "verbose", "stdout": "ERROR! 'hsts' is not a valid attribute for a Play"},
            {"event": "verbose", "stdout": "The error appears to be in '/p/site.yml': line 2, column 3"},
        ],
    )
    printer.finish(status="failed", rc=4, artifacts="/a")
    text = out.getvalue()
    assert "ansible-playbook stopped before the play recap" in text
    assert "  ERROR! 'hsts' is not a valid attribute for a Play" in text
    assert "changed=0 failed=0 unreachable=0 tasks=0 status=failed rc=4" in text


def test_warnings_are_printed() -> None:
    out = io.StringIO()
    ProgressPrinter(out, tty=False).handle(
        {"event": "warning", "stdout": "[WARNING]: Could not match supplied host pattern"}
    )
    assert out.getvalue() == "[WARNING]: Could not match supplied host pattern\n"


@pytest.mark.parametrize(
    ("res", "expected"),
    [
        ({"msg": "Destination /etc/x not writable"}, "Destination /etc/x not writable"),
        (
            {"msg": "non-zero return code", "rc": 1, "stderr": "a\nb\nc\nd\ne\nE: Unable to locate package slurmd"},
            "non-zero return code: b | c | d | e | E: Unable to locate package slurmd",
        ),
        ({"rc": 2, "stdout": "first\nlast line"}, "first | last line"),
        ({"rc": 5}, "rc=5"),
        ({"msg": ["two", "parts"]}, '["two", "parts"]'),
        ({}, "(no message)"),
        (None, "(no message)"),
        (
            {
                "msg": "One or more items failed",
                "results": [{"item": "a", "failed": False}, {"item": "b", "failed": True, "msg": "bad b"}],
            },
            "item=b: bad b",
        ),
    ],
)
def test_failure_message(res: Any, expected: str) -> None:
    assert failure_message(res) == expected


def test_failure_message_is_one_bounded_line() -> None:
    msg = failure_message({"msg": "x\n" * 1000})
    assert "\n" not in msg
    assert len(msg) <= 600


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"role": "slurm", "task": "config | Render slurm.conf"}, "slurm : config | Render slurm.conf"),
        ({"role": "", "task": "Gathering Facts"}, "Gathering Facts"),
        ({"name": "common : Install base packages"}, "common : Install base packages"),
        ({}, "(unnamed task)"),
    ],
)
def test_task_label(data: dict[str, str], expected: str) -> None:
    assert task_label(data) == expected
