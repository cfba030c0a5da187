# SPDX-License-Identifier: GPL-3.0-or-later
"""BeeOND: a BeeGFS built for one job over its nodes' local disks.

How a job asks for it: the Slurm node feature ``beeond`` (``beeond_feature``), which the site gives the nodes that
have a local disk for it (``slurm_node_groups[].features``). A job asks with ``sbatch --constraint=beeond`` (also
``--constraint="beeond&a100"``); slurmd hands the prolog and epilog the job's constraints in
``SLURM_JOB_CONSTRAINTS`` and its nodes in ``SLURM_JOB_NODELIST``. A constraint that only offers ``beeond`` as an
alternative (``beeond|a100``) does not ask for it.

Life cycle (nothing here runs unless ``beeond`` is true in the node's runtime.json):

* prolog, every node of such a job: write ``<state_dir>/<job>.json`` and ``<job>.nodes`` (the node list), so any of
  the job's nodes can later stop an instance whose first node died;
* prolog, the job's first node: ``beeond start -n <nodes> -d <data_root>/<job> -c <mount_root>/<job> -P`` (BeeOND
  starts the services on every node over pdsh, as root), then hands the mount's top directory to the job's user
  (0700). If that fails, the partial instance is stopped and the job is cancelled with an AdminComment that says why;
  the prolog still exits 0, so the node is never drained for it;
* the job's tasks: ``carme-task-prolog`` (Slurm ``TaskProlog=``) exports ``CARME_BEEOND=<mount_root>/<job>`` when the
  file system is mounted on the task's node;
* epilog, the job's first node: ``beeond stop -n <nodes> -L -d -P -c`` (services, logs and data on every node); the
  state is forgotten only when the stop succeeded;
* stale instances: every prolog and epilog on a BeeOND node looks at the local state files. An instance whose job is
  gone (``squeue`` answers "Invalid job id") and whose mount is still mounted here is stopped over its recorded
  nodes; a state whose mount is no longer mounted here is just forgotten. While Slurm cannot say (slurmctld down) the
  instance is kept.

Every command goes through a :class:`~carme_runtime.command_runner.Runner` (argv lists); mount checks and chown are
parameters, so the orchestration is tested with the stand-in ``tests/fixtures/bin/beeond``.
"""

from __future__ import annotations

import contextlib
import os
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from collections.abc import Mapping

    from carme_runtime.command_runner import Runner
    from carme_runtime.config import RuntimeConfig
    from carme_runtime.job import JobContext

#: env var the task prolog exports to the job's tasks
ENV_VAR = "CARME_BEEOND"

_OR_GROUP = re.compile(r"[^&,\[\]()]*\|[^&,\[\]()]*")
_TOKEN = re.compile(r"[A-Za-z0-9_.-]+")


def _one_line(text: str, limit: int) -> str:
    """A command's error output as one short line (it ends up in a log line and in the job's AdminComment)."""
    return " ".join(text.split())[:limit]


def requested(constraints: str, feature: str) -> bool:
    """Whether a job's constraint expression requires ``feature`` (alternatives joined by ``|`` do not require it)."""
    if not feature or not constraints:
        return False
    required = _OR_GROUP.sub(" ", constraints)
    return feature in _TOKEN.findall(required)


def job_nodes(env: Mapping[str, str]) -> list[str]:
    from carme_runtime.hostlist import HostlistError
    from carme_runtime.hostlist import expand_hostlist

    try:
        return expand_hostlist(env.get("SLURM_JOB_NODELIST", ""))
    except HostlistError:
        return []


def mount_point(cfg: RuntimeConfig, job_id: int) -> str:
    return os.path.join(cfg.beeond_mount_root, str(job_id))


def data_dir(cfg: RuntimeConfig, job_id: int) -> str:
    return os.path.join(cfg.beeond_data_root, str(job_id))


def _state_paths(cfg: RuntimeConfig, job_id: int) -> tuple[str, str]:
    base = os.path.join(cfg.beeond_state_dir, str(job_id))
    return base + ".json", base + ".nodes"


