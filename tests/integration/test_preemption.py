# SPDX-License-Identifier: GPL-3.0-or-later
"""Instant interactive access by preemption, against a real slurmctld and slurmdbd (``host_slurm``).

The policy is the demo's (inventories/demo/group_vars/all/slurm.yml), scaled to this one-node cluster and applied by
the slurm role's ``slurm_accounting`` module: ``pre-batch`` is where plain sbatch lands (everyone's default QOS,
``PreemptMode=requeue``, ``GraceTime=0`` as on the demo), ``pre-inter`` is the portal's session QOS
(``Preempt=pre-batch``, 1 GPU per user). The fixture's slurm.conf has ``PreemptType=preempt/qos`` and
``PreemptMode=REQUEUE``, rendered by the role's templates. With the node filled by bob's batch jobs:

* alice's job in the session QOS starts within 30 s (about 2 s measured); bob's job whose resources it took is
  requeued (pending again, ``Restarts=1``, the earlier run ``PREEMPTED`` in sacct), not lost; his other job runs on;
* preemption does not get past a limit: alice's second 1-GPU job pends on ``QOSMaxGRESPerUser`` and preempts nothing;
* a job in the session QOS never preempts another: carol's pends while alice's runs on, never selected;
* with a ``GraceTime`` on the batch QOS, the preempted job keeps running for that time and is requeued only at
  slurmctld's next periodic time-limit check (every 30 s in 22.05): the session waits up to GraceTime + 30 s, which
  is why the demo's batch QOS has none (roles/slurm/README.md "Preemption").

The users' associations are restored and the QOS deleted at the end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from tests.fixtures.hostslurm import ACCOUNT
from tests.fixtures.hostslurm import CLUSTER
from tests.fixtures.hostslurm import HostSlurm
from tests.roles.harness import ModuleRun
from tests.roles.harness import run_module

pytestmark = [pytest.mark.host, pytest.mark.slow]

BATCH = "pre-batch"
INTER = "pre-inter"
GRACE_S = 10
QOS = [
    {"name": BATCH, "Flags": "DenyOnLimit", "PreemptMode": "requeue", "GraceTime": 0},
    {"name": INTER, "Flags": "DenyOnLimit", "MaxTRESPerUser": "gres/gpu=1", "Preempt": [BATCH]},
]
USERS = ("alice", "bob", "carol")
START_BOUND_S = 30.0
#: slurmctld checks time limits, and so the end of a grace time, every 30 s (PERIODIC_TIMEOUT in 22.05)
PERIODIC_S = 30.0


def apply(cluster: HostSlurm, *, check: bool = False, grace_s: int = 0) -> ModuleRun:
    users = [{"name": u, "account": ACCOUNT, "qos": [BATCH, INTER], "default_qos": BATCH} for u in USERS]
    qos = [QOS[0] | {"GraceTime": grace_s}, QOS[1]]
    args = {"cluster": CLUSTER, "qos": qos, "users": users, "purge_users": False}
    run = run_module("slurm", "slurm_accounting", args, check=check, env={"SLURM_CONF": str(cluster.slurm_conf)})
    assert run.rc == 0, run.output
    return run


def job(cluster: HostSlurm, job_id: int) -> dict[str, str]:
    """``scontrol show job -o`` as a dict (JobState, Reason, Restarts, PreemptTime, QOS, ...)."""
    out = cluster.run(["scontrol", "show", "job", "-o", str(job_id)], check=False).stdout
    return dict(token.split("=", 1) for token in out.split() if "=" in token)


def submit(cluster: HostSlurm, user: str, *args: str, script: str = "sleep 600") -> int:
    return cluster.sbatch(user, script, "--mem=100", "--time=10", *args)


def wait_for(cluster: HostSlurm, job_id: int, state: str, timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    info = job(cluster, job_id)
    while info.get("JobState") != state and time.monotonic() < deadline:
        time.sleep(0.2)
        info = job(cluster, job_id)
    return info


def judged(cluster: HostSlurm, job_id: int, timeout: float = 30) -> dict[str, str]:
    """Wait until the scheduler has looked at a pending job (its Reason is no longer ``None``)."""
    deadline = time.monotonic() + timeout
    info = job(cluster, job_id)
    while info.get("JobState") == "PENDING" and info.get("Reason") == "None" and time.monotonic() < deadline:
        time.sleep(0.5)
        info = job(cluster, job_id)
    return info


def cpus() -> int:
    return os.cpu_count() or 1


def fill_with_batch_jobs(cluster: HostSlurm, script: str = "sleep 600") -> list[int]:
    """bob's batch jobs in his default QOS, one per CPU: the node is full."""
    jobs = [submit(cluster, "bob", "--cpus-per-task=1", script=script) for _ in range(cpus())]
    for job_id in jobs:
        info = wait_for(cluster, job_id, "RUNNING", 60)
        assert info.get("JobState") == "RUNNING" and info.get("QOS") == BATCH, info
    assert cluster.node_state().startswith("ALLOCATED"), cluster.node_state()
    return jobs


