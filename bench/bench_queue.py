# SPDX-License-Identifier: GPL-3.0-or-later
"""A big cluster behind the demo's portal, for bench/bench_portal.py ``--queue N --nodes M`` (issue 32).

The dashboard must not cost more when Slurm's queue is long or the cluster large, beyond what it reads. The demo has
two nodes and a handful of jobs, so for the run this module makes the head's slurmctld see a big site:

* **M nodes declared**: the demo's two plus ``M - 2`` that do not exist, appended to the head's slurm.conf as
  ``NodeName=benchdown[...] State=DOWN`` (shown by slurmrestd, as a broken node of a real site is; not in any
  partition, so nothing is scheduled there; their address is the head's loopback at a port where nothing listens,
  so slurmctld's pings of them stay in the head), with ``MaxJobCount`` raised for the queue; slurmctld restarted. The
  nodes' own slurm.conf is left alone (slurmctld logs a hash mismatch, nothing else).
* **N held jobs** of the bench users (``sbatch --hold``, job name ``carme-bench-queue``), spread evenly, submitted
  in parallel in the head; each user's association gets ``MaxSubmitJobs`` high enough for its share first.

:func:`restore` undoes both (``scancel`` of the bench's jobs by name, the slurm.conf as it was, slurmctld restarted)
and runs first too, for an interrupted earlier run; so whatever happens the demo ends as it was (the cancelled jobs
stay in slurmctld's memory for MinJobAge, 300 s by default, as any finished job does).
"""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Callable
from typing import Any

OnHead = Callable[..., subprocess.CompletedProcess[str]]

SLURM_CONF = "/etc/slurm/slurm.conf"
BACKUP = "/etc/slurm/slurm.conf.carme-bench"  # present only while a bench run holds the head's slurm.conf
JOB_NAME = "carme-bench-queue"
MAX_QUEUE = 20000
MAX_NODES = 5000
PARALLEL = 8  # sbatch processes at once in the head
SETTLE_S = 15.0  # after the last submission, before the measured run


def marker_lines(nodes: int, queue: int) -> str:
    """What the run appends to slurm.conf: the nodes that do not exist and room for the queue."""
    extra = nodes - 2
    lines = ["", "# bench/bench_queue.py (removed after the run): declared nodes that do not exist"]
    if extra > 0:
        lines.append(
            f"NodeName=benchdown[0001-{extra:04d}] NodeAddr=127.0.0.1 Port=6899 CPUs=1 RealMemory=1000 State=DOWN "
            'Reason="bench: declared, not present"'
        )
    lines.append(f"MaxJobCount={max(10000, 2 * queue + 1000)}")
    return "\n".join(lines) + "\n"


