# SPDX-License-Identifier: GPL-3.0-or-later
"""BeeOND per job: command lines and the multi-node orchestration of the prolog and epilog, run against the stand-in
``tests/fixtures/bin/beeond`` (the real one is not obtainable here). Each node of a three-node job gets its own state
directory and runs the hooks itself; the stand-in keeps which BeeOND mounts each node has."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from carme_runtime import beeond
from carme_runtime import hooks
from carme_runtime.config import RuntimeConfig
from carme_runtime.entry_points import task_prolog_main
from tests.runtime.conftest import FakeRunner

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "bin" / "beeond"
GONE = (1, "", "slurm_load_jobs error: Invalid job id specified")


@pytest.mark.parametrize(
    ("constraints", "wanted"),
    [
        ("beeond", True),
        ("a100&beeond", True),
        ("beeond,nvlink", True),
        ("[beeond*2&a100]", True),
        ("beeond|a100", False),  # only an alternative: the job may land without it
        ("a100", False),
        ("beeondx", False),
        ("", False),
    ],
)
def test_requested_reads_the_constraint_expression(constraints: str, wanted: bool) -> None:
    assert beeond.requested(constraints, "beeond") is wanted


SESSION_COMMENT = "carme:v1;app=jupyter;state=submitted"


def test_command_lines() -> None:
    cfg = RuntimeConfig.from_mapping(
        {"beeond_bin": "/opt/beegfs/sbin/beeond", "beeond_data_root": "/ssd/beeond", "beeond_mount_root": "/mnt/bo"}
    )
    assert beeond.start_argv(cfg, 7, "/var/lib/carme/beeond/7.nodes") == [
        "/opt/beegfs/sbin/beeond",
        "start",
        "-n",
        "/var/lib/carme/beeond/7.nodes",
        "-d",
        "/ssd/beeond/7",
        "-c",
        "/mnt/bo/7",
        "-P",
    ]
    assert beeond.stop_argv(cfg, "/x/7.nodes") == [
        "/opt/beegfs/sbin/beeond",
        "stop",
        "-n",
        "/x/7.nodes",
        "-L",
        "-d",
        "-P",
        "-c",
    ]


class Cluster:
    """Three nodes sharing the stand-in's view of the mounts; each has its own runtime.json and state directory."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.model = root / "standin"
        self.model.mkdir()
        monkeypatch.setenv("BEEOND_STANDIN_ROOT", str(self.model))
        self.owned: list[tuple[str, int]] = []

    def calls(self) -> list[str]:
        log = self.model / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def mounts(self, node: str) -> list[str]:
        path = self.model / f"{node}.mounts"
        return [m for m in path.read_text().splitlines() if m] if path.exists() else []

    def is_mounted(self, node: str) -> Callable[[str], bool]:
        return lambda path: path in self.mounts(node)

    def state_dir(self, node: str) -> Path:
        return self.root / node / "state"

    def env(
        self, node: str, job: int, nodelist: str, constraints: str = "beeond", comment: str = "", **config: object
    ) -> dict[str, str]:
        cfg_path = self.root / node / "runtime.json"
        cfg_path.parent.mkdir(exist_ok=True)
        cfg = {
            "beeond": True,
            "beeond_bin": str(STANDIN),
            "beeond_state_dir": str(self.state_dir(node)),
            "beeond_mount_root": str(self.root / "mnt"),
            "beeond_data_root": str(self.root / node / "ssd"),
            "log_dir": str(self.root / node / "log"),
            "gpu_check": "off",
            "kill_leftovers": False,
            "scratch_root": str(self.root / node / "scratch"),
            **config,
        }
        cfg_path.write_text(json.dumps(cfg))
        return {
            "SLURM_JOB_ID": str(job),
            "SLURM_JOB_USER": "alice",
            "SLURM_JOB_UID": "20001",
            "SLURMD_NODENAME": node,
            "SLURM_JOB_NODELIST": nodelist,
            "SLURM_JOB_CONSTRAINTS": constraints,
            "CARME_CONFIG": str(cfg_path),
        } | ({"SLURM_JOB_COMMENT": comment} if comment else {})

    def prolog(self, node: str, env: dict[str, str], runner: FakeRunner) -> int:
        return hooks.run_prolog(env, runner, is_mounted=self.is_mounted(node))

    def epilog(self, node: str, env: dict[str, str], runner: FakeRunner) -> int:
        return hooks.run_epilog(env, runner, is_mounted=self.is_mounted(node))

    def log(self, node: str, job: int) -> str:
        return (self.root / node / "log" / f"{job}.log").read_text()


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    made = Cluster(tmp_path, monkeypatch)
    # chown/chmod of the mount's top directory, recorded instead of done (the tests do not need root).
    monkeypatch.setattr(beeond, "_own", lambda path, uid: made.owned.append((path, uid)))
    return made


