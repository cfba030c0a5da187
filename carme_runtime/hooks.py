# SPDX-License-Identifier: GPL-3.0-or-later
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
            f"{hook} malformed-env {exc}; node={env.get('SLURMD_NODENAME', '?')[:64]!r}; exit 0 (node not drained)",
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
    gpus_s = "none" if not allocated else ",".join(map(str, allocated)) if allocated is not None else "unparseable"
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
    from carme_runtime.job_cleanup import clean_leftovers
    from carme_runtime.job_cleanup import execute_scratch_plan
    from carme_runtime.job_cleanup import plan_scratch_removal

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
    write_log(log_dir, str(ctx.job_id), f"{head} scratch={plan.path} {scratch} leftovers={leftovers}{beeond_s}")
    return EXIT_OK
