"""Slurm prolog and epilog logic (called by ``carme-prolog`` / ``carme-epilog``).

Exit-code policy. slurmd drains the node when ``Prolog=`` exits non-zero (and requeues+holds a batch
job); a non-zero ``Epilog=`` exit drains it too (both verified on Slurm 22.05.8, see
``/work/shared/notes/services-on-ci.md`` section 3). A user's mistake must never drain a node, so:

* a malformed environment (missing/non-numeric ``SLURM_JOB_ID``...) logs one clear line and exits 0;
* a GPU isolation mismatch fails the **job**, not the node: the prolog exits 0 after setting the job's
  ``AdminComment`` and cancelling it with ``scancel <jobid>`` (argv, through the runner). Requeueing was
  rejected: the job would likely land on the same node again and loop. Cancelling is visible to the user
  (``sacct`` state CANCELLED, AdminComment says why) and leaves the node in service for other jobs;
  the log line in ``/var/log/carme/<jobid>.log`` gives the admin the details;
* every other problem (unreadable cgroup, Slurm command failing, log dir not writable) is logged and the
  hook still exits 0.
* a BeeOND instance the job asked for (``--constraint=beeond``, :mod:`carme_runtime.beeond`) that cannot start
  fails the job the same way (AdminComment, ``scancel``), never the node.

Only Carme's jobs are touched (:func:`carme_job`): a foreign job (a plain ``sbatch`` on a site whose Slurm Carme
shares) returns before anything is logged, created, killed or run, so its environment, node and accounting stay as
the site's own Slurm leaves them.

Slurm's documentation advises against calling Slurm commands from Prolog/Epilog; this module only does
it on the rare mismatch path (prolog) and once per job for ``squeue`` in the epilog, which the
leftover-process rule needs; on BeeOND nodes ``squeue`` also runs for a recorded instance that is still mounted
after its job should have stopped it (the stale-instance check).
"""

from __future__ import annotations

import os
import sys
import time

from carme_runtime.job import COMMENT_PREFIX
from carme_runtime.job import InvalidJobEnv
from carme_runtime.job import JobContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from collections.abc import Mapping

    from carme_runtime.command_runner import Runner
    from carme_runtime.config import RuntimeConfig

DEFAULT_LOG_DIR = "/var/log/carme"
#: :attr:`carme_runtime.exit_codes.ExitCode.OK`, the hooks' exit status for everything but a broken node; a plain int
#: because building the ``IntEnum`` costs more than importing the rest of this module, on every job
EXIT_OK = 0


# --- logging ---------------------------------------------------------------------------------------


def _timestamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _clean(value: str) -> str:
    return value.replace("\n", "\\n").replace("\r", "\\r")