def test_three_node_job_gets_one_instance_started_and_stopped_by_its_first_node(cluster: Cluster) -> None:
    runner = FakeRunner()
    nodes = ["node1", "node2", "node3"]
    envs = {n: cluster.env(n, 41, "node[1-3]") for n in nodes}
    mount = str(cluster.root / "mnt" / "41")
    # slurmd runs the prologs in any order; only the first node starts BeeOND, over all three.
    for node in ("node3", "node2", "node1"):
        assert cluster.prolog(node, envs[node], runner) == 0
    start = f"start -n {cluster.state_dir('node1')}/41.nodes -d {cluster.root}/node1/ssd/41 -c {mount} -P"
    assert cluster.calls() == [start]
    assert (cluster.state_dir("node1") / "41.nodes").read_text() == "node1\nnode2\nnode3\n"
    assert all(cluster.mounts(n) == [mount] for n in nodes)
    assert cluster.owned == [(mount, 20001)]  # the mount's top directory is alice's
    assert f"beeond=started({mount} on 3 nodes)" in cluster.log("node1", 41)
    assert "beeond=recorded(first=node1)" in cluster.log("node2", 41)
    assert runner.calls == []  # no Slurm command: nothing stale, nothing failed

    # Every task of the job finds the mount in its environment.
    for node in nodes:
        lines = beeond.task_prolog_lines(envs[node], RuntimeConfig.load(envs[node]), cluster.is_mounted(node))
        assert lines == [f"export CARME_BEEOND={mount}"]

    # Epilogs: the other nodes leave the stop to the first one, which stops it everywhere.
    assert cluster.epilog("node2", envs["node2"], runner) == 0
    assert cluster.epilog("node1", envs["node1"], runner) == 0
    assert cluster.epilog("node3", envs["node3"], runner) == 0
    assert cluster.calls()[1:] == [f"stop -n {cluster.state_dir('node1')}/41.nodes -L -d -P -c"]
    assert all(cluster.mounts(n) == [] for n in nodes)
    assert "beeond=left-to-first-node(node1)" in cluster.log("node2", 41)
    assert "beeond=stopped" in cluster.log("node1", 41)
    assert not (cluster.state_dir("node1") / "41.json").exists()
    assert not (cluster.state_dir("node3") / "41.json").exists()  # ran after the stop: unmounted, forgotten


