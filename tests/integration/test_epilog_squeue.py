# SPDX-License-Identifier: GPL-3.0-or-later
"""The epilog's question to Slurm, asked of a real Slurm 22.05 (``host_slurm``): ``squeue`` in text, filtered by node
and user (22.05's ``--json`` ignored both filters), read by the epilog's own parser, through the runtime's runner.

The leftover rule built on it is checked end to end on the demo's Slurm 24.11
(``tests/e2e/test_epilog_leftovers_e2e.py``); the host's test cluster runs its hooks without killing leftovers (its
uids are shared with the machine), so here the question and its answer are checked alone.
"""

from __future__ import annotations

import time

import pytest

from carme_runtime.command_runner import SubprocessRunner
from carme_runtime.job_cleanup import other_active_jobs
from carme_runtime.job_cleanup import squeue_node_user_argv
from tests.fixtures.hostslurm import HostSlurm

pytestmark = [pytest.mark.host]


def ask(cluster: HostSlurm, node: str, user: str) -> tuple[int, str, str]:
    return SubprocessRunner(timeout=30)(squeue_node_user_argv(node, user), env=cluster.env)


def test_squeue_names_only_the_users_jobs_on_the_node(host_slurm: HostSlurm) -> None:
    running = host_slurm.sbatch("bob", "sleep 120\n", "--mem=100", "--time=3")
    held = host_slurm.sbatch("bob", "sleep 1\n", "--mem=100", "--time=3", "--hold")
    other_user = host_slurm.sbatch("carol", "sleep 120\n", "--mem=100", "--time=3")
    try:
        deadline = time.monotonic() + 60
        while host_slurm.job_state(running) != "RUNNING":
            assert time.monotonic() < deadline, host_slurm.job_state(running)
            time.sleep(0.5)
        rc, out, err = ask(host_slurm, host_slurm.node, "bob")
        assert rc == 0, err
        lines = out.splitlines()
        assert f"{running} RUNNING" in lines, out
        assert all(line.split()[0] != str(other_user) for line in lines), out  # carol's job: filtered by Slurm
        assert other_active_jobs(out, own_job_id=0) == [running]  # the held job holds nothing on the node
        assert other_active_jobs(out, own_job_id=running) == []  # its own epilog: no other job
        rc, out, err = ask(host_slurm, host_slurm.node, "dave")
        assert (rc, out) == (0, ""), err
        rc, _out, _err = ask(host_slurm, "no-such-node", "bob")
        assert rc != 0  # the epilog keeps the processes when squeue fails
    finally:
        host_slurm.run(["scancel", str(running), str(held), str(other_user)], check=False)
