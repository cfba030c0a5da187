# SPDX-License-Identifier: GPL-3.0-or-later
"""Whole-node jobs against GPU limits, with plain ``sbatch --exclusive`` on real Slurm (``host_slurm``).

A job with ``--exclusive`` is given every GPU of its nodes whether it asks for them or not, and Slurm counts them
against the QOS and association GPU limits only when it schedules the job: without the slurm role's
``job_submit.lua`` such a job over the user's limit pends forever as ``QOSMaxGRESPerUser`` (measured here, Slurm
22.05.8, and on the Debian 12 demo). The script writes the nodes' GPUs into the request at submit, so the QOS flag
``DenyOnLimit`` refuses it there, naming the limit (roles/slurm/README.md "Limits"). The one node here has 4 GPUs:

* over a QOS limit of 2 GPUs per user, plain ``sbatch --exclusive`` (with or without GPUs, tasks, ``--gpus``) is
  refused at submit with ``QOSMaxGRESPerUser`` and the script's line saying that the job holds all 4 GPUs; over the
  association's ``GrpTRES`` it is refused with ``AssocGrpGRES``;
* within the limits (a QOS of 4 GPUs per user) it runs and holds the 4 GPUs, as it would without the script;
* a partition with ``OverSubscribe=EXCLUSIVE`` makes a plain ``sbatch`` count the same way;
* jobs that share nodes are not changed: ``--gres=gpu:1`` and ``--exclusive=user`` keep what they ask for.

bob's association is restored and the QOS are deleted at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.fixtures.hostslurm import ACCOUNT
from tests.fixtures.hostslurm import HostSlurm

pytestmark = [pytest.mark.host, pytest.mark.slow]

USER = "bob"
NARROW = "exc-narrow"  # 2 GPUs per user: fewer than one node has
WIDE = "exc-wide"  # 4 GPUs per user: one whole node
REFUSED = "Job violates accounting/QOS policy"
HOLDS_ALL = "a whole-node job (--exclusive) holds all 4 GPUs of its 1 node(s)"


def sacctmgr_user(cluster: HostSlurm, *settings: str) -> None:
    cluster.sacctmgr("modify", "user", "where", f"name={USER}", f"account={ACCOUNT}", "set", *settings)


def submit(cluster: HostSlurm, *args: str) -> tuple[int | None, str]:
    """Plain sbatch as bob; (job id, sbatch's messages) when accepted, (None, sbatch's error) when refused."""
    argv = ["sbatch", "--parsable", f"--chdir={cluster.user_dir(USER)}", "--output=/dev/null", "--mem=100",
            "--time=5", *args, "--wrap=sleep 300"]  # fmt: skip
    proc = cluster.run(argv, user=USER, check=False)
    if proc.returncode == 0:
        return int(proc.stdout.strip().split(";")[0]), proc.stderr.strip()
    return None, proc.stderr.strip()


def job_fields(cluster: HostSlurm, job: int) -> dict[str, str]:
    out = cluster.run(["scontrol", "show", "job", "-o", str(job)], check=False).stdout
    return dict(token.split("=", 1) for token in out.split() if "=" in token)


def wait_running(cluster: HostSlurm, job: int, timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    fields = job_fields(cluster, job)
    while fields.get("JobState") != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
        fields = job_fields(cluster, job)
    return fields


@pytest.fixture(scope="module")
def cluster(host_slurm: HostSlurm) -> Iterator[HostSlurm]:
    """The role's job_submit.lua, rendered by the harness with the role's templates, active in slurmctld; bob in
    both QOS, ``exc-narrow`` his default, with an association total of 4 GPUs."""
    assert (host_slurm.conf_dir / "job_submit.lua").is_file(), "the slurm role did not render job_submit.lua"
    shown = host_slurm.run(["scontrol", "show", "config"]).stdout
    assert any(line.split() == ["JobSubmitPlugins", "=", "lua"] for line in shown.splitlines()), shown
    for name, gpus in ((NARROW, 2), (WIDE, 4)):
        host_slurm.sacctmgr("add", "qos", name, "Flags=DenyOnLimit", f"MaxTRESPerUser=gres/gpu={gpus}")
    sacctmgr_user(host_slurm, f"QOS=normal,{NARROW},{WIDE}", f"DefaultQOS={NARROW}", "GrpTRES=gres/gpu=4")
    try:
        yield host_slurm
    finally:
        host_slurm.run(["scancel", "-u", USER], check=False)
        time.sleep(2)
        sacctmgr_user(host_slurm, "QOS=normal", "DefaultQOS=normal", "GrpTRES=gres/gpu=-1")
        host_slurm.run(["sacctmgr", "-i", "delete", "qos", NARROW, WIDE], check=False)


@pytest.fixture
def queue(cluster: HostSlurm) -> Iterator[HostSlurm]:
    """bob's jobs are gone after each test (an exclusive job holds the only node)."""
    try:
        yield cluster
    finally:
        cluster.run(["scancel", "-u", USER], check=False)
        deadline = time.monotonic() + 30
        while cluster.run(["squeue", "--noheader", "-u", USER], check=False).stdout.strip():
            assert time.monotonic() < deadline, "bob's jobs did not leave the queue"
            time.sleep(0.5)