def start_argv(cfg: RuntimeConfig, job_id: int, nodefile: str) -> list[str]:
    """``beeond start`` over the nodes in ``nodefile``: data on each node's local disk, the client mount on each."""
    return [
        cfg.beeond_bin,
        "start",
        "-n",
        nodefile,
        "-d",
        data_dir(cfg, job_id),
        "-c",
        mount_point(cfg, job_id),
        "-P",
    ]


def stop_argv(cfg: RuntimeConfig, nodefile: str) -> list[str]:
    """``beeond stop`` on every node: unmount, stop the services, delete logs (-L) and data (-d), clean up (-c)."""
    return [cfg.beeond_bin, "stop", "-n", nodefile, "-L", "-d", "-P", "-c"]


def _write(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def record(cfg: RuntimeConfig, ctx: JobContext, nodes: list[str]) -> str:
    """Write this node's state for the job's instance; return the node file's path."""
    import json

    os.makedirs(cfg.beeond_state_dir, mode=0o700, exist_ok=True)
    state, nodefile = _state_paths(cfg, ctx.job_id)
    _write(nodefile, "".join(f"{n}\n" for n in nodes))
    info = {"job_id": ctx.job_id, "user": ctx.user, "mount": mount_point(cfg, ctx.job_id), "nodefile": nodefile}
    _write(state, json.dumps(info, sort_keys=True) + "\n")
    return nodefile


def forget(cfg: RuntimeConfig, job_id: int) -> None:
    for path in _state_paths(cfg, job_id):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def recorded_jobs(cfg: RuntimeConfig) -> list[int]:
    try:
        names = os.listdir(cfg.beeond_state_dir)
    except OSError:
        return []
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


def job_gone(job_id: int, runner: Runner) -> bool | None:
    """True when Slurm no longer knows the job or it has finished; None when Slurm cannot say."""
    from carme_runtime.slurm_formats import UNFINISHED_STATES

    rc, out, err = runner(["squeue", "-h", "-j", str(job_id), "-o", "%T"])
    if rc == 0:
        states = {s.strip() for s in out.splitlines() if s.strip()}
        return not (states & UNFINISHED_STATES)
    if "invalid job id" in err.lower():
        return True
    return None


def clean_stale(
    cfg: RuntimeConfig, current_job: int, runner: Runner, beeond_runner: Runner, is_mounted: Callable[[str], bool]
) -> list[str]:
    """Stop instances of finished jobs still mounted on this node; forget the states of unmounted ones.

    ``runner`` asks Slurm (``squeue``), ``beeond_runner`` runs ``beeond`` (a longer timeout).
    """
    outcomes = []
    for job_id in recorded_jobs(cfg):
        if job_id == current_job:
            continue
        _state, nodefile = _state_paths(cfg, job_id)
        if not is_mounted(mount_point(cfg, job_id)):
            forget(cfg, job_id)
            outcomes.append(f"{job_id}:forgotten")
            continue
        gone = job_gone(job_id, runner)
        if gone is None:
            outcomes.append(f"{job_id}:kept(slurm unreachable)")
            continue
        if not gone:
            outcomes.append(f"{job_id}:kept(running)")
            continue
        rc, _out, err = beeond_runner(stop_argv(cfg, nodefile))
        if rc == 0:
            forget(cfg, job_id)
            outcomes.append(f"{job_id}:stale-stopped")
        else:
            outcomes.append(f"{job_id}:stale-stop-failed(rc{rc}:{_one_line(err, 80)})")
    return outcomes


class StartResult:
    """What the prolog did: ``outcome`` for the log; ``error`` set when the job must be failed."""

    __slots__ = ("error", "outcome")

    def __init__(self, outcome: str, error: str = "") -> None:
        self.outcome = outcome
        self.error = error


def _own(path: str, uid: int) -> None:
    os.chown(path, uid, -1)
    os.chmod(path, 0o700)


def prolog(
    ctx: JobContext,
    env: Mapping[str, str],
    cfg: RuntimeConfig,
    runner: Runner,
    beeond_runner: Runner,
    *,
    is_mounted: Callable[[str], bool] = os.path.ismount,
    own: Callable[[str, int], None] | None = None,
) -> StartResult:
    """The prolog's BeeOND part on one node (see the module docstring)."""
    stale = clean_stale(cfg, ctx.job_id, runner, beeond_runner, is_mounted)
    stale_s = f" stale={','.join(stale)}" if stale else ""
    if not requested(env.get("SLURM_JOB_CONSTRAINTS", ""), cfg.beeond_feature):
        return StartResult(f"not-requested{stale_s}")
    nodes = job_nodes(env)
    if not nodes:
        return StartResult(f"failed{stale_s}", "BeeOND: the job's node list is missing or unreadable")
    try:
        nodefile = record(cfg, ctx, nodes)
    except OSError as exc:
        return StartResult(f"failed{stale_s}", f"BeeOND: cannot write its state on {ctx.node}: {exc.strerror}")
    if ctx.node != nodes[0]:
        return StartResult(f"recorded(first={nodes[0]}){stale_s}")
    mount = mount_point(cfg, ctx.job_id)
    rc, _out, err = beeond_runner(start_argv(cfg, ctx.job_id, nodefile))
    why = f"beeond start rc={rc}: {_one_line(err, 160)}" if rc != 0 else ""
    if not why:
        try:
            (own or _own)(mount, ctx.uid)
        except OSError as exc:
            why = f"cannot hand {mount} to {ctx.user}: {exc.strerror}"
    if not why:
        return StartResult(f"started({mount} on {len(nodes)} nodes){stale_s}")
    stop_rc, _o, _e = beeond_runner(stop_argv(cfg, nodefile))
    if stop_rc == 0:
        forget(cfg, ctx.job_id)
    return StartResult(
        f"start-failed({why}; cleanup {'ok' if stop_rc == 0 else f'rc{stop_rc}'}){stale_s}",
        f"BeeOND could not start on {ctx.node}: {why}",
    )


def epilog(
    ctx: JobContext,
    env: Mapping[str, str],
    cfg: RuntimeConfig,
    runner: Runner,
    beeond_runner: Runner,
    *,
    is_mounted: Callable[[str], bool] = os.path.ismount,
) -> str:
    """The epilog's BeeOND part on one node: the first node stops the instance; every node cleans stale ones."""
    stale = clean_stale(cfg, ctx.job_id, runner, beeond_runner, is_mounted)
    stale_s = f" stale={','.join(stale)}" if stale else ""
    state, nodefile = _state_paths(cfg, ctx.job_id)
    if not os.path.exists(state):
        return f"none{stale_s}"
    nodes = job_nodes(env)
    if nodes and ctx.node != nodes[0]:
        if not is_mounted(mount_point(cfg, ctx.job_id)):
            forget(cfg, ctx.job_id)
        return f"left-to-first-node({nodes[0]}){stale_s}"
    rc, _out, err = beeond_runner(stop_argv(cfg, nodefile))
    if rc != 0:
        return f"stop-failed(rc{rc}: {_one_line(err, 120)}; kept for the stale cleanup){stale_s}"
    forget(cfg, ctx.job_id)
    return f"stopped{stale_s}"


def task_prolog_lines(env: Mapping[str, str], cfg: RuntimeConfig, is_mounted: Callable[[str], bool]) -> list[str]:
    """Lines for Slurm's ``TaskProlog=`` stdout: ``export CARME_BEEOND=<mount>`` when the job's BeeOND is mounted."""
    job_id = env.get("SLURM_JOB_ID", "")
    if not cfg.beeond or not job_id.isdigit():
        return []
    mount = mount_point(cfg, int(job_id))
    return [f"export {ENV_VAR}={mount}"] if is_mounted(mount) else []
