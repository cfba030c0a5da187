# SPDX-License-Identifier: GPL-3.0-or-later
"""A foreign job passes through the Carme hooks untouched, on a real Slurm (``host_slurm``), issue 15's acceptance.

A foreign job is a plain ``sbatch`` with no Carme marker (no ``carme:v1`` comment, no Carme feature asked for), as
a site whose Slurm Carme shares runs them. The node's Prolog/Epilog are the Carme hooks (fixture shims running this
checkout's ``carme-prolog``/``carme-epilog``, ``gpu_check = enforce``); the test proves that slurmd ran them for the
foreign job and that they changed nothing:

* its environment equals that of the same job run with the hooks turned off (only the per-job values differ: its id,
  its task's pid), and has no ``CARME_*`` variable;
* the node's locations the hooks write to (their log directory, the scratch root with a directory under the job's
  id that a Carme epilog would remove) are identical before and after; the node is not drained;
* its accounting keeps no comment and no admin comment (``sacct`` and ``scontrol show job``).

A Carme job run right after it (the positive control) gets all of it: a log line, its scratch directory removed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.fixtures.hostslurm import HostSlurm

pytestmark = [pytest.mark.host]

#: the job writes its whole environment, NUL-separated, next to its output
SCRIPT = '#!/bin/bash\nenv -0 > "$PWD/env-$SLURM_JOB_ID"\n'
#: per-job values: the job's id and its batch step's pid
PER_JOB = frozenset({"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_TASK_PID"})
JOB_ARGS = ("--job-name=foreign", "--mem=100", "--time=2", "--gres=gpu:1")
CARME_COMMENT = "carme:v1;app=test;state=submitted"


Snapshot = dict[str, tuple[int, int, int] | None]


def snapshot(*roots: Path) -> Snapshot:
    """Every path under ``roots`` with (mode, size, mtime_ns); ``None`` for a root that does not exist."""
    out: Snapshot = {}
    for root in roots:
        if not root.exists():
            out[str(root)] = None
            continue
        for path in [root, *sorted(root.rglob("*"))]:
            st = path.lstat()
            out[str(path)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def run_job(cluster: HostSlurm, *extra: str, watched: tuple[Path, ...] = ()) -> tuple[int, Snapshot, Snapshot]:
    """Submit ``SCRIPT`` held as bob, give it a scratch directory (``<scratch_root>/<job id>``, which a Carme epilog
    removes), snapshot ``watched``, release it, wait until it has finished, epilog included (slurmd reports
    COMPLETED only after the epilog), and snapshot ``watched`` again. Returns the job id and both snapshots."""
    job = cluster.sbatch("bob", SCRIPT, "--hold", *JOB_ARGS, *extra)
    (cluster.scratch_root / str(job)).mkdir()
    before = snapshot(*watched)
    cluster.run(["scontrol", "release", str(job)])
    assert cluster.wait_job(job) == "COMPLETED", cluster.log_tail("slurmd")
    return job, before, snapshot(*watched)


def job_env(cluster: HostSlurm, job: int) -> dict[str, str]:
    raw = (cluster.user_dir("bob") / f"env-{job}").read_text()
    return dict(item.split("=", 1) for item in raw.split("\0") if item)


def accounting_comments(cluster: HostSlurm, job: int) -> tuple[list[dict[str, str]], list[str]]:
    rows = cluster.sacct(job, fields=("JobID", "Comment", "AdminComment"))
    show = cluster.run(["scontrol", "show", "job", "-o", str(job)]).stdout.split()
    return rows, [t for t in show if t.startswith(("Comment=", "AdminComment="))]


def test_foreign_job_passes_through_the_hooks_untouched(host_slurm: HostSlurm) -> None:
    assert host_slurm.carme_log_dir is not None
    watched = (host_slurm.carme_log_dir, host_slurm.scratch_root, Path("/var/log/carme"), Path("/var/lib/carme"))

    with host_slurm.hooks_disabled():
        reference, _, _ = run_job(host_slurm)
    assert not host_slurm.hook_ran("prolog", reference)

    foreign, before, after = run_job(host_slurm, watched=watched)
    assert host_slurm.hook_ran("prolog", foreign) and host_slurm.hook_ran("epilog", foreign)

    # environment: the same as without hooks, no CARME_* variable
    env, ref = job_env(host_slurm, foreign), job_env(host_slurm, reference)
    assert sorted(env) == sorted(ref), set(env) ^ set(ref)
    assert {k: v for k, v in env.items() if k not in PER_JOB} == {k: v for k, v in ref.items() if k not in PER_JOB}
    # (sbatch exports the submitter's environment: CARME_* of the test run itself, e.g. CI's, come along as they are)
    assert not [k for k in env if k.startswith("CARME_") and os.environ.get(k) != env[k]]

    # node: nothing created, changed or removed where the hooks write; the job's scratch directory is still there
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed == set(), {k: (before.get(k), after.get(k)) for k in changed}
    assert (host_slurm.scratch_root / str(foreign)).is_dir()
    assert not (host_slurm.carme_log_dir / f"{foreign}.log").exists()
    state = host_slurm.node_state()
    assert "DRAIN" not in state and "DOWN" not in state, state

    # accounting: no comment, no admin comment
    rows, show = accounting_comments(host_slurm, foreign)
    assert rows and all(row["Comment"] == "" and row["AdminComment"] == "" for row in rows), rows
    assert all(token.endswith("=(null)") for token in show), show

    # positive control: the same job marked as a Carme session gets the hooks' work
    carme, _, _ = run_job(host_slurm, f"--comment={CARME_COMMENT}")
    deadline = time.monotonic() + 30
    log = host_slurm.carme_log_dir / f"{carme}.log"
    while time.monotonic() < deadline and not (log.exists() and "epilog" in log.read_text()):
        time.sleep(0.3)
    text = log.read_text()
    assert f"prolog job={carme} user=bob" in text and f"epilog job={carme} user=bob" in text, text
    assert not (host_slurm.scratch_root / str(carme)).exists()
    for job in (reference, foreign):
        os.rmdir(host_slurm.scratch_root / str(job))