@pytest.mark.parametrize(
    "args",
    [(), ("-n2",), ("--gres=gpu:1",), ("--gpus=1",), (f"--qos={NARROW}", "--gpus-per-node=2")],
    ids=["plain", "tasks", "gres", "gpus", "per-node"],
)
def test_exclusive_over_a_qos_gpu_limit_is_refused_at_submit_naming_the_limit(
    queue: HostSlurm, args: tuple[str, ...]
) -> None:
    job, error = submit(queue, "--exclusive", *args)
    assert job is None, f"sbatch --exclusive {' '.join(args)} was accepted (job {job}, {job_fields(queue, job)})"
    assert "QOSMaxGRESPerUser" in error and REFUSED in error and HOLDS_ALL in error, error


def test_exclusive_over_the_association_gpu_total_is_refused_at_submit(queue: HostSlurm) -> None:
    sacctmgr_user(queue, "GrpTRES=gres/gpu=3")
    try:
        job, error = submit(queue, "--exclusive", f"--qos={WIDE}")
    finally:
        sacctmgr_user(queue, "GrpTRES=gres/gpu=4")
    assert job is None and "AssocGrpGRES" in error and REFUSED in error, error


def test_every_job_of_an_exclusive_partition_counts_as_whole_nodes(queue: HostSlurm) -> None:
    """``OverSubscribe=EXCLUSIVE`` makes every job of the partition exclusive, ``--exclusive`` or not."""
    queue.run(["scontrol", "update", "PartitionName=debug", "OverSubscribe=EXCLUSIVE"])
    try:
        job, error = submit(queue)
    finally:
        queue.run(["scontrol", "update", "PartitionName=debug", "OverSubscribe=NO"])
    assert job is None and "QOSMaxGRESPerUser" in error and HOLDS_ALL in error, error


def test_exclusive_within_the_limits_runs_with_every_gpu_of_its_node(queue: HostSlurm) -> None:
    job, messages = submit(queue, "--exclusive", f"--qos={WIDE}")
    assert job is not None, messages
    assert HOLDS_ALL in messages, messages
    fields = wait_running(queue, job)
    assert fields.get("JobState") == "RUNNING", fields
    assert "gres/gpu=4" in fields.get("TRES", ""), fields  # what Slurm allocates to a whole node, script or not
    assert fields.get("TresPerNode", "").endswith("gpu:4"), fields


def test_jobs_that_share_nodes_keep_what_they_ask_for(queue: HostSlurm) -> None:
    one, messages = submit(queue, "--gres=gpu:1")
    user, user_messages = submit(queue, "--exclusive=user", "--gres=gpu:1")
    assert one is not None and user is not None, (messages, user_messages)
    assert HOLDS_ALL not in messages + user_messages
    for job in (one, user):
        fields = wait_running(queue, job)
        assert fields.get("JobState") == "RUNNING", fields
        assert "gres/gpu=1" in fields.get("TRES", ""), fields
