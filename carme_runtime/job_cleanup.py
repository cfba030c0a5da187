# SPDX-License-Identifier: GPL-3.0-or-later
"""What the epilog cleans up after a Carme job on its node: the job's scratch path (removed without leaving the
scratch root or following a link) and the user's leftover processes (killed only when the user has no other job on
the node).

Runs in every epilog: imports nothing but ``os`` at the top (the rest lazily, on the rare paths that need it).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from carme_runtime.command_runner import Runner
    from carme_runtime.job import JobContext


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


def squeue_node_user_argv(node: str, user: str) -> list[str]:
    """``squeue`` for the jobs of ``user`` on ``node``, one ``<job id> <state>`` line each.

    Text, not ``--json``: Slurm 22.05's ``squeue --json`` ignores ``-w``/``-u`` (its man page) and prints the
    whole queue, which on a busy cluster is megabytes to parse in every epilog that finds a leftover process.
    ``%A`` is the job id proper (one per array element, as ``SLURM_JOB_ID``), ``%T`` the state's long name."""
    return ["squeue", "--noheader", "--format=%A %T", f"--nodelist={node}", f"--user={user}"]


def other_active_jobs(squeue_out: str, own_job_id: int) -> list[int]:
    """The jobs of the :func:`squeue_node_user_argv` answer that hold resources, other than ``own_job_id``.

    Raises ``ValueError`` on a line that is not ``<job id> <STATE>``."""
    from carme_runtime.job import ACTIVE_STATES

    others = []
    for line in squeue_out.splitlines():
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2 or not fields[0].isdigit() or not fields[1].isupper():
            raise ValueError(f"unexpected squeue line {line[:80]!r}")
        job_id = int(fields[0])
        if job_id != own_job_id and fields[1] in ACTIVE_STATES:
            others.append(job_id)
    return others


def should_kill_leftovers(
    ctx: JobContext, squeue_rc: int, squeue_out: str, node: str, min_uid: int
) -> tuple[bool, str]:
    """Pure decision: kill the user's leftover processes only if they have no other job on ``node``."""
    if ctx.uid < min_uid:
        return False, f"uid {ctx.uid} < min_uid {min_uid}"
    if squeue_rc != 0:
        return False, f"squeue failed (rc={squeue_rc}); keeping processes"
    try:
        others = other_active_jobs(squeue_out, ctx.job_id)
    except ValueError as exc:
        return False, f"squeue output unreadable ({exc}); keeping processes"
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
