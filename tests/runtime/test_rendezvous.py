# SPDX-License-Identifier: GPL-3.0-or-later
"""The rendezvous variables of a (multi-node) session, and that carme-launch gives them to the app."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from carme_runtime import launch_plan
from carme_runtime.apps import load_apps
from carme_runtime.config import RuntimeConfig
from carme_runtime.rendezvous import NAMES
from carme_runtime.rendezvous import rendezvous_env
from tests.fixtures.net import free_port

SECRET = "s3cr3t-" + "x" * 40


def test_two_nodes_meet_at_the_first() -> None:
    env = {"SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_NUM_NODES": "2"}
    assert rendezvous_env(env, "10.89.0.11", 41000) == {
        "MASTER_ADDR": "10.89.0.11",
        "MASTER_PORT": "41000",
        "NNODES": "2",
        "WORLD_SIZE": "2",
        "CARME_NODES": "node1,node2",
        "CARME_MASTER_NODE": "node1",
    }


def test_one_node_and_a_missing_node_count() -> None:
    out = rendezvous_env({"SLURM_JOB_NODELIST": "gpu07"}, "gpu07.example", 29500)
    assert out["NNODES"] == out["WORLD_SIZE"] == "1"
    assert out["CARME_MASTER_NODE"] == "gpu07"
    assert set(out) == set(NAMES)
    # no node list at all (not in a job): still one node, no node names
    assert rendezvous_env({}, "127.0.0.1", 1)["WORLD_SIZE"] == "1"


@pytest.mark.parametrize(("addr", "port"), [("", 1), ("a b", 1), ("10.0.0.1", 0), ("10.0.0.1", 65536)])
def test_bad_address_or_port_refused(addr: str, port: int) -> None:
    with pytest.raises(ValueError, match="rendezvous"):
        rendezvous_env({}, addr, port)


def _job_env(tmp_path: Path, runtime: str, image: str) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_JOB_NUM_NODES": "2",
        "CARME_APP": "jupyterlab",
        "CARME_IMAGE": image,
        "CARME_RUNTIME": runtime,
        "CARME_WORKDIR": str(tmp_path),
        "CARME_SESSION_SECRET": SECRET,
        "HOME": str(tmp_path / "home"),
        "PATH": "/usr/bin:/bin",
        "SLURM_EXPORT_ENV": "PATH,CARME_APP,CARME_IMAGE,CARME_RUNTIME,CARME_WORKDIR,CARME_SESSION_SECRET",
    }


def _plan(tmp_path: Path, runtime: str, image: str) -> launch_plan.LaunchPlan:
    env = _job_env(tmp_path, runtime, image)
    config = RuntimeConfig.from_mapping({"bind_address": "127.0.0.1", "scratch_root": str(tmp_path / "scratch")})
    return launch_plan.plan_launch(
        env,
        load_apps([]),
        config,
        home=str(tmp_path / "home"),
        host="127.0.0.1",
        port=41234,
        socket_dir=str(tmp_path / "sock"),
        rendezvous=rendezvous_env(env, "10.89.0.11", 41000),
    )


def test_app_environment_has_the_rendezvous_and_keeps_slurm_job_variables(tmp_path: Path) -> None:
    """The notebook kernel and terminal inherit the app's environment: the rendezvous variables, and Slurm's job
    variables, which ``srun`` needs to start steps in the session's allocation."""
    plan = _plan(tmp_path, "none", sys.prefix)
    assert plan.env["MASTER_ADDR"] == "10.89.0.11"
    assert plan.env["MASTER_PORT"] == "41000"
    assert plan.env["WORLD_SIZE"] == plan.env["NNODES"] == "2"
    assert plan.env["SLURM_JOB_ID"] == "77" and plan.env["SLURM_JOB_NODELIST"] == "node[1-2]"
    assert "CARME_SESSION_SECRET" not in plan.env
    # sbatch's --export names: srun in the session would pass on only those (not MASTER_ADDR...): srun's default
    # (every variable) applies instead
    assert "SLURM_EXPORT_ENV" not in plan.env


def test_apptainer_app_gets_the_rendezvous_through_its_prefix(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "apptainer", "/opt/images/pytorch.sif")
    assert plan.env["APPTAINERENV_MASTER_ADDR"] == "10.89.0.11"  # apptainer --cleanenv passes only these
    assert plan.env["APPTAINERENV_WORLD_SIZE"] == "2"


ALLREDUCE = Path(__file__).resolve().parents[1] / "fixtures" / "multinode" / "allreduce_check.py"


def test_allreduce_check_sums_over_three_processes_from_the_rendezvous_variables() -> None:
    """The check the multi-node tests run with ``srun`` in a session, here as three local processes on 127.0.0.1."""
    env = rendezvous_env({"SLURM_JOB_NODELIST": "n[1-3]"}, "127.0.0.1", free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(ALLREDUCE)],
            env={**env, "SLURM_PROCID": str(rank), "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (1, 2, 0)  # the others start first and wait for rank 0
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    lines = sorted(out.strip() for out, _err in outs)
    assert [line.split()[1] for line in lines] == ["rank=0", "rank=1", "rank=2"]
    assert all(line.endswith(" sum=6") and " size=3 " in line for line in lines), lines


def test_allreduce_check_names_a_missing_variable() -> None:
    proc = subprocess.run(
        [sys.executable, str(ALLREDUCE)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1
    assert "MASTER_ADDR" in proc.stderr
