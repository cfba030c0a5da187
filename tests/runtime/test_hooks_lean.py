# SPDX-License-Identifier: GPL-3.0-or-later
"""The prolog/epilog stay lean (issue 18): what they import, and the stdlib code they replace to stay so.

No timing here: the guard is the set of modules a normal prolog and epilog import, checked in a fresh interpreter.
The wall time itself is measured by ``bench/bench_hooks.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from carme_runtime import hooks
from carme_runtime import job_cleanup
from carme_runtime.exit_codes import ExitCode

REPO = Path(__file__).resolve().parents[2]

#: modules a normal prolog or epilog must not import (each costs one to several milliseconds per job); they stay
#: available to the rare paths that need them (``subprocess``/``json`` when the epilog asks ``squeue``...)
HEAVY = frozenset(
    {
        "subprocess",
        "json",
        "re",
        "enum",
        "shutil",
        "socket",
        "signal",
        "threading",
        "locale",
        "logging",
        "pathlib",
        "typing",
        "dataclasses",
        "argparse",
        "tomllib",
        "importlib.metadata",
        "zlib",
        "bz2",
        "lzma",
        "carme_runtime.exit_codes",
        "carme_runtime.slurm_formats",
        "carme_runtime.hostlist",
        "carme_runtime.beeond",
        "carme_runtime.launch",
    }
)

# Runs in ``python -S`` (no site, no editable-install finder) with the hook environment as its own environment, the
# way slurmd starts the hooks; imports nothing itself, so every module new after ``before`` is the hooks' doing.
_PROBE = """
import sys
before = set(sys.modules)
from carme_runtime.entry_points import epilog_main, prolog_main
rcs = [prolog_main([]), epilog_main([])]
print(rcs[0], rcs[1], *sorted(set(sys.modules) - before))
"""


def _hooks_imports(tmp_path: Path, hook_env: dict[str, str]) -> tuple[list[int], set[str]]:
    devices = tmp_path / "cgroup" / "devices" / "slurm" / "uid_59999" / "job_41"
    devices.mkdir(parents=True)
    (devices / "devices.list").write_text("c 195:0 rw\nc 195:255 rw\nc 1:3 rwm\n")
    (tmp_path / "scratch" / "41" / "data").mkdir(parents=True)
    (tmp_path / "scratch" / "41" / "data" / "f").write_text("x")
    # no process of this uid: the epilog does not ask squeue (the usual case)
    env = {**hook_env, "SLURM_JOB_UID": "59999", "SLURM_JOB_COMMENT": "carme:v1;state=starting"}
    proc = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r})\n{_PROBE}"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    words = proc.stdout.split()
    log = (tmp_path / "log" / "41.log").read_text()
    assert "gpu_check=ok" in log and "result=ok" in log, log
    assert "removed leftovers=none" in log, log
    assert not (tmp_path / "scratch" / "41").exists()
    return [int(words[0]), int(words[1])], set(words[2:])


def test_normal_prolog_and_epilog_import_nothing_heavy(tmp_path: Path, hook_env: dict[str, str]) -> None:
    rcs, imported = _hooks_imports(tmp_path, hook_env)
    assert rcs == [0, 0]
    assert imported & HEAVY == set()
    assert {"carme_runtime.hooks", "carme_runtime.gpu", "carme_runtime.config"} <= imported  # the hooks did run


def test_exit_ok_is_exit_code_ok() -> None:
    assert hooks.EXIT_OK == ExitCode.OK


def test_comment_prefix_has_one_value() -> None:
    from carme_runtime import job
    from carme_runtime import slurm_formats

    assert slurm_formats.COMMENT_PREFIX is job.COMMENT_PREFIX == "carme:v1"
    assert slurm_formats.format_comment(state="ready").startswith(job.COMMENT_PREFIX + ";")


# --- remove_tree: shutil.rmtree's fd-based walk without shutil -----------------------------------------


def test_remove_tree_removes_nested_tree_and_never_follows_links(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "sub" / "keep").write_text("precious")
    top = tmp_path / "top"
    (top / "a" / "b" / "c").mkdir(parents=True)
    (top / "a" / "b" / "c" / "f").write_text("x")
    (top / "a" / "empty").mkdir()
    (top / "a" / "dirlink").symlink_to(victim)
    (top / "a" / "b" / "filelink").symlink_to(victim / "sub" / "keep")
    (top / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(top / "fifo")
    job_cleanup.remove_tree(str(top))
    assert not top.exists()
    assert (victim / "sub" / "keep").read_text() == "precious"


def test_remove_tree_refuses_a_symlink_at_the_top(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(OSError):
        job_cleanup.remove_tree(str(tmp_path / "link"))
    assert (victim / "keep").read_text() == "precious"
    assert (tmp_path / "link").is_symlink()


def test_remove_tree_raises_for_a_file_or_a_missing_path(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        job_cleanup.remove_tree(str(tmp_path / "file"))
    with pytest.raises(FileNotFoundError):
        job_cleanup.remove_tree(str(tmp_path / "missing"))


def test_remove_tree_failure_is_reported_by_the_epilog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = tmp_path / "scratch" / "41"
    (top / "sub").mkdir(parents=True)
    (top / "sub" / "f").write_text("x")

    def denied(path: str, *, dir_fd: int | None = None) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "unlink", denied)
    outcome = job_cleanup.execute_scratch_plan(job_cleanup.ScratchPlan("remove_tree", str(top)))
    monkeypatch.undo()
    assert outcome == "failed: [Errno 13] Permission denied: 'f'"
    assert (top / "sub" / "f").exists()


def test_user_pids_reads_status_as_bytes(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, name, uid in ((10, "caf\xe9", 1001), (11, "\xff\xfe", 1002), (12, "x", 1001)):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "status").write_bytes(f"Name:\t{name}\nUid:\t{uid}\t0\t{uid}\t{uid}\n".encode("latin-1"))
    (proc / "13").mkdir()  # vanished process: no status
    (proc / "14").mkdir()
    (proc / "14" / "status").write_text("Name:\tx\nUmask:\t0022\n")  # no Uid line
    (proc / "15").mkdir()
    (proc / "15" / "status").write_text("Name:\tx\nUid:\n")  # no value
    (proc / "16").mkdir()
    (proc / "16" / "status").write_text("Name:\tUid:\t1001\nUid:\t7\t1001\t1001\t1001\n")  # the real uid counts
    (proc / "self").mkdir()
    assert job_cleanup.user_pids(1001, str(proc)) == [10, 12]
    assert job_cleanup.user_pids(1001, str(proc), exclude=frozenset({12})) == [10]
