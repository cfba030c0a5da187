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
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from carme_runtime.hostlist import expand_hostlist
from tests.fixtures.demo import BASE
from tests.fixtures.demo import NODE_PREFIX
from tests.fixtures.demo import AliceSession
from tests.fixtures.demo import Demo
from tests.fixtures.demo import alice_session
from tests.fixtures.demo import apps_origin
from tests.fixtures.demo import csrf_headers
from tests.fixtures.demo import job_comment
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import run

pytestmark = pytest.mark.e2e

CONNECT_TIMEOUT_S = float(os.environ.get("CARME_E2E_CONNECT_TIMEOUT", "300"))
CHECK_TIMEOUT_S = 900.0  # mpicc plus four steps (two import torch), on two small nodes
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "multinode"
FILES = ("session_check.py", "mpi_hello.c", "torch_allreduce_check.py")
NODES = 2


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

    page.goto(f"{BASE}/sessions/new")
    page.select_option("select[name=app]", "jupyterlab")
    page.select_option("select[name=image]", "jupyter")
    page.fill("input[name=gpus]", "0")
    page.fill("input[name=nodes]", str(NODES))
    page.fill("input[name=time_minutes]", "30")
    portal.demo.steps.shot(page, "alice-start-form-two-nodes")
    page.get_by_role("button", name="Start", exact=True).click()
    row = page.wait_for_selector("tr[data-job]", timeout=20_000)
    portal.job_id = int(row.get_attribute("data-job") or 0)
    assert portal.job_id > 0

    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while page.query_selector(f"tr[data-job='{portal.job_id}'] a.connect") is None:
        state = (
            page.inner_text(f"tr[data-job='{portal.job_id}'] td:nth-child(4)")
            if page.query_selector(f"tr[data-job='{portal.job_id}']")
            else "gone"
        )
        assert time.monotonic() < deadline, f"no Connect button after {CONNECT_TIMEOUT_S:.0f} s (state: {state})"
        assert state != "gone" and not state.startswith(("FAILED", "CANCELLED", "COMPLETED", "TIMEOUT")), state
        time.sleep(3)
        page.reload()
    nodes = job_nodes(portal.job_id)
    assert len(nodes) == NODES, nodes
    assert f"{NODES} nodes: {', '.join(nodes)}" in page.inner_text(f"tr[data-job='{portal.job_id}']")
    portal.demo.steps.shot(page, "alice-two-node-session-ready")


def run_cell(lab: Any, code: str, expect: str, timeout_s: float) -> str:
    """Type ``code`` into the notebook's first cell, run it, return the output that contains ``expect``."""
    cell = lab.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
    for _ in range(3):  # an editor re-rendered while typing loses the keystrokes: type again into the new one
        cell.click()
        lab.keyboard.press("Control+A")
        lab.keyboard.type(code)
        if cell.inner_text().strip() == code:
            break
    assert cell.inner_text().strip() == code, cell.inner_text()
    running = ".jp-NotebookPanel .jp-Cell .jp-InputPrompt:has-text('*')"
    output = f".jp-NotebookPanel .jp-OutputArea-output:has-text('{expect}')"
    for _ in range(4):
        # Right after the kernel turns idle, JupyterLab may drop the first execute request (the cell stays "[ ]"):
        # ask again until the cell runs ("[*]") or has its output.
        cell.click()
        lab.keyboard.press("Control+Enter")
        try:
            lab.wait_for_selector(f"{running}, {output}", timeout=20_000)
            break
        except PlaywrightTimeout:
            continue
    out = lab.wait_for_selector(output, timeout=timeout_s * 1000)
    return str(out.inner_text())


