# SPDX-License-Identifier: GPL-3.0-or-later
"""Browser end-to-end test of a multi-node session on the demo cluster (issue 15, acceptance).

alice starts a 2-node JupyterLab session from the portal's start form (no GPUs: the demo's interactive QOS allows one
GPU per user, and GPUs are per node), waits for Connect, opens JupyterLab through the proxy and, from a notebook
cell, runs ``tests/fixtures/multinode/session_check.py`` (copied into her home, which every node shares): it builds
an MPI hello world with ``mpicc``, runs it with ``srun --mpi=pmix`` over the session's allocation, and runs a real
``torch.distributed`` all-reduce (``torch_allreduce_check.py``: gloo backend, CPU) the same way with the nodes'
system Python, one process per node, ``init_method="env://"`` meeting at the session's own ``MASTER_ADDR`` and
``MASTER_PORT`` (rank = ``SLURM_PROCID``, world = ``WORLD_SIZE``). The test then reads its ``results.json``: both
node names from MPI, the torch all-reduce sum over both nodes (1 + 2) and the node of each rank, and the rendezvous
variables pointing at the first node; then the same program started by Open MPI's ``mpirun`` (its daemons launched
by Slurm inside the allocation) and the same all-reduce started by ``torchrun`` (one agent per node, c10d rendezvous
at the session's ``MASTER_ADDR:MASTER_PORT``), each over both nodes. Before that, the portal refuses 3 nodes with a
400 naming ``nodes``, and the interactive QOS carries the same limit for every submission (MaxTRESPerJob=node=2).

Needs the demo deployed with the slurm role's PMIx/Open MPI packages on the nodes and MpiDefault=pmix, and Debian's
``python3-torch`` (1.13, CPU) on the compute nodes (``carme_runtime_node_apt_packages`` in inventories/demo; site.yml).
Runs as root on the demo host (``podman exec`` for squeue, sacctmgr and to copy the check into alice's home).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from carme_runtime.hostlist import expand_hostlist
from tests.fixtures.demo import BASE
from tests.fixtures.demo import NODE_PREFIX
from tests.fixtures.demo import AliceSession
from tests.fixtures.demo import Demo
from tests.fixtures.demo import alice_session
from tests.fixtures.demo import csrf_headers
from tests.fixtures.demo import fill_start_form
from tests.fixtures.demo import job_comment
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import run
from tests.fixtures.demo import submit_start_form
from tests.fixtures.demo import wait_connect_button
from tests.fixtures.jupyterlab import new_notebook
from tests.fixtures.jupyterlab import open_lab
from tests.fixtures.jupyterlab import run_cell

pytestmark = pytest.mark.e2e

CHECK_TIMEOUT_S = 900.0  # mpicc plus four steps (two import torch), on two small nodes
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "multinode"
FILES = ("session_check.py", "mpi_hello.c", "torch_allreduce_check.py")
NODES = 2
HELLO = r"mpi-hello rank=(\d+) size=(\d+) node=(\S+) sum=(\d+)"
ALLREDUCE = r"torch-allreduce rank=(\d+) size=(\d+) node=(\S+) master=(\S+) sum=(\d+)"


@pytest.fixture(scope="module")
def portal(demo: Demo) -> Iterator[AliceSession]:
    yield from alice_session(demo)


def job_nodes(job_id: int) -> list[str]:
    return expand_hostlist(on_head("squeue", "--noheader", "--format=%N", "--jobs", str(job_id)).stdout.strip())


def on_node(node: str, *argv: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run(["podman", "exec", "-i", NODE_PREFIX + node, *argv], stdin=stdin, timeout=timeout)


def alice_home() -> str:
    entry = on_head("getent", "passwd", "alice").stdout.strip().split(":")
    assert len(entry) == 7 and entry[5].startswith("/"), entry
    return entry[5]


def test_the_interactive_qos_limits_nodes_per_job(demo: Demo) -> None:
    """Slurm's own limit, for every submission path (sbatch too): the portal's SESSION_MAX_NODES is the same."""
    out = on_head("sacctmgr", "--noheader", "--parsable2", "show", "qos", "interactive", "format=MaxTRES")
    assert f"node={NODES}" in out.stdout.strip().split(","), out.stdout


def test_alice_starts_a_two_node_session_from_the_portal(portal: AliceSession) -> None:
    on_head("scancel", "--user", "alice")  # leftovers of an interrupted run
    page, _ = login(portal.demo, "alice")
    portal.alice = page

    # more nodes than the policy: refused with the field named, nothing submitted
    before = on_head("squeue", "--noheader", "--user", "alice", "--format=%i").stdout.split()
    too_many = page.context.request.post(
        f"{BASE}/api/sessions",
        data={"app": "jupyterlab", "image": "jupyter", "gpus": 0, "nodes": NODES + 1, "time_minutes": 5},
        headers=csrf_headers(page.context),
    )
    assert too_many.status == 400 and too_many.json()["error"].startswith("nodes:"), too_many.text()
    assert on_head("squeue", "--noheader", "--user", "alice", "--format=%i").stdout.split() == before

    fill_start_form(page, app="jupyterlab", image="jupyter", gpus=0, nodes=NODES, time_minutes=30)
    portal.demo.steps.shot(page, "alice-start-form-two-nodes")
    portal.job_id = submit_start_form(page)
    assert portal.job_id > 0

    wait_connect_button(page, portal.job_id)
    nodes = job_nodes(portal.job_id)
    assert len(nodes) == NODES, nodes
    assert f"{NODES} nodes: {', '.join(nodes)}" in page.inner_text(f"tr[data-job='{portal.job_id}']")
    portal.demo.steps.shot(page, "alice-two-node-session-ready")


def copy_the_check(node: str) -> str:
    """Copy the check's files into alice's home (shared by every node: written once, on ``node``); returns their
    folder."""
    workdir = f"{alice_home()}/carme-e2e-multinode"
    on_node(node, "runuser", "-u", "alice", "--", "rm", "-rf", workdir)
    made = on_node(node, "runuser", "-u", "alice", "--", "mkdir", "-p", workdir)
    assert made.returncode == 0, made.stderr
    for name in FILES:
        wrote = on_node(
            node, "runuser", "-u", "alice", "--", "tee", f"{workdir}/{name}", stdin=(FIXTURES / name).read_text()
        )
        assert wrote.returncode == 0, wrote.stderr
    return workdir


def run_the_check(portal: AliceSession, workdir: str) -> str:
    """Run session_check.py from a notebook cell of the session's JupyterLab; returns what the cell printed."""
    lab = open_lab(portal.alice, portal.job_id)
    new_notebook(lab)
    code = (
        "import subprocess, sys; "
        f"r = subprocess.run([sys.executable, '{workdir}/session_check.py'], capture_output=True, text=True); "
        "print(r.stdout.strip() or r.stderr[-500:])"
    )
    text = run_cell(lab, code, "carme-multinode rc=", CHECK_TIMEOUT_S)
    portal.demo.steps.shot(lab, "notebook-multinode-check")
    lab.close()
    return text


