# SPDX-License-Identifier: GPL-3.0-or-later
"""slurmd stopped on the node of alice's running session, on the live demo (issue 18).

alice has a ready JupyterLab session on ``NODE`` and has connected to it (apps cookie). slurmd is stopped on that node
(``systemctl stop slurmd``: the job's slurmstepd and her app go on, as on a real node whose slurmd crashed or is being
upgraded). Then, at every look (about every 3 s):

* the portal answers 200 (never a 5xx) and lists the session in Slurm's real state: RUNNING, never PENDING again
  (not requeued behind her back);
* her app answers 200 through the proxy all along: her work is not interrupted;
* within ``NOTICED_S`` (at most two of slurmctld's ping intervals, SlurmdTimeout/3 each) the portal says the node is not
  responding and offers no Connect.

slurmd is started again. Within ``BACK_S`` the node answers slurmctld again, the same job is still RUNNING with no
restart, the portal offers Connect again, and the app answers 200 through the proxy.

Bounded: at most ``READY_TIMEOUT_S`` (tests/fixtures/reliability.py) ``+ NOTICED_S + BACK_S`` seconds; requests only
to the demo's published ports on 127.0.0.1 and ``podman exec`` in the demo's own containers. slurmd is started again
whatever happens.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.fixtures.demo import NODE_PREFIX
from tests.fixtures.demo import connect
from tests.fixtures.demo import job_report
from tests.fixtures.demo import on_head
from tests.fixtures.demo import proxied
from tests.fixtures.demo import run
from tests.fixtures.reliability import NODE
from tests.fixtures.reliability import job_fields
from tests.fixtures.reliability import session_view

pytestmark = pytest.mark.e2e

# slurmctld pings every SlurmdTimeout/3 (40 s on the demo: inventories/demo/group_vars/all/slurm.yml) but skips a
# node that answered within the last interval: a slurmd stopped just after a ping is asked again two intervals later
# (80 s), flagged when that ping fails (MessageTimeout, 10 s), then shown at the portal's next snapshot. With
# Slurm's default SlurmdTimeout (300 s), 151 s and over 182 s were seen on a loaded CI machine.
NOTICED_S = 150.0
BACK_S = 60.0


def node_flags(node: str) -> str:
    shown = on_head("scontrol", "show", "node", node).stdout
    return dict(token.split("=", 1) for token in shown.split() if "=" in token).get("State", "")


def test_a_stopped_slurmd_keeps_the_session_running_is_shown_and_the_node_returns(
    alice_on_node: tuple[Any, int],
) -> None:
    page, job_id = alice_on_node
    api = page.context.request
    connect(api, job_id)
    looks: list[tuple[float, str, int, int, str]] = []

    def look(t0: float) -> dict[str, Any]:
        status, view = session_view(api, job_id)
        app = api.get(proxied(job_id, "api/status"), max_redirects=0, timeout=15_000).status
        state = job_fields(job_id).get("JobState", "gone")
        looks.append((round(time.monotonic() - t0, 1), state, status, app, view["reason"] if view else "not listed"))
        assert status == 200, f"/api/sessions answered {status}: {looks[-3:]}"
        assert view is not None, f"the session is no longer listed: {looks[-3:]}"
        assert view["state"] == "RUNNING" and state == "RUNNING", f"not RUNNING: {looks[-3:]}\n{job_report(job_id)}"
        assert app == 200, f"the app does not answer through the proxy: {looks[-3:]}"
        return view

    stopped = run(["podman", "exec", NODE_PREFIX + NODE, "systemctl", "stop", "slurmd"])
    assert stopped.returncode == 0, stopped.stderr
    t0 = time.monotonic()
    while True:
        view = look(t0)
        if "not responding" in view["reason"]:
            assert not view["ready"] and view["connect_url"] is None, view
            break
        assert time.monotonic() - t0 < NOTICED_S, f"no 'not responding' after {NOTICED_S:.0f} s: {looks[-3:]}"
        time.sleep(3)
    noticed_s = looks[-1][0]
    assert "NOT_RESPONDING" in node_flags(NODE)

    started = run(["podman", "exec", NODE_PREFIX + NODE, "systemctl", "start", "slurmd"], timeout=120)
    assert started.returncode == 0, started.stderr
    t1 = time.monotonic()
    while True:
        view = look(t0)
        if view["ready"] and view["connect_url"] and "NOT_RESPONDING" not in node_flags(NODE):
            break
        assert time.monotonic() - t1 < BACK_S, f"not back {BACK_S:.0f} s after slurmd started: {looks[-3:]}"
        time.sleep(1)
    back_s = round(time.monotonic() - t1, 1)
    assert job_fields(job_id).get("Restarts") in ("0", None), job_report(job_id)
    connect(api, job_id)
    assert api.get(proxied(job_id, "api/status"), max_redirects=0).status == 200
    print(f"slurmd stopped: noticed after {noticed_s} s, back {back_s} s after slurmd started, {len(looks)} looks")
