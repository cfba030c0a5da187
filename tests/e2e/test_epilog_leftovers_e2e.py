# SPDX-License-Identifier: GPL-3.0-or-later
"""The epilog's leftover rule on the demo's real Slurm, through the shims the role installed (issue 32 changed both:
the shim runs the venv's interpreter itself, the epilog asks ``squeue`` for text rather than ``--json``).

A user's process on a node that no job of hers holds any more is killed by the epilog of her last Carme job there,
and kept while another job of hers still runs on that node. alice's stray process is started the way a careless
user leaves one: by hand on the node (``setsid``, outside any job), so Slurm's own process tracking never sees it.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.fixtures.demo import NODE_PREFIX
from tests.fixtures.demo import Demo
from tests.fixtures.demo import on_head
from tests.fixtures.demo import run
from tests.fixtures.demo import wait_job_end

pytestmark = pytest.mark.e2e

NODE = "node1"
COMMENT = "--comment=carme:v1;app=test;state=submitted"
#: the stray process's command line: unique, so the test finds exactly its own
STRAY = "sleep 86399"


def on_node(*argv: str) -> str:
    done = run(["podman", "exec", NODE_PREFIX + NODE, *argv])
    assert done.returncode in (0, 1), done.stderr  # pgrep: 1 = nothing found
    return done.stdout


def stray_pids() -> list[str]:
    return on_node("pgrep", "-u", "alice", "-f", f"^{STRAY}$").split()


def sbatch_alice(seconds: int) -> str:
    partition = on_head("sinfo", "--noheader", "--format=%P").stdout.split()[0].rstrip("*")
    done = on_head(
        "su", "-s", "/bin/sh", "alice", "-c",
        f"cd /tmp && sbatch --parsable --nodelist={NODE} --partition={partition} '{COMMENT}' --time=5 "
        f"--wrap='sleep {seconds}'",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def hook_log(job_id: str) -> str:
    return on_node("cat", f"/var/log/carme/{job_id}.log")


def no_job_of_alice_left(timeout_s: float = 120) -> None:
    """Wait until alice has no job in the queue, completing ones included: the epilog of an earlier test's job would
    kill the stray process this test starts (rightly: alice would have no other job on the node)."""
    deadline = time.monotonic() + timeout_s
    while on_head("squeue", "--noheader", "--user", "alice").stdout.strip():
        assert time.monotonic() < deadline, on_head("squeue", "--user", "alice").stdout
        time.sleep(1)


def test_a_stray_process_is_kept_while_another_job_runs_and_killed_after_the_last(demo: Demo) -> None:
    on_head("scancel", "--user", "alice")  # the jobs of earlier tests, and leftovers of an interrupted run
    no_job_of_alice_left()
    on_node("pkill", "-u", "alice", "-f", f"^{STRAY}$")
    on_node("su", "-s", "/bin/sh", "alice", "-c", f"setsid {STRAY} </dev/null >/dev/null 2>&1 &")
    deadline = time.monotonic() + 10
    while not stray_pids():
        assert time.monotonic() < deadline, "the stray process did not start"
        time.sleep(0.5)
    stray = stray_pids()
    try:
        long_job = sbatch_alice(90)
        short_job = sbatch_alice(2)
        assert wait_job_end(short_job, 120) == "COMPLETED"
        assert f"leftovers=kept (user has other jobs on {NODE}: [{long_job}])" in hook_log(short_job), hook_log(
            short_job
        )
        assert stray_pids() == stray, "the epilog killed alice's process while her other job still ran there"
        on_head("scancel", long_job)
        wait_job_end(long_job, 120)
        deadline = time.monotonic() + 30
        while "epilog" not in hook_log(long_job):
            assert time.monotonic() < deadline, hook_log(long_job)
            time.sleep(1)
        assert re.search(rf"leftovers=killed [1-9][0-9]* \(no other job of alice on {NODE}\)", hook_log(long_job))
        assert stray_pids() == []
    finally:
        on_node("pkill", "-u", "alice", "-f", f"^{STRAY}$")
        on_head("scancel", "--user", "alice")