def write_log(log_dir: str, name: str, line: str) -> str | None:
    """Append one line to ``<log_dir>/<name>.log``; return an error text instead of raising."""
    text = f"{_timestamp()} {_clean(line)}\n"
    try:
        os.makedirs(log_dir, mode=0o750, exist_ok=True)
        fd = os.open(os.path.join(log_dir, f"{name}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, text.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError as exc:
        sys.stderr.write(f"carme: cannot write log in {log_dir}: {exc}\n{text}")
        return str(exc)
    return None


# --- scratch -----------------------------------------------------------------------------------------


class ScratchPlan:
    """What the epilog will do with the job's scratch path: ``action`` is
    ``remove_tree``, ``unlink`` (a file or a symlink, never followed), ``absent`` or ``refuse``."""

    __slots__ = ("action", "path", "reason")

    def __init__(self, action: str, path: str, reason: str = "") -> None:
        self.action = action
        self.path = path
        self.reason = reason

    def __repr__(self) -> str:
        return f"ScratchPlan({self.action!r}, {self.path!r}, {self.reason!r})"


def plan_scratch_removal(root: str, pattern: str, ctx: JobContext) -> ScratchPlan:
    """Decide how to remove ``<root>/<pattern>`` for this job without leaving ``root`` or following links.

    ``pattern`` may use ``{job_id}``, ``{user}`` and ``{uid}`` (default ``{job_id}``). Only ``lstat`` is
    used: every component below the root must be a real directory; a symlink as the last component is
    unlinked, its target untouched.
    """
    try:
        rel = pattern.format(job_id=ctx.job_id, user=ctx.user, uid=ctx.uid)
    except (KeyError, IndexError, ValueError) as exc:
        return ScratchPlan("refuse", pattern, f"bad scratch_pattern: {exc}")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or rel.startswith("/") or ".." in parts:
        return ScratchPlan("refuse", rel, "scratch path must stay inside the scratch root")
    real_root = os.path.realpath(root)
    path = os.path.join(real_root, *parts)
    if os.path.commonpath([real_root, path]) != real_root or path == real_root:
        return ScratchPlan("refuse", path, "outside the scratch root")
    import stat

    current = real_root
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return ScratchPlan("absent", path)
        except OSError as exc:
            return ScratchPlan("refuse", path, f"lstat {current}: {exc.strerror}")
        last = i == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            if last:
                return ScratchPlan("unlink", path, "symlink: removed, target untouched")
            return ScratchPlan("refuse", path, f"{current} is a symlink")
        if not last and not stat.S_ISDIR(st.st_mode):
            return ScratchPlan("refuse", path, f"{current} is not a directory")
        if last:
            return ScratchPlan("remove_tree" if stat.S_ISDIR(st.st_mode) else "unlink", path)
    return ScratchPlan("absent", path)  # pragma: no cover - loop always returns


def execute_scratch_plan(plan: ScratchPlan) -> str:
    """Carry out a plan; return a short outcome for the log."""
    if plan.action in ("absent", "refuse"):
        return f"{plan.action}{': ' + plan.reason if plan.reason else ''}"
    try:
        if plan.action == "unlink":
            os.unlink(plan.path)
        else:
            remove_tree(plan.path)
    except OSError as exc:
        return f"failed: {exc}"
    return "removed"


#: a directory opened without following a symlink in its last component
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def remove_tree(path: str) -> None:
    """Remove the directory ``path`` and everything below it; raise the first :class:`OSError`.

    The fd-based walk of ``shutil.rmtree`` on Linux (``shutil._rmtree_safe_fd`` in Python 3.11) without importing
    ``shutil``, which pulls ``zlib``, ``bz2`` and ``lzma`` into every epilog. Each directory is opened relative to
    its parent with ``O_NOFOLLOW`` and its entries are removed through ``dir_fd``, so a symlink in the tree is
    unlinked, never followed, even one swapped in for a directory during the walk; a symlink at the top fails.
    """
    fd = os.open(path, _DIR_FLAGS)
    try:
        _remove_contents(fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def _remove_contents(dir_fd: int) -> None:
    with os.scandir(dir_fd) as it:
        entries = list(it)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            fd = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                _remove_contents(fd)
            finally:
                os.close(fd)
            os.rmdir(entry.name, dir_fd=dir_fd)
        else:
            os.unlink(entry.name, dir_fd=dir_fd)


# --- leftover processes -----------------------------------------------------------------------------


def user_pids(uid: int, proc_root: str = "/proc", exclude: frozenset[int] = frozenset()) -> list[int]:
    """PIDs whose real uid is ``uid`` (read from ``<proc_root>/<pid>/status``)."""
    pids = []
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) in exclude:
            continue
        try:
            # One raw read, no file object: this runs for every process on the node in every epilog.
            fd = os.open(os.path.join(proc_root, entry, "status"), os.O_RDONLY)
            try:
                status = b"\n" + os.read(fd, 4096)  # "Uid:" is the 9th line, far inside the first 4 KiB
            finally:
                os.close(fd)
            start = status.index(b"\nUid:") + 1
            if int(status[start:].split(b"\n", 1)[0].split()[1]) == uid:
                pids.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return sorted(pids)


def should_kill_leftovers(
    ctx: JobContext, squeue_rc: int, squeue_out: str, node: str, min_uid: int
) -> tuple[bool, str]:
    """Pure decision: kill the user's leftover processes only if they have no other job on ``node``."""
    if ctx.uid < min_uid:
        return False, f"uid {ctx.uid} < min_uid {min_uid}"
    if squeue_rc != 0:
        return False, f"squeue failed (rc={squeue_rc}); keeping processes"
    from carme_runtime.slurm_formats import SlurmParseError
    from carme_runtime.slurm_formats import jobs_on_node
    from carme_runtime.slurm_formats import parse_squeue_json

    try:
        jobs = parse_squeue_json(squeue_out)
    except (SlurmParseError, ValueError, TypeError) as exc:
        return False, f"squeue output unreadable ({exc}); keeping processes"
    others = [j.job_id for j in jobs_on_node(jobs, node, user=ctx.user) if j.job_id != ctx.job_id]
    if others:
        return False, f"user has other jobs on {node}: {others}"
    return True, f"no other job of {ctx.user} on {node}"


def clean_leftovers(
    ctx: JobContext, min_uid: int, runner: Runner, kill: Callable[[int, int], None], proc_root: str
) -> str:
    """Kill the job user's processes left on this node when they have no other job here.

    The cheap local check comes first: when the user has no process left (the usual case with
    ``proctrack/cgroup``), slurmctld is not asked at all. Otherwise ``squeue`` decides, and ``/proc``
    is scanned again right before killing so a PID that ended meanwhile is not reused by mistake.
    """
    if ctx.uid < min_uid:
        return f"kept (uid {ctx.uid} < min_uid {min_uid})"
    me = frozenset({os.getpid()})
    if not user_pids(ctx.uid, proc_root, exclude=me):
        return "none"
    node = ctx.node
    if not node:
        import socket

        node = socket.gethostname().split(".")[0]
    from carme_runtime.slurm_formats import squeue_node_user_argv

    rc, out, _err = runner(squeue_node_user_argv(node, ctx.user))
    do_kill, why = should_kill_leftovers(ctx, rc, out, node, min_uid)
    if not do_kill:
        return f"kept ({why})"
    import signal

    killed = 0
    for pid in user_pids(ctx.uid, proc_root, exclude=me):
        try:
            kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            continue
        except OSError as exc:
            why += f"; kill {pid}: {exc.strerror}"
    return f"killed {killed} ({why})"


# --- the hooks -----------------------------------------------------------------------------------------


def _load_config(env: Mapping[str, str]) -> tuple[RuntimeConfig | None, str]:
    from carme_runtime.config import ConfigError
    from carme_runtime.config import RuntimeConfig

    try:
        return RuntimeConfig.load(env), ""
    except ConfigError as exc:
        return None, str(exc)


def _context_or_log(hook: str, env: Mapping[str, str]) -> JobContext | None:
    try:
        return JobContext.from_environ(env)
    except InvalidJobEnv as exc:
        log_dir = env.get("CARME_LOG_DIR") or DEFAULT_LOG_DIR
        write_log(
            log_dir,
            "hooks",
            f"{hook} malformed-env {exc}; node={env.get('SLURMD_NODENAME', '?')[:64]!r}; "
            "exit 0 (node not drained)",
        )
        sys.stderr.write(f"carme-{hook}: malformed Slurm environment: {exc}\n")
        return None


class _HookStart:
    """What both hooks know once the job's environment and the runtime config are read."""

    __slots__ = ("cfg", "ctx", "head", "log_dir")

    def __init__(self, ctx: JobContext, cfg: RuntimeConfig, log_dir: str, head: str) -> None:
        self.ctx = ctx
        self.cfg = cfg
        self.log_dir = log_dir
        self.head = head


def carme_job(env: Mapping[str, str], cfg: RuntimeConfig | None) -> str:
    """Why the hooks act on this job, or ``""`` for a foreign job, which they leave untouched.

    A Carme session carries the ``carme:v1`` comment from its submission on (:mod:`carme_runtime.sessions`), and
    slurmd 22.05 hands the job's comment to the Prolog and Epilog as ``SLURM_JOB_COMMENT`` (checked on 22.05.8). A
    job that asks for a Carme feature (``--constraint=beeond`` on a BeeOND node) opts in as well. ``hooks_scope =
    "all"`` (a cluster only Carme schedules on) acts on every job. A broken config counts as scope ``carme``
    without BeeOND, so a typo in runtime.json never makes the hooks touch foreign jobs.
    """
    if env.get("SLURM_JOB_COMMENT", "").strip().split(";", 1)[0] == COMMENT_PREFIX:
        return "session"
    if cfg is None:
        return ""
    if cfg.hooks_scope == "all":
        return "scope=all"
    if cfg.beeond:
        from carme_runtime.beeond import requested

        if requested(env.get("SLURM_JOB_CONSTRAINTS", ""), cfg.beeond_feature):
            return "beeond"
    return ""


def _start_hook(hook: str, env: Mapping[str, str], skipped: str) -> _HookStart | None:
    """The job's context and config, or None when the hook does nothing: a foreign job (:func:`carme_job`) returns
    before anything is written, run or created; a malformed environment or a broken config of a Carme job is logged,
    never a reason to drain the node."""
    cfg, cfg_error = _load_config(env)
    if not carme_job(env, cfg):
        return None
    ctx = _context_or_log(hook, env)
    if ctx is None:
        return None
    log_dir = cfg.log_dir if cfg else env.get("CARME_LOG_DIR") or DEFAULT_LOG_DIR
    head = f"{hook} job={ctx.job_id} user={ctx.user} uid={ctx.uid} node={ctx.node or '?'}"
    if cfg is None:
        write_log(log_dir, str(ctx.job_id), f"{head} config-error {cfg_error}; {skipped}")
        return None
    return _HookStart(ctx, cfg, log_dir, head)


def run_prolog(
    env: Mapping[str, str],
    runner: Runner,
    beeond_runner: Runner | None = None,
    is_mounted: Callable[[str], bool] = os.path.ismount,
) -> int:
    start = _start_hook("prolog", env, "checks skipped")
    if start is None:
        return EXIT_OK
    ctx, cfg, log_dir, head = start.ctx, start.cfg, start.log_dir, start.head
    from carme_runtime import gpu

    allocated = gpu.allocated_gpus(ctx.gpus_env)
    gpus_s = (
        "none" if not allocated else ",".join(map(str, allocated)) if allocated is not None else "unparseable"
    )
    cancelled = False
    if cfg.gpu_check == "off":
        gpu_s, result = "gpu_check=off", "ok"
    else:
        check = gpu.check_job_isolation(cfg.cgroup_root, ctx.uid, ctx.job_id, allocated)
        result = "ok"
        if check.verdict == gpu.MISMATCH and cfg.gpu_check == "enforce":
            result = fail_job(ctx.job_id, f"GPU isolation mismatch on {ctx.node or 'node'}", runner)
            cancelled = True
        elif check.verdict == gpu.MISMATCH:
            result = "warn-only"
        gpu_s = f"gpu_check={check.verdict} ({check.reason})"
    beeond_s = ""
    if cfg.beeond and not cancelled:
        from carme_runtime import beeond

        started = beeond.prolog(ctx, env, cfg, runner, beeond_runner or _beeond_runner(cfg), is_mounted=is_mounted)
        beeond_s = f" beeond={started.outcome}"
        if started.error:
            # The user's job asked for something that could not be built: the job fails, the node stays in service.
            result = fail_job(ctx.job_id, started.error, runner)
    write_log(log_dir, str(ctx.job_id), f"{head} gpus={gpus_s} {gpu_s} result={result}{beeond_s}")
    return EXIT_OK


def _beeond_runner(cfg: RuntimeConfig) -> Runner:
    from carme_runtime.command_runner import SubprocessRunner

    return SubprocessRunner(timeout=float(cfg.beeond_timeout_s))


def fail_job_argv(job_id: int, reason: str) -> list[list[str]]:
    """The commands that fail a job from its prolog without draining the node."""
    return [
        ["scontrol", "update", f"JobId={job_id}", f"AdminComment=carme: {reason}"],
        ["scancel", str(job_id)],
    ]


def fail_job(job_id: int, reason: str, runner: Runner) -> str:
    outcomes = []
    for argv in fail_job_argv(job_id, reason):
        rc, _out, err = runner(argv)
        outcomes.append(f"{argv[0]}={'ok' if rc == 0 else f'rc{rc}:{err.strip()[:80]}'}")
    return "job-cancelled(" + ",".join(outcomes) + ")"


def run_epilog(
    env: Mapping[str, str],
    runner: Runner,
    kill: Callable[[int, int], None] = os.kill,
    proc_root: str = "/proc",
    beeond_runner: Runner | None = None,
    is_mounted: Callable[[str], bool] = os.path.ismount,
) -> int:
    start = _start_hook("epilog", env, "cleanup skipped")
    if start is None:
        return EXIT_OK
    ctx, cfg, log_dir, head = start.ctx, start.cfg, start.log_dir, start.head
    plan = plan_scratch_removal(cfg.scratch_root, cfg.scratch_pattern, ctx)
    scratch = execute_scratch_plan(plan)
    leftovers = "disabled"
    if cfg.kill_leftovers:
        leftovers = clean_leftovers(ctx, cfg.min_uid, runner, kill, proc_root)
    beeond_s = ""
    if cfg.beeond:
        from carme_runtime import beeond

        stopped = beeond.epilog(ctx, env, cfg, runner, beeond_runner or _beeond_runner(cfg), is_mounted=is_mounted)
        beeond_s = f" beeond={stopped}"
    write_log(
        log_dir, str(ctx.job_id), f"{head} scratch={plan.path} {scratch} leftovers={leftovers}{beeond_s}"
    )
    return EXIT_OK
