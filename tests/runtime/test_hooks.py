# SPDX-License-Identifier: GPL-3.0-or-later
"""Prolog/epilog: never drain a node for a user's mistake; scratch removal never leaves the root."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from carme_runtime import hooks
from carme_runtime import job_cleanup
from carme_runtime.entry_points import epilog_main
from carme_runtime.entry_points import prolog_main
from carme_runtime.job import InvalidJobEnv
from carme_runtime.job import JobContext


def log_text(env: dict[str, str], name: str) -> str:
    return (Path(env["CARME_LOG_DIR"]) / f"{name}.log").read_text()


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"SLURM_JOB_ID": None}, "SLURM_JOB_ID: missing"),
        ({"SLURM_JOB_ID": "12abc"}, "SLURM_JOB_ID: not a non-negative integer: '12abc'"),
        ({"SLURM_JOB_ID": "-3"}, "SLURM_JOB_ID: not a non-negative integer"),
        ({"SLURM_JOB_ID": "0"}, "SLURM_JOB_ID: must be > 0"),
        ({"SLURM_JOB_USER": None}, "SLURM_JOB_USER: missing"),
        ({"SLURM_JOB_USER": "al ice"}, "SLURM_JOB_USER: not a valid user name"),
        ({"SLURM_JOB_UID": "x"}, "SLURM_JOB_UID: not a non-negative integer"),
    ],
)
@pytest.mark.parametrize("entry", [prolog_main, epilog_main])
def test_malformed_env_logs_clear_line_and_returns_0(
    hook_env: dict[str, str], change: dict[str, str | None], needle: str, entry: Callable[..., int], capsys
) -> None:
    for key, value in change.items():
        if value is None:
            hook_env.pop(key)
        else:
            hook_env[key] = value
    assert entry([], hook_env) == 0
    line = log_text(hook_env, "hooks")
    assert needle in line
    assert "malformed-env" in line and "node not drained" in line
    assert len(line.splitlines()) == 1
    assert "malformed Slurm environment" in capsys.readouterr().err


def test_malformed_env_with_newline_stays_one_line(hook_env: dict[str, str]) -> None:
    hook_env["SLURM_JOB_ID"] = "1\n2026-01-01 prolog job=1 result=ok"
    assert prolog_main([], hook_env) == 0
    assert len(log_text(hook_env, "hooks").splitlines()) == 1


def test_unwritable_log_dir_still_returns_0(hook_env: dict[str, str], tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    hook_env["CARME_LOG_DIR"] = str(blocker / "log")
    assert prolog_main([], hook_env) == 0
    assert "cannot write log" in capsys.readouterr().err


def test_job_context_from_environ(hook_env: dict[str, str]) -> None:
    ctx = JobContext.from_environ(hook_env)
    assert (ctx.job_id, ctx.user, ctx.uid, ctx.node) == (41, "alice", 1001, "vm")
    assert ctx.gpus_env["SLURM_JOB_GPUS"] == "0"
    with pytest.raises(InvalidJobEnv) as info:
        JobContext.from_environ({})
    assert info.value.variable == "SLURM_JOB_ID"


def test_prolog_logs_one_line_per_job(hook_env: dict[str, str]) -> None:
    assert prolog_main([], hook_env) == 0
    line = log_text(hook_env, "41")
    assert "prolog job=41 user=alice uid=1001 node=vm gpus=0 gpu_check=unverifiable" in line
    assert line.count("\n") == 1


def _cgroup(env: dict[str, str], text: str) -> None:
    d = Path(env["CARME_CGROUP_ROOT"]) / "devices" / "slurm" / "uid_1001" / "job_41"
    d.mkdir(parents=True)
    (d / "devices.list").write_text(text)


def test_prolog_gpu_ok_runs_no_command(hook_env: dict[str, str], fake_runner) -> None:
    _cgroup(hook_env, "c 195:0 rw\nc 195:255 rw\n")
    assert hooks.run_prolog(hook_env, fake_runner) == 0
    assert fake_runner.calls == []
    assert "gpu_check=ok" in log_text(hook_env, "41")


def test_prolog_gpu_mismatch_fails_job_not_node(hook_env: dict[str, str], fake_runner) -> None:
    _cgroup(hook_env, "c 195:0 rw\nc 195:1 rw\n")
    assert hooks.run_prolog(hook_env, fake_runner) == 0  # exit 0: the node is not drained
    assert fake_runner.calls == [
        ["scontrol", "update", "JobId=41", "AdminComment=carme: GPU isolation mismatch on vm"],
        ["scancel", "41"],
    ]
    line = log_text(hook_env, "41")
    assert "gpu_check=mismatch" in line and "result=job-cancelled(scontrol=ok,scancel=ok)" in line


def test_prolog_gpu_mismatch_warn_mode(hook_env: dict[str, str], fake_runner) -> None:
    _cgroup(hook_env, "c 195:0 rw\nc 195:1 rw\n")
    hook_env["CARME_GPU_CHECK"] = "warn"
    assert hooks.run_prolog(hook_env, fake_runner) == 0
    assert fake_runner.calls == []
    assert "result=warn-only" in log_text(hook_env, "41")


def test_prolog_bad_config_logs_and_returns_0(hook_env: dict[str, str], tmp_path: Path, fake_runner) -> None:
    cfg = tmp_path / "runtime.json"
    cfg.write_text(json.dumps({"gpu_check": "sometimes"}))
    hook_env["CARME_CONFIG"] = str(cfg)
    assert hooks.run_prolog(hook_env, fake_runner) == 0
    assert "config-error" in log_text(hook_env, "41")


# --- epilog: scratch ---------------------------------------------------------------------------


def ctx() -> JobContext:
    return JobContext(job_id=41, user="alice", uid=1001, node="vm")


def test_epilog_removes_scratch(hook_env: dict[str, str], fake_runner) -> None:
    scratch = Path(hook_env["CARME_SCRATCH_ROOT"]) / "41"
    (scratch / "sub").mkdir(parents=True)
    (scratch / "sub" / "f").write_text("x")
    assert hooks.run_epilog(hook_env, fake_runner) == 0
    assert not scratch.exists()
    assert "removed" in log_text(hook_env, "41")


def test_epilog_symlinked_scratch_is_unlinked_not_followed(
    hook_env: dict[str, str], tmp_path: Path, fake_runner
) -> None:
    victim = tmp_path / "important"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    root = Path(hook_env["CARME_SCRATCH_ROOT"])
    root.mkdir()
    (root / "41").symlink_to(victim)
    assert hooks.run_epilog(hook_env, fake_runner) == 0
    assert not (root / "41").is_symlink()
    assert (victim / "keep").read_text() == "precious"


def test_symlink_inside_scratch_not_followed(hook_env: dict[str, str], tmp_path: Path, fake_runner) -> None:
    victim = tmp_path / "important"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    scratch = Path(hook_env["CARME_SCRATCH_ROOT"]) / "41"
    scratch.mkdir(parents=True)
    (scratch / "link").symlink_to(victim)
    assert hooks.run_epilog(hook_env, fake_runner) == 0
    assert not scratch.exists()
    assert (victim / "keep").read_text() == "precious"


@pytest.mark.parametrize("pattern", ["../{job_id}", "/etc/{job_id}", "{job_id}/..", "", "{nope}", "x/../../y"])
def test_scratch_patterns_outside_root_refused(tmp_path: Path, pattern: str) -> None:
    plan = job_cleanup.plan_scratch_removal(str(tmp_path / "scratch"), pattern, ctx())
    assert plan.action == "refuse"


def test_intermediate_symlink_refused(tmp_path: Path) -> None:
    root = tmp_path / "scratch"
    root.mkdir()
    outside = tmp_path / "outside"
    (outside / "41").mkdir(parents=True)
    (root / "alice").symlink_to(outside)
    plan = job_cleanup.plan_scratch_removal(str(root), "{user}/{job_id}", ctx())
    assert plan.action == "refuse"
    assert job_cleanup.execute_scratch_plan(plan).startswith("refuse")
    assert (outside / "41").is_dir()


def test_scratch_plan_absent_and_file(tmp_path: Path) -> None:
    root = tmp_path / "scratch"
    root.mkdir()
    assert job_cleanup.plan_scratch_removal(str(root), "{job_id}", ctx()).action == "absent"
    (root / "41").write_text("x")
    assert job_cleanup.plan_scratch_removal(str(root), "{job_id}", ctx()).action == "unlink"


# --- epilog: leftover processes -------------------------------------------------------------------


def fake_proc(root: Path, procs: dict[int, int]) -> str:
    for pid, uid in procs.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (root / "self").mkdir()
    return str(root)


SQUEUE_ARGV = ["squeue", "--noheader", "--format=%A %T", "--nodelist=vm", "--user=alice"]


def test_epilog_kills_leftovers_when_no_other_job(hook_env: dict[str, str], tmp_path: Path, fake_runner) -> None:
    proc = fake_proc(tmp_path / "proc", {100: 1001, 101: 1002, 102: 1001})
    # the job itself (its epilog runs while it completes) and an ended job that squeue still lists
    fake_runner.answers["squeue"] = (0, "41 COMPLETING\n39 COMPLETED\n", "")
    killed: list[tuple[int, int]] = []
    assert hooks.run_epilog(hook_env, fake_runner, kill=lambda p, s: killed.append((p, s)), proc_root=proc) == 0
    assert fake_runner.calls == [SQUEUE_ARGV]
    assert killed == [(100, signal.SIGKILL), (102, signal.SIGKILL)]
    assert "killed 2" in log_text(hook_env, "41")


def test_epilog_keeps_processes_when_user_has_another_job(
    hook_env: dict[str, str], tmp_path: Path, fake_runner
) -> None:
    proc = fake_proc(tmp_path / "proc", {100: 1001})
    fake_runner.answers["squeue"] = (0, "41 COMPLETING\n42 RUNNING\n43 PENDING\n", "")  # job 42 of alice runs on vm
    killed: list[tuple[int, int]] = []
    assert hooks.run_epilog(hook_env, fake_runner, kill=lambda p, s: killed.append((p, s)), proc_root=proc) == 0
    assert killed == []
    assert "other jobs on vm: [42]" in log_text(hook_env, "41")


def test_epilog_keeps_processes_when_squeue_fails(hook_env: dict[str, str], tmp_path: Path, fake_runner) -> None:
    proc = fake_proc(tmp_path / "proc", {100: 1001})
    fake_runner.answers["squeue"] = (1, "", "slurm_load_jobs error: Unable to contact slurm controller")
    killed: list[tuple[int, int]] = []
    assert hooks.run_epilog(hook_env, fake_runner, kill=lambda p, s: killed.append((p, s)), proc_root=proc) == 0
    assert killed == []


@pytest.mark.parametrize(
    "answer",
    ['{"jobs": []}', "41 COMPLETING\n42\n", "41 COMPLETING extra\n", "x42 RUNNING\n", "42 running\n"],
)
def test_epilog_keeps_processes_when_squeue_answers_garbage(
    hook_env: dict[str, str], tmp_path: Path, fake_runner, answer: str
) -> None:
    proc = fake_proc(tmp_path / "proc", {100: 1001})
    fake_runner.answers["squeue"] = (0, answer, "")
    killed: list[tuple[int, int]] = []
    assert hooks.run_epilog(hook_env, fake_runner, kill=lambda p, s: killed.append((p, s)), proc_root=proc) == 0
    assert killed == []
    assert "squeue output unreadable" in log_text(hook_env, "41")


def test_epilog_never_kills_system_uids(hook_env: dict[str, str], tmp_path: Path, fake_runner) -> None:
    hook_env["SLURM_JOB_UID"] = "0"
    hook_env["SLURM_JOB_USER"] = "root"
    killed: list[tuple[int, int]] = []
    proc = fake_proc(tmp_path / "proc", {1: 0})
    assert hooks.run_epilog(hook_env, fake_runner, kill=lambda p, s: killed.append((p, s)), proc_root=proc) == 0
    assert killed == [] and fake_runner.calls == []


def test_user_pids_reads_real_proc() -> None:
    assert os.getpid() in job_cleanup.user_pids(os.getuid())


def test_epilog_without_leftovers_does_not_ask_slurm(hook_env: dict[str, str], tmp_path: Path, fake_runner) -> None:
    proc = fake_proc(tmp_path / "proc", {100: 1002})  # only another user's process
    killed: list[tuple[int, int]] = []
    assert hooks.run_epilog(hook_env, fake_runner, kill=lambda p, s: killed.append((p, s)), proc_root=proc) == 0
    assert fake_runner.calls == [] and killed == []
    assert "leftovers=none" in log_text(hook_env, "41")


def test_epilog_without_node_name_uses_hostname(hook_env: dict[str, str], tmp_path: Path, fake_runner) -> None:
    del hook_env["SLURMD_NODENAME"]
    proc = fake_proc(tmp_path / "proc", {100: 1001})
    fake_runner.answers["squeue"] = (0, "", "")
    assert hooks.run_epilog(hook_env, fake_runner, kill=lambda p, s: None, proc_root=proc) == 0
    assert fake_runner.calls[0][:3] == SQUEUE_ARGV[:3]
    assert fake_runner.calls[0][3].startswith("--nodelist=") and len(fake_runner.calls[0][3]) > len("--nodelist=")


# --- foreign jobs: the hooks act only on Carme's jobs ------------------------------------------------


def _foreign(env: dict[str, str], comment: str | None) -> dict[str, str]:
    """``env`` as slurmd sets it for a job that is not a Carme session (no comment, or someone else's)."""
    out = {k: v for k, v in env.items() if k != "SLURM_JOB_COMMENT"}
    if comment is not None:
        out["SLURM_JOB_COMMENT"] = comment
    return out


@pytest.mark.parametrize("comment", [None, "", "nightly build", "carme:v2;x=1", "xcarme:v1", "see carme:v1"])
def test_foreign_job_is_not_touched_by_either_hook(
    hook_env: dict[str, str], tmp_path: Path, fake_runner, comment: str | None
) -> None:
    """No log line, no directory, no command (no AdminComment, no scancel, no squeue), no kill, no scratch removed,
    even where a Carme job would get all of them (a GPU mismatch, leftover processes, a scratch directory)."""
    env = _foreign(hook_env, comment)
    _cgroup(env, "c 195:0 rw\nc 195:1 rw\n")  # a mismatch: a Carme job would be cancelled
    scratch = Path(env["CARME_SCRATCH_ROOT"]) / "41"
    scratch.mkdir(parents=True)
    proc = fake_proc(tmp_path / "proc", {100: 1001})
    killed: list[tuple[int, int]] = []
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert hooks.run_prolog(env, fake_runner) == 0
    assert hooks.run_epilog(env, fake_runner, kill=lambda p, s: killed.append((p, s)), proc_root=proc) == 0
    assert fake_runner.calls == [] and killed == []
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert not Path(env["CARME_LOG_DIR"]).exists() and scratch.is_dir()


def test_foreign_job_with_a_malformed_env_or_a_broken_config_is_not_touched(
    hook_env: dict[str, str], tmp_path: Path
) -> None:
    cfg = tmp_path / "runtime.json"
    cfg.write_text(json.dumps({"gpu_check": "sometimes", "hooks_scope": "all"}))  # broken: counts as scope carme
    env = _foreign(hook_env, None) | {"CARME_CONFIG": str(cfg)}
    assert prolog_main([], env) == 0 and epilog_main([], env) == 0
    del env["SLURM_JOB_ID"]
    assert prolog_main([], env) == 0 and epilog_main([], env) == 0
    assert not Path(env["CARME_LOG_DIR"]).exists()


def test_scope_all_acts_on_every_job(hook_env: dict[str, str], tmp_path: Path, fake_runner) -> None:
    cfg = tmp_path / "runtime.json"
    cfg.write_text(json.dumps({"hooks_scope": "all"}))
    env = _foreign(hook_env, "nightly build") | {"CARME_CONFIG": str(cfg)}
    scratch = Path(env["CARME_SCRATCH_ROOT"]) / "41"
    scratch.mkdir(parents=True)
    assert hooks.run_epilog(env, fake_runner) == 0
    assert not scratch.exists() and "epilog job=41" in log_text(env, "41")


@pytest.mark.parametrize(
    ("comment", "scope", "beeond", "constraints", "why"),
    [
        ("carme:v1;app=jupyter;state=submitted", "carme", False, "", "session"),
        (" carme:v1;app=x;state=ready ", "carme", False, "", "session"),
        ("carme:v1", "carme", False, "", "session"),
        ("", "carme", True, "beeond&a100", "beeond"),
        ("", "carme", False, "beeond", ""),  # the node has no BeeOND: not a Carme feature here
        ("", "carme", True, "beeond|a100", ""),  # offered, not required
        ("", "all", False, "", "scope=all"),
        ("", "carme", False, "", ""),
    ],
)
def test_carme_job_decision(comment: str, scope: str, beeond: bool, constraints: str, why: str) -> None:
    from carme_runtime.config import RuntimeConfig

    cfg = RuntimeConfig.from_mapping({"hooks_scope": scope, "beeond": beeond})
    env = {"SLURM_JOB_COMMENT": comment, "SLURM_JOB_CONSTRAINTS": constraints}
    assert hooks.carme_job(env, cfg) == why


def test_hooks_scope_is_validated() -> None:
    from carme_runtime.config import ConfigError
    from carme_runtime.config import RuntimeConfig

    with pytest.raises(ConfigError, match="hooks_scope must be one of carme, all"):
        RuntimeConfig.from_mapping({"hooks_scope": "some"})