def requeued(cluster: HostSlurm, job_id: int) -> bool:
    info = job(cluster, job_id)
    return info.get("JobState") == "PENDING" and int(info.get("Restarts", "0")) >= 1


def sacct_runs(cluster: HostSlurm, job_id: int) -> list[str]:
    """The states of every run of a job that slurmdbd recorded (``--duplicates``: a requeued job's earlier runs)."""
    argv = ["sacct", "-j", str(job_id), "--duplicates", "--allocations", "--noheader", "--parsable2",
            "--format=JobID,State"]  # fmt: skip
    out = cluster.run(argv).stdout
    return [line.split("|")[1] for line in out.splitlines() if line.strip()]


def clean_queue(cluster: HostSlurm) -> None:
    for user in USERS:
        cluster.run(["scancel", "-u", user], check=False)
    deadline = time.monotonic() + 60
    while cluster.run(["squeue", "--noheader", "-u", ",".join(USERS)], check=False).stdout.strip():
        assert time.monotonic() < deadline, "jobs did not leave the queue"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def policy(host_slurm: HostSlurm) -> Iterator[HostSlurm]:
    try:
        yield host_slurm
    finally:
        clean_queue(host_slurm)
        for user in USERS:
            where = ["where", f"name={user}", f"account={ACCOUNT}"]
            host_slurm.sacctmgr("modify", "user", *where, "set", "QOS=normal", "DefaultQOS=normal")
        host_slurm.run(["sacctmgr", "-i", "delete", "qos", INTER, BATCH], check=False)


@pytest.fixture
def cluster(policy: HostSlurm) -> Iterator[HostSlurm]:
    apply(policy)
    clean_queue(policy)
    try:
        yield policy
    finally:
        clean_queue(policy)


def qos_fields(cluster: HostSlurm, name: str) -> dict[str, str]:
    fields = ["name", "preempt", "preemptmode", "gracetime"]
    argv = ["sacctmgr", "-n", "-P", "show", "qos", name, "format=" + ",".join(fields)]
    return dict(zip(fields, cluster.run(argv).stdout.strip().split("|"), strict=True))


def test_module_applies_the_preemption_policy_dry_run_and_idempotent(policy: HostSlurm) -> None:
    policy.run(["sacctmgr", "-i", "delete", "qos", INTER, BATCH], check=False)
    dry = apply(policy, check=True)
    assert dry.result["changed"], dry.output
    assert BATCH not in policy.run(["sacctmgr", "-n", "-P", "show", "qos", "format=name"]).stdout.split()
    run = apply(policy, grace_s=GRACE_S)
    assert run.result["changed"], run.output
    batch = {"name": BATCH, "preempt": "", "preemptmode": "requeue", "gracetime": "00:00:10"}
    assert qos_fields(policy, BATCH) == batch
    inter = {"name": INTER, "preempt": BATCH, "preemptmode": "cluster", "gracetime": "00:00:00"}
    assert qos_fields(policy, INTER) == inter
    again = apply(policy, grace_s=GRACE_S)
    assert not again.result["changed"], again.result.get("commands")
    back = apply(policy)  # the demo's policy: no grace time
    assert back.result["diff"]["after"]["qos"] == {BATCH: {"GraceTime": 0}}, back.result["diff"]
    assert qos_fields(policy, BATCH)["gracetime"] == "00:00:00"