def check_rendezvous(env: dict[str, str], job_id: int, nodes: list[str]) -> None:
    """The rendezvous variables of the session: the first node, a port, both nodes."""
    host = dict(kv.split("=", 1) for kv in job_comment(job_id).split(";") if "=" in kv).get("host")
    assert env["MASTER_ADDR"] == host, (env, host)  # the first node's address, where the app's front listens
    assert env["MASTER_PORT"] and 0 < int(env["MASTER_PORT"]) < 65536, env
    assert env["WORLD_SIZE"] == env["NNODES"] == str(NODES), env
    assert env["CARME_NODES"] == ",".join(nodes) and env["CARME_MASTER_NODE"] == nodes[0], env


def check_mpi_hello(step: dict[str, Any], hostnames: set[str]) -> None:
    """One rank per node, each names its node, and the all-reduce of rank+1 is 1+2."""
    hello = re.findall(HELLO, step["stdout"])
    assert sorted(r for r, _, _, _ in hello) == ["0", "1"], step
    assert {(size, s) for _, size, _, s in hello} == {(str(NODES), "3")}, hello
    assert {node for _, _, node, _ in hello} == hostnames, (hello, hostnames)


def check_allreduce(step: dict[str, Any], hostnames: set[str]) -> list[tuple[str, ...]]:
    """One torch process per node, each names its node, and all-reduced rank+1 to 1+2; returns the ranks' lines."""
    reduced = re.findall(ALLREDUCE, step["stdout"])
    assert sorted(r for r, _, _, _, _ in reduced) == ["0", "1"], step
    assert {(size, s) for _, size, _, _, s in reduced} == {(str(NODES), "3")}, reduced
    assert {node for _, _, node, _, _ in reduced} == hostnames, reduced
    return list(reduced)