def test_mpi_hello_and_the_rendezvous_over_both_nodes_from_the_notebook(portal: AliceSession) -> None:
    assert portal.alice is not None and portal.job_id, "no running session (previous step failed)"
    nodes = job_nodes(portal.job_id)
    assert len(nodes) == NODES, nodes
    first = nodes[0]
    workdir = f"{alice_home()}/carme-e2e-multinode"
    # alice's home is shared by every node (docs/testbed.md): written once, on the node the notebook runs on
    on_node(first, "runuser", "-u", "alice", "--", "rm", "-rf", workdir)
    made = on_node(first, "runuser", "-u", "alice", "--", "mkdir", "-p", workdir)
    assert made.returncode == 0, made.stderr
    for name in FILES:
        wrote = on_node(
            first, "runuser", "-u", "alice", "--", "tee", f"{workdir}/{name}", stdin=(FIXTURES / name).read_text()
        )
        assert wrote.returncode == 0, wrote.stderr

    page = portal.alice
    with page.context.expect_page() as new_page:
        page.click(f"tr[data-job='{portal.job_id}'] a.connect")
    lab = new_page.value
    lab.wait_for_load_state()
    assert lab.url.startswith(f"{apps_origin(portal.job_id)}/proxy/{portal.job_id}/"), lab.url
    lab.wait_for_selector(".jp-LabShell", timeout=60_000)
    lab.goto(lab.url.split("?")[0].split("#")[0] + "?reset")
    lab.wait_for_selector(".jp-LauncherCard", timeout=60_000)
    lab.click(".jp-LauncherCard[data-category='Notebook']")
    lab.wait_for_selector(".jp-NotebookPanel .jp-Cell .cm-content", timeout=60_000)
    lab.wait_for_selector(".jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
    code = (
        "import subprocess, sys; "
        f"r = subprocess.run([sys.executable, '{workdir}/session_check.py'], capture_output=True, text=True); "
        "print(r.stdout.strip() or r.stderr[-500:])"
    )
    text = run_cell(lab, code, "carme-multinode rc=", CHECK_TIMEOUT_S)
    portal.demo.steps.shot(lab, "notebook-multinode-check")
    lab.close()

    raw = on_node(first, "runuser", "-u", "alice", "--", "cat", f"{workdir}/results.json")  # root may be squashed
    assert raw.returncode == 0, f"no results.json; the cell printed {text!r}"
    results = json.loads(raw.stdout)
    steps = results["steps"]
    for name, step in steps.items():
        assert step["rc"] == 0, f"{name}: {step['argv']} exited {step['rc']}\n{step['stdout']}\n{step['stderr']}"
    assert "carme-multinode rc=0" in text, text

    # the rendezvous variables of the session: the first node, a port, both nodes
    env = results["env"]
    host = dict(kv.split("=", 1) for kv in job_comment(portal.job_id).split(";") if "=" in kv).get("host")
    assert env["MASTER_ADDR"] == host, (env, host)  # the first node's address, where the app's front listens
    assert env["MASTER_PORT"] and 0 < int(env["MASTER_PORT"]) < 65536, env
    assert env["WORLD_SIZE"] == env["NNODES"] == str(NODES), env
    assert env["CARME_NODES"] == ",".join(nodes) and env["CARME_MASTER_NODE"] == first, env

    hostnames = {run(["podman", "exec", NODE_PREFIX + n, "hostname"]).stdout.strip() for n in nodes}
    assert len(hostnames) == NODES, hostnames
    # MPI: one rank per node, each names its node, and the all-reduce of rank+1 is 1+2
    hello = re.findall(r"mpi-hello rank=(\d+) size=(\d+) node=(\S+) sum=(\d+)", steps["hello"]["stdout"])
    assert sorted(r for r, _, _, _ in hello) == ["0", "1"], steps["hello"]
    assert {size for _, size, _, _ in hello} == {str(NODES)} and {s for _, _, _, s in hello} == {"3"}, hello
    assert {node for _, _, node, _ in hello} == hostnames, (hello, hostnames)
    # torch.distributed (gloo): one process per node met at the session's MASTER_ADDR:MASTER_PORT, all-reduced
    # rank+1 to 1+2 on every rank, and rank 0 gathered every rank's node
    pattern = r"torch-allreduce rank=(\d+) size=(\d+) node=(\S+) master=(\S+) sum=(\d+)"
    reduced = re.findall(pattern, steps["torch"]["stdout"])
    assert sorted(r for r, _, _, _, _ in reduced) == ["0", "1"], steps["torch"]
    assert {size for _, size, _, _, _ in reduced} == {str(NODES)}, reduced
    assert {node for _, _, node, _, _ in reduced} == hostnames, reduced
    assert {m for _, _, _, m, _ in reduced} == {f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"}, reduced
    assert {s for _, _, _, _, s in reduced} == {"3"}, reduced
    torch = results["torch"]
    assert torch is not None, f"rank 0 wrote no torch_allreduce.json: {steps['torch']}"
    assert torch["sum"] == 3 and torch["world_size"] == NODES and torch["backend"] == "gloo", torch
    assert len(torch["nodes"]) == NODES and set(torch["nodes"]) == hostnames, (torch, hostnames)
    assert torch["nodes"][0] == first, torch  # rank 0 (SLURM_PROCID 0) runs on the first node, at MASTER_ADDR
    assert torch["launcher"] == "srun", torch
    # mpirun: Open MPI started its daemons through Slurm inside the allocation (no ssh on the demo nodes), one rank
    # on each node, and the ranks all-reduced
    by_mpirun = re.findall(r"mpi-hello rank=(\d+) size=(\d+) node=(\S+) sum=(\d+)", steps["mpirun"]["stdout"])
    assert sorted(r for r, _, _, _ in by_mpirun) == ["0", "1"], steps["mpirun"]
    assert {(size, s) for _, size, _, s in by_mpirun} == {(str(NODES), "3")}, by_mpirun
    assert {node for _, _, node, _ in by_mpirun} == hostnames, (by_mpirun, hostnames)
    # torchrun: one agent per node (srun), met at the session's MASTER_ADDR:MASTER_PORT (c10d); its workers got
    # RANK/WORLD_SIZE and their own master from torchrun, and all-reduced over both nodes
    elastic = re.findall(pattern, steps["torchrun"]["stdout"])
    assert sorted(r for r, _, _, _, _ in elastic) == ["0", "1"], steps["torchrun"]
    assert {(size, s) for _, size, _, _, s in elastic} == {(str(NODES), "3")}, elastic
    assert {node for _, _, node, _, _ in elastic} == hostnames, elastic
    run_by_torchrun = results["torchrun"]
    assert run_by_torchrun is not None, f"rank 0 wrote no torchrun_allreduce.json: {steps['torchrun']}"
    assert run_by_torchrun["launcher"] == "torchrun" and run_by_torchrun["sum"] == 3, run_by_torchrun
    assert set(run_by_torchrun["nodes"]) == hostnames and run_by_torchrun["backend"] == "gloo", run_by_torchrun
