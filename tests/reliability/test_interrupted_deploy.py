# SPDX-License-Identifier: GPL-3.0-or-later
"""An interrupted ``site.yml`` run, then drift, then a re-run, on the live demo (issue 18).

The sysadmin's ``carme deploy`` (site.yml on the demo's inventory) dies ``INTERRUPT_AFTER_S`` seconds in: its whole
process group is killed (SIGKILL: a lost terminal or a dead laptop, not a polite Ctrl-C). Then the cluster drifts
as it does between runs: a line is added to ``slurm.conf`` on a compute node and its Zabbix agent is stopped.
The next ``carme deploy`` must:

* converge: finish with no failed and no unreachable host (whatever the killed run left half done);
* find and fix the drift: ``slurm.conf`` is back to the content the role renders (the same file as on the other
  node), and the agent runs again;
* leave a working cluster: a plain ``srun`` on that node runs as alice.

Bounded: ``INTERRUPT_AFTER_S`` plus at most ``DEPLOY_TIMEOUT_S``; it only runs ``carme deploy`` against the demo's
own containers and ``podman exec`` in them. Whatever happens, the agent is started again at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.fixtures.demo import NODE_PREFIX
from tests.fixtures.demo import REPO
from tests.fixtures.demo import Demo
from tests.fixtures.demo import on_head
from tests.fixtures.demo import run

pytestmark = pytest.mark.e2e

INTERRUPT_AFTER_S = 45.0
DEPLOY_TIMEOUT_S = 540.0
NODE, OTHER = "node1", "node2"
SLURM_CONF = "/etc/slurm/slurm.conf"
AGENT = "zabbix-agent2"
CARME = [str(REPO / ".venv" / "bin" / "carme"), "deploy"]


def on_node(node: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return run(["podman", "exec", NODE_PREFIX + node, *argv], timeout=120)


@pytest.fixture
def agent_started_afterwards(demo: Demo) -> Iterator[None]:
    yield
    on_node(NODE, "systemctl", "start", AGENT)


def test_a_rerun_after_an_interrupted_deploy_converges_and_fixes_drift(agent_started_afterwards: None) -> None:
    assert on_node(NODE, "systemctl", "is-active", AGENT).stdout.strip() == "active"
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    killed = subprocess.Popen(
        CARME, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        killed.wait(timeout=INTERRUPT_AFTER_S)
    except subprocess.TimeoutExpired:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    else:
        pytest.fail(f"carme deploy ended (rc {killed.returncode}) before it could be interrupted")

    on_node(NODE, "sh", "-c", f"echo '# drift: edited by hand' >> {SLURM_CONF}")
    assert on_node(NODE, "systemctl", "stop", AGENT).returncode == 0
    assert on_node(NODE, "cat", SLURM_CONF).stdout != on_node(OTHER, "cat", SLURM_CONF).stdout

    t0 = time.monotonic()
    rerun = subprocess.run(
        [*CARME, "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=DEPLOY_TIMEOUT_S, check=False
    )
    took = round(time.monotonic() - t0, 1)
    assert rerun.returncode == 0, rerun.stderr[-6000:]
    stats = json.loads(rerun.stdout[rerun.stdout.index("{") :])
    assert stats["failed"] == 0 and stats["unreachable"] == 0, stats["failures"]
    assert stats["hosts"][NODE]["changed"] >= 2, stats["hosts"]  # the file and the service, at least

    assert on_node(NODE, "cat", SLURM_CONF).stdout == on_node(OTHER, "cat", SLURM_CONF).stdout
    assert on_node(NODE, "systemctl", "is-active", AGENT).stdout.strip() == "active"
    probe = on_head(
        "runuser", "-u", "alice", "--", "srun", f"--nodelist={NODE}", "--time=1", "--immediate=60", "hostname",
        timeout=90,
    )  # fmt: skip
    assert probe.returncode == 0 and probe.stdout.strip() == NODE, (probe.stdout, probe.stderr)
    print(f"interrupted after {INTERRUPT_AFTER_S:.0f} s; the re-run took {took} s, changed {stats['changed']}")