def check_torch(results: dict[str, Any], hostnames: set[str], first: str) -> None:
    """torch.distributed (gloo), started by srun: one process per node met at the session's
    MASTER_ADDR:MASTER_PORT, and rank 0 (SLURM_PROCID 0, on the first node) gathered every rank's node."""
    env, step = results["env"], results["steps"]["torch"]
    reduced = check_allreduce(step, hostnames)
    assert {m for _, _, _, m, _ in reduced} == {f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"}, reduced
    torch = results["torch"]
    assert torch is not None, f"rank 0 wrote no torch_allreduce.json: {step}"
    assert torch["sum"] == 3 and torch["world_size"] == NODES and torch["backend"] == "gloo", torch
    assert len(torch["nodes"]) == NODES and set(torch["nodes"]) == hostnames, (torch, hostnames)
    assert torch["nodes"][0] == first, torch  # rank 0 (SLURM_PROCID 0) runs on the first node, at MASTER_ADDR
    assert torch["launcher"] == "srun", torch


def check_torchrun(results: dict[str, Any], hostnames: set[str]) -> None:
    """torchrun: one agent per node (srun), met at the session's MASTER_ADDR:MASTER_PORT (c10d); its workers got
    RANK/WORLD_SIZE and their own master from torchrun, and all-reduced over both nodes."""
    step = results["steps"]["torchrun"]
    check_allreduce(step, hostnames)
    run_by_torchrun = results["torchrun"]
    assert run_by_torchrun is not None, f"rank 0 wrote no torchrun_allreduce.json: {step}"
    assert run_by_torchrun["launcher"] == "torchrun" and run_by_torchrun["sum"] == 3, run_by_torchrun
    assert set(run_by_torchrun["nodes"]) == hostnames and run_by_torchrun["backend"] == "gloo", run_by_torchrun


def test_mpi_hello_and_the_rendezvous_over_both_nodes_from_the_notebook(portal: AliceSession) -> None:
    assert portal.alice is not None and portal.job_id, "no running session (previous step failed)"
    nodes = job_nodes(portal.job_id)
    assert len(nodes) == NODES, nodes
    first = nodes[0]
    workdir = copy_the_check(first)
    text = run_the_check(portal, workdir)

    raw = on_node(first, "runuser", "-u", "alice", "--", "cat", f"{workdir}/results.json")  # root may be squashed
    assert raw.returncode == 0, f"no results.json; the cell printed {text!r}"
    results = json.loads(raw.stdout)
    steps = results["steps"]
    for name, step in steps.items():
        assert step["rc"] == 0, f"{name}: {step['argv']} exited {step['rc']}\n{step['stdout']}\n{step['stderr']}"
    assert "carme-multinode rc=0" in text, text

    check_rendezvous(results["env"], portal.job_id, nodes)
    hostnames = {run(["podman", "exec", NODE_PREFIX + n, "hostname"]).stdout.strip() for n in nodes}
    assert len(hostnames) == NODES, hostnames
    check_mpi_hello(steps["hello"], hostnames)
    check_torch(results, hostnames, first)
    # mpirun: Open MPI started its daemons through Slurm inside the allocation (no ssh on the demo nodes), one rank
    # on each node, and the ranks all-reduced
    check_mpi_hello(steps["mpirun"], hostnames)
    check_torchrun(results, hostnames)
