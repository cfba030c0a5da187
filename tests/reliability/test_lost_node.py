# SPDX-License-Identifier: GPL-3.0-or-later
"""A lost node on the live demo (issue 18): alice's session's node is killed outright while she watches.

alice has a running JupyterLab session on one node (the others drained while it starts). Her node's container is
killed (``podman kill``: no shutdown, slurmd and her app vanish at once). Then:

* within ``NOTICED_S`` her dashboard and ``/api/sessions`` (200 all along, never a 5xx) say that the session's node
  is not responding, and offer no Connect (slurmctld pings nodes every SlurmdTimeout/3 seconds);
* the node's container is started again (systemd boots it, slurmd registers; it keeps its address, as a real node
  does: the demo's nodes have fixed ones, roles/demo_nodes): within ``ENDED_S`` the session ends, ``NODE_FAIL``, and
  the portal keeps it listed saying its node failed;
* it is never requeued behind alice's back: at no look is the job PENDING again, and Slurm records no restart
  (sessions have ``Requeue=0``);
* the node returns to service by itself (``ReturnToService=2``) within ``BACK_S``, and a new job runs on it.

Bounded: at most ``READY_TIMEOUT_S`` (tests/fixtures/reliability.py) ``+ NOTICED_S + ENDED_S + BACK_S`` seconds;
requests only to the demo's published ports on 127.0.0.1 and ``podman`` commands on the demo's own containers.
The node is started again whatever happens.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import NODE_PREFIX
from tests.fixtures.demo import job_report
from tests.fixtures.demo import on_head
from tests.fixtures.demo import run
from tests.fixtures.reliability import NODE
from tests.fixtures.reliability import job_fields
from tests.fixtures.reliability import session_view
from tests.fixtures.reliability import sinfo_state

pytestmark = pytest.mark.e2e

NOTICED_S = 150.0  # two ping intervals (the demo's SlurmdTimeout 120 s / 3) and the portal's snapshot, with room
ENDED_S = 240.0  # after the node is back: slurmd registers, slurmctld ends the jobs it no longer runs
BACK_S = 240.0


def test_a_lost_node_is_shown_ends_the_session_without_requeue_and_rejoins(alice_on_node: tuple[Any, int]) -> None:
    page, job_id = alice_on_node
    api = page.context.request
    assert "Requeue=0" in on_head("scontrol", "show", "job", str(job_id)).stdout.split()
    looks: list[tuple[float, str, int, dict[str, Any] | None]] = []

    def look(t0: float) -> tuple[int, dict[str, Any] | None]:
        status, view = session_view(api, job_id)
        looks.append((round(time.monotonic() - t0, 1), job_fields(job_id).get("JobState", "gone"), status, view))
        assert status == 200, f"/api/sessions answered {status}: {looks[-3:]}"
        assert not (view and view["state"] == "PENDING"), f"the session was requeued: {looks[-3:]}"
        return status, view

    address = on_head("getent", "hosts", NODE).stdout.split()[:1]
    killed = run(["podman", "kill", NODE_PREFIX + NODE])
    assert killed.returncode == 0, killed.stderr
    t0 = time.monotonic()
    while True:
        _status, view = look(t0)
        if view and "not responding" in view["reason"]:
            assert not view["ready"] and view["connect_url"] is None, view
            break
        assert time.monotonic() - t0 < NOTICED_S, f"no 'not responding' after {NOTICED_S:.0f} s: {looks[-3:]}"
        time.sleep(3)
    noticed_s = looks[-1][0]
    dashboard = page.goto(f"{BASE}/")
    assert dashboard is not None and dashboard.status == 200
    assert f"{NODE} is not responding" in page.inner_text(f"tr[data-job='{job_id}']")

    started = run(["podman", "start", NODE_PREFIX + NODE], timeout=120)
    assert started.returncode == 0, started.stderr
    t1 = time.monotonic()
    # No `scontrol reconfigure`: a real node comes back with its address, and so does the demo's (on Slurm 24.11 a
    # reconfigure restarts slurmctld, which then waits for the next registration to end the lost job).
    assert on_head("getent", "hosts", NODE).stdout.split()[:1] == address, "the node came back with another address"
    while True:
        _status, view = look(t0)
        if view and view["state"] == "NODE_FAIL":
            assert "node failed" in view["reason"], view
            break
        assert time.monotonic() - t1 < ENDED_S, f"the session did not end {ENDED_S:.0f} s after: {looks[-3:]}"
        time.sleep(3)
    ended_s = round(time.monotonic() - t1, 1)
    assert job_fields(job_id).get("Restarts") in ("0", None), job_report(job_id)
    page.goto(f"{BASE}/")
    assert "node failed" in page.inner_text(f"tr[data-job='{job_id}']")

    while (state := sinfo_state(NODE)) not in ("idle", "mixed", "allocated"):
        assert time.monotonic() - t1 < ENDED_S + BACK_S, f"{NODE} is {state!r}, not back in service"
        time.sleep(3)
    probe = on_head(
        "runuser",
        "-u",
        "alice",
        "--",
        "srun",
        f"--nodelist={NODE}",
        "--time=1",
        "--immediate=60",
        "hostname",
        timeout=90,
    )
    assert probe.returncode == 0, (probe.stdout, probe.stderr)
    print(f"lost node: noticed after {noticed_s} s, ended {ended_s} s after the node's restart")
