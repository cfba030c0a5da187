# SPDX-License-Identifier: GPL-3.0-or-later
"""A shell inside the job, in the browser (issue 15), on the demo.

alice starts a JupyterLab session through the portal, connects (owner-checked proxy, session secret) and opens
JupyterLab's terminal from the launcher, in chromium. What she types there runs:

* as alice, in her login shell and home (passwd's, through SSSD), on the session's node, in the session's Slurm
  job (``SLURM_JOB_ID`` of her session, and the process is one of the job's: ``scontrol listpids`` on the node
  names it);
* only as long as the job: a background process started from the terminal is gone once she stops the session.

bob, logged in to the portal, cannot open a terminal in alice's session: the proxy refuses him before JupyterLab is
reached (and he has no session secret anyway).

What the test bed cannot show (docs/portal.md "Shell access"): the demo nodes track job processes with
``proctrack/linuxproc`` (no cgroup hierarchy can be delegated to the unprivileged demo containers), so a process
that detaches on purpose (double fork to PID 1) leaves the job; sites run ``proctrack/cgroup``, where it cannot.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import NODE_PREFIX
from tests.fixtures.demo import AliceSession
from tests.fixtures.demo import Demo
from tests.fixtures.demo import alice_session
from tests.fixtures.demo import apps_origin
from tests.fixtures.demo import connect
from tests.fixtures.demo import csrf_headers
from tests.fixtures.demo import job_report
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import proxied
from tests.fixtures.demo import run
from tests.fixtures.demo import start_jupyterlab
from tests.fixtures.demo import wait_gone
from tests.fixtures.demo import wait_session_ready

pytestmark = pytest.mark.e2e

READY_TIMEOUT_S = 300.0
MARK = "4242.5"  # the background process's argument, unlikely elsewhere on the node
OUT = "carme-e2e-shell.txt"  # in alice's home (shared by the nodes)


@pytest.fixture(scope="module")
def portal(demo: Demo) -> Iterator[AliceSession]:
    yield from alice_session(demo)


def on_node(node: str, *argv: str) -> str:
    done = run(["podman", "exec", NODE_PREFIX + node, *argv])
    return done.stdout


def node_of(job_id: int) -> str:
    return on_head("squeue", "--noheader", "--format=%N", "--jobs", str(job_id)).stdout.strip()


def test_alice_opens_a_terminal_in_her_session_and_it_runs_inside_her_job(portal: AliceSession) -> None:
    on_head("scancel", "--user", "alice")  # leftovers of an interrupted run
    page, _ = login(portal.demo, "alice")
    portal.alice = page
    api = page.context.request
    portal.job_id = job = start_jupyterlab(page, time_minutes=20)
    wait_session_ready(api, job, READY_TIMEOUT_S)
    node = node_of(job)
    home = on_head("getent", "passwd", "alice").stdout.split(":")[5]
    # a session is never requeued behind alice's back (its node lost: it ends instead); carme-launch sets it
    assert "Requeue=0" in on_head("scontrol", "show", "job", str(job)).stdout.split(), job_report(job)
    on_node(node, "runuser", "-u", "alice", "--", "rm", "-f", f"{home}/{OUT}")

    connect(api, job)
    lab = page.context.new_page()
    lab.goto(proxied(job, "lab?reset"))
    lab.wait_for_selector(".jp-LauncherCard", timeout=60_000)
    lab.click(".jp-LauncherCard[title*='terminal' i], .jp-LauncherCard:has-text('Terminal')")
    terminal = lab.wait_for_selector(".jp-Terminal .xterm", timeout=60_000)
    terminal.click()
    lab.wait_for_timeout(1000)  # the shell's prompt
    line = (
        f'echo "job=$SLURM_JOB_ID user=$(id -un) home=$HOME shell=$SHELL pid=$$" > {home}/{OUT}; '
        f"sleep {MARK} & echo started"
    )
    wrote = ""
    for _ in range(3):  # a terminal that was still connecting lost the keystrokes: type again
        lab.keyboard.type(line)
        lab.keyboard.press("Enter")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 15 and not wrote:
            wrote = on_node(node, "cat", f"{home}/{OUT}").strip()
            time.sleep(1)
        if wrote:
            break
    portal.demo.steps.shot(lab, "alice-terminal-in-session")
    assert wrote, f"the terminal wrote nothing to ~/{OUT} on {node}"
    fields = dict(kv.split("=", 1) for kv in wrote.split())
    assert fields["job"] == str(job), wrote  # the session's job, not a shell beside it
    assert fields["user"] == "alice", wrote
    # the login variables a REST submission leaves out (carme-launch adds them from passwd): cd ~ and bash work
    assert fields["home"] == home and fields["shell"] == "/bin/bash", wrote

    # the shell is one of the job's processes, as slurmd sees them (what it signals when the job ends)
    pids = on_node(node, "scontrol", "listpids", str(job)).split()
    assert fields["pid"] in pids, (fields, pids)
    assert on_node(node, "pgrep", "-u", "alice", "-f", f"sleep {MARK}").strip(), "the background process is missing"
    lab.close()


def test_bob_cannot_open_a_terminal_in_alices_session(portal: AliceSession) -> None:
    assert portal.job_id, "no session (previous step failed)"
    page, _ = login(portal.demo, "bob")
    try:
        api = page.context.request
        for method, path in (("post", "api/terminals"), ("get", "api/terminals"), ("get", "terminals/1")):
            resp = getattr(api, method)(proxied(portal.job_id, path), max_redirects=0)
            assert resp.status in (302, 403, 404), f"bob {method.upper()} /{path}: {resp.status}"
            if resp.status == 302:  # to the portal's login or connect page, never into the app
                assert not resp.headers.get("location", "").startswith(
                    f"{apps_origin(portal.job_id)}/proxy/{portal.job_id}/"
                ), resp.headers
        assert api.get(f"{BASE}/sessions/{portal.job_id}/connect", max_redirects=0).status in (302, 403, 404)
    finally:
        page.context.close()


def test_the_terminals_processes_end_with_the_session(portal: AliceSession) -> None:
    assert portal.job_id and portal.alice is not None, "no session (previous step failed)"
    node = node_of(portal.job_id)
    stop = portal.alice.context.request.post(
        f"{BASE}/api/sessions/{portal.job_id}/stop", headers=csrf_headers(portal.alice.context)
    )
    assert stop.status in (200, 202), stop.text()
    portal.stopped = True
    wait_gone(portal.job_id)
    deadline = time.monotonic() + 30
    while left := on_node(node, "pgrep", "-u", "alice", "-f", f"sleep {MARK}").strip():
        assert time.monotonic() < deadline, f"processes started from the terminal outlive the session: {left}"
        time.sleep(1)