def test_failed_start_cancels_the_job_and_never_the_node(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEEOND_STANDIN_FAIL", "start")
    runner = FakeRunner()
    env = cluster.env("node1", 42, "node[1-2]")
    assert cluster.prolog("node1", env, runner) == 0  # exit 0: slurmd does not drain the node
    assert [c.split()[0] for c in cluster.calls()] == ["start", "stop"]  # the partial instance is cleaned up
    assert runner.calls[0][:3] == ["scontrol", "update", "JobId=42"]
    assert runner.calls[0][3].startswith("AdminComment=carme: BeeOND could not start on node1: beeond start rc=1:")
    assert "Could not start BeeGFS storage service" in runner.calls[0][3]
    assert "\n" not in runner.calls[0][3]  # beeond's two error lines, joined: one AdminComment line
    assert runner.calls[1] == ["scancel", "42"]
    assert "beeond=start-failed(" in cluster.log("node1", 42) and "cleanup ok" in cluster.log("node1", 42)
    assert cluster.owned == []


def test_unowned_mount_fails_the_job_too(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = FakeRunner()
    env = cluster.env("node1", 43, "node1")

    def refuse(path: str, uid: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(beeond, "_own", refuse)
    assert cluster.prolog("node1", env, runner) == 0
    assert "cannot hand" in runner.calls[0][3] and runner.calls[1] == ["scancel", "43"]
    assert cluster.mounts("node1") == []


def test_session_without_the_constraint_gets_nothing(cluster: Cluster) -> None:
    runner = FakeRunner()
    env = cluster.env("node1", 44, "node1", constraints="a100", comment=SESSION_COMMENT)
    assert cluster.prolog("node1", env, runner) == 0
    assert cluster.calls() == [] and runner.calls == []
    assert "beeond=not-requested" in cluster.log("node1", 44)
    assert cluster.epilog("node1", env, runner) == 0
    assert "beeond=none" in cluster.log("node1", 44)
    assert beeond.task_prolog_lines(env, RuntimeConfig.load(env), cluster.is_mounted("node1")) == []


def test_foreign_job_without_the_constraint_is_not_touched(cluster: Cluster) -> None:
    """No Carme comment, no BeeOND asked for: not even the stale-instance check runs, nothing is logged."""
    runner = FakeRunner()
    env = cluster.env("node1", 46, "node1", constraints="a100")
    assert cluster.prolog("node1", env, runner) == 0
    assert cluster.epilog("node1", env, runner) == 0
    assert cluster.calls() == [] and runner.calls == []
    assert not (cluster.root / "node1" / "log").exists()
    assert not cluster.state_dir("node1").exists()


def test_nodes_without_beeond_configured_do_nothing(cluster: Cluster) -> None:
    runner = FakeRunner()
    env = cluster.env("node1", 45, "node1", beeond=False, comment=SESSION_COMMENT)
    assert cluster.prolog("node1", env, runner) == 0
    assert cluster.calls() == [] and "beeond=" not in cluster.log("node1", 45)


def test_stale_instance_of_a_crashed_job_is_stopped_before_the_next_one(cluster: Cluster) -> None:
    runner = FakeRunner({"squeue": GONE})
    # Job 40 ran on node[1-3]; node1 crashed, no epilog ever ran.
    for node in ("node1", "node2", "node3"):
        cluster.prolog(node, cluster.env(node, 40, "node[1-3]"), runner)
    old_mount = str(cluster.root / "mnt" / "40")
    assert cluster.mounts("node2") == [old_mount]
    # Job 41 lands on node[2-3]: node2 (its first node) finds 40 still mounted and Slurm saying the job is gone.
    for node in ("node3", "node2"):
        assert cluster.prolog(node, cluster.env(node, 41, "node[2-3]"), runner) == 0
    calls = cluster.calls()
    stale_stop = f"stop -n {cluster.state_dir('node3')}/40.nodes -L -d -P -c"
    assert calls[1] == stale_stop  # node3's prolog ran first and stopped 40 over all its nodes
    assert calls[2].startswith(f"start -n {cluster.state_dir('node2')}/41.nodes")
    assert ["squeue", "-h", "-j", "40", "-o", "%T"] in runner.calls
    assert cluster.mounts("node1") == []  # node1 was one of 40's nodes: unmounted too
    assert "stale=40:stale-stopped" in cluster.log("node3", 41)
    assert "stale=40:forgotten" in cluster.log("node2", 41)  # already unmounted there: only forgotten
    assert not (cluster.state_dir("node2") / "40.json").exists()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ((0, "RUNNING\n", ""), "kept(running)"),
        (
            (1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"),
            "kept(slurm unreachable)",
        ),
    ],
)
def test_instance_of_a_live_or_unknown_job_is_kept(cluster: Cluster, answer: tuple[int, str, str], why: str) -> None:
    for node in ("node2", "node1"):
        cluster.prolog(node, cluster.env(node, 40, "node[1-2]"), FakeRunner())
    runner = FakeRunner({"squeue": answer})
    env = cluster.env("node2", 41, "node2", constraints="", comment=SESSION_COMMENT)
    assert cluster.prolog("node2", env, runner) == 0
    assert f"stale=40:{why}" in cluster.log("node2", 41)
    assert cluster.mounts("node2") == [str(cluster.root / "mnt" / "40")]
    assert [c.split()[0] for c in cluster.calls()] == ["start"]


def test_failed_stop_keeps_the_state_for_the_stale_cleanup(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    env = cluster.env("node1", 46, "node1")
    cluster.prolog("node1", env, FakeRunner())
    monkeypatch.setenv("BEEOND_STANDIN_FAIL", "stop")
    assert cluster.epilog("node1", env, FakeRunner()) == 0
    assert "beeond=stop-failed(rc1" in cluster.log("node1", 46)
    assert (cluster.state_dir("node1") / "46.json").exists()
    # The next Carme job's prolog on the node, with a working beeond, stops it.
    monkeypatch.delenv("BEEOND_STANDIN_FAIL")
    env47 = cluster.env("node1", 47, "node1", constraints="", comment=SESSION_COMMENT)
    cluster.prolog("node1", env47, FakeRunner({"squeue": GONE}))
    assert "stale=46:stale-stopped" in cluster.log("node1", 47)
    assert cluster.mounts("node1") == []


def test_task_prolog_entry_point_prints_export_only_when_mounted(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = cluster.env("node1", 48, "node1")
    mount = tmp_path / "mnt" / "48"
    assert task_prolog_main([], env) == 0
    assert capsys.readouterr().out == ""  # not a mount point on this host
    env_root = {**env, "CARME_CONFIG": str(cluster.root / "node1" / "runtime.json")}
    cfg = json.loads((cluster.root / "node1" / "runtime.json").read_text())
    cfg["beeond_mount_root"] = "/"  # "/<job>" is not mounted either; a broken config prints nothing, never fails
    (cluster.root / "node1" / "runtime.json").write_text(json.dumps({**cfg, "beeond_timeout_s": "x"}))
    assert task_prolog_main([], env_root) == 0
    out = capsys.readouterr()
    assert out.out == "" and "ignored" in out.err
    assert not mount.exists()