def test_a_session_job_preempts_batch_work_which_is_requeued_not_lost(cluster: HostSlurm) -> None:
    bobs = fill_with_batch_jobs(cluster)
    t0 = time.monotonic()
    alice = submit(cluster, "alice", f"--qos={INTER}", "--cpus-per-task=1", "--gres=gpu:1")
    info = wait_for(cluster, alice, "RUNNING", START_BOUND_S)
    started_s = time.monotonic() - t0
    assert info.get("JobState") == "RUNNING", f"alice's job not running after {START_BOUND_S} s: {info}"
    print(f"alice's session job started {started_s:.1f} s after submission")  # the measured bound

    deadline = time.monotonic() + 30
    while not any(requeued(cluster, b) for b in bobs):
        assert time.monotonic() < deadline, [job(cluster, b) for b in bobs]
        time.sleep(0.5)
    states = {b: job(cluster, b) for b in bobs}
    taken = [b for b, i in states.items() if i.get("JobState") == "PENDING"]
    running = [b for b, i in states.items() if i.get("JobState") == "RUNNING"]
    assert len(taken) == 1 and len(running) == len(bobs) - 1, states  # one CPU was needed: one job was preempted
    again = states[taken[0]]
    assert again["Restarts"] == "1" and again["Reason"] in ("BeginTime", "None", "Priority", "Resources"), again
    assert all(states[b]["Restarts"] == "0" for b in running), states
    deadline = time.monotonic() + 60  # slurmdbd learns of the earlier run asynchronously
    while "PREEMPTED" not in (runs := sacct_runs(cluster, taken[0])) and "REQUEUED" not in runs:
        assert time.monotonic() < deadline, runs
        time.sleep(1)
    assert runs[0] in ("PREEMPTED", "REQUEUED") and set(runs[1:]) <= {"PENDING", "REQUEUED"}, runs
    assert requeued(cluster, taken[0]), job(cluster, taken[0])  # and the job is still there, to run again

    # a second 1-GPU job of alice is over the session QOS's limit: it waits on the limit and preempts nothing
    second = submit(cluster, "alice", f"--qos={INTER}", "--cpus-per-task=1", "--gres=gpu:1")
    held = judged(cluster, second)
    assert (held.get("JobState"), held.get("Reason")) == ("PENDING", "QOSMaxGRESPerUser"), held
    time.sleep(10)
    for b in running:
        info = job(cluster, b)
        assert info.get("JobState") == "RUNNING" and info.get("PreemptTime") == "None", info


def test_a_session_job_never_preempts_another_session_job(cluster: HostSlurm) -> None:
    bobs = fill_with_batch_jobs(cluster)
    alice = submit(cluster, "alice", f"--qos={INTER}", f"--cpus-per-task={cpus()}", "--gres=gpu:1")
    assert wait_for(cluster, alice, "RUNNING", START_BOUND_S).get("JobState") == "RUNNING", job(cluster, alice)
    deadline = time.monotonic() + 30
    while not all(requeued(cluster, b) for b in bobs):  # the whole node was needed: every batch job went back
        assert time.monotonic() < deadline, [job(cluster, b) for b in bobs]
        time.sleep(0.5)

    carol = submit(cluster, "carol", f"--qos={INTER}", "--cpus-per-task=1")
    info = judged(cluster, carol)
    assert info.get("JobState") == "PENDING" and info.get("Reason") in ("Resources", "Priority"), info
    time.sleep(15)  # a preemption would have been chosen at the first pass: alice's job is never selected
    mine = job(cluster, alice)
    assert mine.get("JobState") == "RUNNING" and mine.get("PreemptTime") == "None", mine
    assert mine.get("Restarts") == "0", mine
    assert job(cluster, carol).get("JobState") == "PENDING", job(cluster, carol)
    assert all(requeued(cluster, b) for b in bobs), [job(cluster, b) for b in bobs]  # still queued, not lost


def test_with_a_grace_time_the_batch_job_runs_on_for_it_then_is_requeued(cluster: HostSlurm) -> None:
    apply(cluster, grace_s=GRACE_S)
    try:
        bobs = fill_with_batch_jobs(cluster)
        t0 = time.monotonic()
        alice = submit(cluster, "alice", f"--qos={INTER}", "--cpus-per-task=1")
        info = wait_for(cluster, alice, "RUNNING", GRACE_S + PERIODIC_S + 15)
        started_s = time.monotonic() - t0
    finally:
        apply(cluster)
    assert info.get("JobState") == "RUNNING", f"{info}\n{cluster.log_tail('slurmctld')}"
    print(f"alice's job started {started_s:.1f} s after submission, with GraceTime={GRACE_S}")
    assert started_s >= GRACE_S - 1, f"the batch job lost its {GRACE_S} s grace time: alice started after {started_s}"
    taken = [b for b in bobs if requeued(cluster, b)]
    assert len(taken) == 1, [job(cluster, b) for b in bobs]
    assert "DUE TO PREEMPTION" in read_output(cluster, taken[0]), read_output(cluster, taken[0])


def read_output(cluster: HostSlurm, job_id: int) -> str:
    path = cluster.user_dir("bob") / f"slurm-{job_id}.out"
    return path.read_text() if path.exists() else ""