def _wait_ctld(on_head: OnHead, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while on_head(["scontrol", "ping"], check=False).stdout.count("UP") < 1:
        if time.monotonic() > deadline:
            raise RuntimeError("slurmctld did not answer scontrol ping after its restart")
        time.sleep(1)


def restore(on_head: OnHead) -> dict[str, Any]:
    """The bench's jobs cancelled, slurm.conf as before the run, slurmctld restarted (only where a run had changed
    it). Each step is tried even when another fails."""
    done: dict[str, Any] = {}
    try:
        ids = on_head(["squeue", "-h", "-n", JOB_NAME, "-o", "%i"], check=False).stdout.split()
        if ids:
            on_head(["scancel", "-n", JOB_NAME], timeout=300)
        done["jobs_cancelled"] = len(ids)
    except Exception as exc:  # go on with the configuration
        done["jobs_cancelled"] = f"failed: {exc}"
    try:
        if on_head(["test", "-f", BACKUP], check=False).returncode == 0:
            on_head(["mv", "-f", BACKUP, SLURM_CONF])
            on_head(["systemctl", "restart", "slurmctld"], timeout=180)
            _wait_ctld(on_head)
            done["slurm_conf"] = "restored, slurmctld restarted"
        else:
            done["slurm_conf"] = "unchanged"
    except Exception as exc:
        done["slurm_conf"] = f"failed: {exc}"
    return done


def wait_purged(on_head: OnHead, timeout: float = 480) -> dict[str, Any]:
    """Until slurmctld holds none of the bench's jobs (an earlier run's, cancelled: finished jobs stay in its memory
    for MinJobAge and every read of the queue returns them), so that the runs before the big cluster measure the demo
    as it is."""
    t0 = time.monotonic()
    while True:
        shown = on_head(["scontrol", "-o", "show", "job"], check=False, timeout=120).stdout
        left = shown.count(f"JobName={JOB_NAME} ")
        if not left:
            return {"purged_after_s": round(time.monotonic() - t0, 1)}
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{left} jobs {JOB_NAME} still in slurmctld's memory after {timeout:.0f} s")
        time.sleep(10)


def declare_nodes(on_head: OnHead, nodes: int, queue: int) -> dict[str, Any]:
    """Append the declared nodes and MaxJobCount to the head's slurm.conf (a copy kept) and restart slurmctld."""
    t0 = time.monotonic()
    on_head(["cp", "-p", SLURM_CONF, BACKUP])
    on_head(["sh", "-c", f"cat >> {SLURM_CONF}"], stdin=marker_lines(nodes, queue))
    on_head(["systemctl", "restart", "slurmctld"], timeout=180)
    _wait_ctld(on_head)
    declared = on_head(["scontrol", "show", "node", "-o"], check=False, timeout=120).stdout.count("NodeName=")
    return {"declared_nodes": declared, "restart_s": round(time.monotonic() - t0, 1)}


SUBMIT = r"""
set -u
per=$1; account=$2; shift 2
printf '%s\n' "$@" | xargs -P {parallel} -I{{}} runuser -u {{}} -- sh -c '
  cd /tmp && i=0 && while [ $i -lt '"$per"' ]; do
    sbatch --hold --parsable -J {job} -A '"$account"' -t 10 -o /dev/null --wrap true >/dev/null || exit 1
    i=$((i + 1))
  done'
"""


def fill(on_head: OnHead, users: list[str], queue: int, account: str) -> dict[str, Any]:
    """``queue`` held jobs, ``ceil(queue / len(users))`` of each user (the last ones fewer are not trimmed: the
    count is reported as Slurm shows it)."""
    per = math.ceil(queue / len(users))
    names = "name=" + ",".join(users)
    on_head(["sacctmgr", "-i", "modify", "user", "where", names, "set", f"MaxSubmitJobs={per + 20}"], timeout=180)
    t0 = time.monotonic()
    script = SUBMIT.format(parallel=PARALLEL, job=JOB_NAME)
    proc = on_head(["bash", "-c", script, "submit", str(per), account, *users], check=False, timeout=1200)
    queued = len(on_head(["squeue", "-h", "-n", JOB_NAME, "-o", "%i"], timeout=120).stdout.split())
    if proc.returncode != 0 and queued < queue:
        raise RuntimeError(f"sbatch of the bench's queue failed after {queued} jobs: {proc.stderr.strip()[-600:]}")
    took = time.monotonic() - t0
    total = len(on_head(["squeue", "-h", "-o", "%i"], timeout=120).stdout.split())
    return {"queued_jobs": queued, "jobs_in_queue": total, "per_user": per, "submit_s": round(took, 1),
            "submit_per_s": round(queued / took, 1) if took else None}  # fmt: skip


# In the head: each query of the portal's cluster-state refresh alone (curl as the portal's service user, the API
# version its adapter chose: time and size of the answer), then the portal's own refresh (its client, its timeout).
READS = r"""
set -u
py() { runuser -u carme-portal -- /opt/carme/webui-venv/bin/python "$@"; }
T=$(py -c 'import sys; from webui.slurm.jwt_tokens import TokenSource
print(TokenSource(sys.argv[1]).token(sys.argv[2]))' /etc/carme/webui/jwt_hs256.key carme-portal)
V=$(py -c 'from webui import create_app
print(create_app().extensions["carme_scheduler"].client.api_for("carme-portal").version)')
for e in jobs nodes partitions reservations; do for i in 1 2; do
  curl -s -o /dev/null -m 120 -w "$e %{http_code} %{time_total} %{size_download}\n" \
    -H "X-SLURM-USER-NAME: carme-portal" -H "X-SLURM-USER-TOKEN: $T" "http://127.0.0.1:6820/slurm/$V/$e"
done; done
py - <<'PY'
import time
from webui import create_app
app = create_app()
with app.app_context():
    sched = app.extensions["carme_scheduler"]
    for _ in range(2):
        t = time.monotonic()
        try:
            state = sched._fetch()
            print(f"portal_state_fetch ok {time.monotonic() - t:.3f} jobs={len(state.jobs)} nodes={len(state.nodes)}")
        except Exception as exc:
            print(f"portal_state_fetch failed {time.monotonic() - t:.3f} {type(exc).__name__}: {exc}")
PY
"""


def read_costs(on_head: OnHead, settings: str) -> dict[str, Any]:
    """Seconds and bytes of each slurmrestd answer the portal's refresh asks for, and the refresh itself."""
    out = on_head(["bash", "-c", READS], env={"CARME_WEBUI_CONFIG": settings}, check=False, timeout=900).stdout
    reads: dict[str, Any] = {}
    for line in out.splitlines():
        word = line.split(" ", 3)
        if word[0] == "portal_state_fetch":
            reads.setdefault("portal_state_fetch", []).append(line.partition(" ")[2])
        elif len(word) == 4 and word[1].isdigit():
            reads.setdefault(word[0], []).append({"http": int(word[1]), "s": float(word[2]), "bytes": int(word[3])})
    return reads
