# SPDX-License-Identifier: GPL-3.0-or-later
"""Storage on the demo (issue 17, acceptance), with ``carme_storage_backend: existing`` (the demo's /home is a podman
volume shared by the three containers; playbooks/storage.yml checks it is mounted and creates the dataset):

* a file alice writes in her home on node1 is visible on node2 and on the head, owned by her UID (20001);
* the declared dataset ``demo-samples`` (/srv/datasets/demo-samples, inventories/demo/group_vars/all/storage.yml) is
  readable and not writable for alice on every node, directly and inside a Slurm job of hers;
* the portal's start form lists it as read-only, the dashboard says storage quotas are not available (no BeeGFS), and
  a session alice starts from the portal finds it at ``~/datasets/demo-samples`` (read, never written).

Runs as root on the demo host through ``podman exec`` and ``runuser -u alice`` (as the other e2e tests do); skips
without a demo unless ``CARME_E2E_REQUIRED=1``.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import HEAD
from tests.fixtures.demo import Demo
from tests.fixtures.demo import fill_start_form
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import run
from tests.fixtures.demo import submit_start_form
from tests.fixtures.demo import wait_gone

pytestmark = pytest.mark.e2e

USER = "alice"
UID = "20001"
NODES = {"head": HEAD, "node1": "carme-demo-node1", "node2": "carme-demo-node2"}
DATASET = "demo-samples"
DATASET_PATH = f"/srv/datasets/{DATASET}"
CONNECT_TIMEOUT_S = float(os.environ.get("CARME_E2E_CONNECT_TIMEOUT", "300"))


def as_alice(container: str, *argv: str, stdin: str | None = None) -> Any:
    return run(["podman", "exec", "-i", container, "runuser", "-u", USER, "--", *argv], stdin=stdin)


def test_a_file_alice_writes_on_node1_is_hers_on_node2_and_the_head(demo: Demo) -> None:
    name = f"/home/{USER}/carme-e2e-storage-{secrets.token_hex(4)}.txt"
    text = f"written on node1 {time.time()}\n"
    try:
        wrote = as_alice(NODES["node1"], "tee", name, stdin=text)
        assert wrote.returncode == 0, wrote.stderr
        for node in ("node2", "head"):
            seen = run(["podman", "exec", NODES[node], "stat", "--format=%u %U", name])
            assert seen.returncode == 0, (node, seen.stderr)
            assert seen.stdout.split() == [UID, USER], (node, seen.stdout)
            read = as_alice(NODES[node], "cat", name)
            assert read.returncode == 0 and read.stdout == text, (node, read.stdout, read.stderr)
    finally:
        as_alice(NODES["node1"], "rm", "-f", name)


@pytest.mark.parametrize("node", sorted(NODES))
def test_the_dataset_is_readable_and_not_writable_for_alice(demo: Demo, node: str) -> None:
    container = NODES[node]
    st = run(["podman", "exec", container, "stat", "--format=%U %a", DATASET_PATH])
    assert st.stdout.split() == ["root", "755"], (node, st.stdout, st.stderr)
    read = as_alice(container, "cat", f"{DATASET_PATH}/README.txt")
    assert read.returncode == 0 and read.stdout.startswith(f"{DATASET}:"), (node, read.stdout, read.stderr)
    for argv in (("touch", f"{DATASET_PATH}/alice-was-here"), ("rm", "-f", f"{DATASET_PATH}/README.txt")):
        denied = as_alice(container, *argv)
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, (node, argv, denied.stderr)
    assert run(["podman", "exec", container, "test", "-e", f"{DATASET_PATH}/alice-was-here"]).returncode != 0


@pytest.mark.parametrize("node", ["node1", "node2"])
def test_the_dataset_is_read_only_inside_alices_job(demo: Demo, node: str) -> None:
    srun = ["runuser", "-u", USER, "--", "srun", f"--nodelist={node}", "--mem=100", "--time=2", "--chdir=/tmp"]
    read = on_head(*srun, "cat", f"{DATASET_PATH}/README.txt", timeout=120)
    assert read.returncode == 0 and read.stdout.startswith(f"{DATASET}:"), (node, read.stdout, read.stderr)
    write = on_head(*srun, "touch", f"{DATASET_PATH}/from-a-job", timeout=120)
    assert write.returncode != 0 and "Permission denied" in write.stderr, (node, write.stdout, write.stderr)


@pytest.fixture(scope="module")
def alice_page(demo: Demo) -> Iterator[Any]:
    page, _ = login(demo, USER)
    yield page
    page.context.close()


def test_the_start_form_lists_the_dataset_read_only(demo: Demo, alice_page: Any) -> None:
    alice_page.goto(f"{BASE}/sessions/new")
    item = alice_page.wait_for_selector(f"li[data-dataset='{DATASET}']", timeout=20_000)
    text = item.inner_text()
    assert f"~/datasets/{DATASET}" in text and DATASET_PATH in text and "(read-only)" in text, text
    demo.steps.shot(alice_page, "alice-start-form-datasets")
    alice_page.goto(f"{BASE}/")
    assert "Storage quotas are not available on this cluster." in alice_page.inner_text("body")


def test_alices_portal_session_finds_the_dataset_in_her_home(demo: Demo, alice_page: Any) -> None:
    on_head("scancel", "--user", USER)  # leftovers of an interrupted run
    page = alice_page
    fill_start_form(page, app="jupyterlab", image="jupyter", gpus=0, time_minutes=15)
    job_id = submit_start_form(page)
    assert job_id > 0
    try:
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while page.query_selector(f"tr[data-job='{job_id}'] a.connect") is None:
            assert time.monotonic() < deadline, f"session {job_id} not ready after {CONNECT_TIMEOUT_S:.0f} s"
            time.sleep(3)
            page.reload()
        demo.steps.shot(page, "alice-session-with-dataset")
        node = on_head("squeue", "--noheader", "--format=%N", "--jobs", str(job_id)).stdout.strip()
        assert node in NODES, node
        link = f"/home/{USER}/datasets/{DATASET}"
        target = as_alice(NODES[node], "readlink", link)
        assert target.stdout.strip() == DATASET_PATH, (link, target.stdout, target.stderr)
        read = as_alice(NODES[node], "cat", f"{link}/README.txt")
        assert read.returncode == 0 and read.stdout.startswith(f"{DATASET}:"), read.stderr
        denied = as_alice(NODES[node], "touch", f"{link}/from-the-session")
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied.stderr
    finally:
        on_head("scancel", str(job_id))
        wait_gone(job_id)


def test_the_storage_play_passes_check_mode_with_beegfs_on_the_demo(demo: Demo) -> None:
    """``--check`` is read-only: it reports the BeeGFS packages and key it would fetch (not in Debian, the vendor's
    repository unreachable) instead of failing on them, and leaves the demo as it is."""
    import subprocess
    import sys

    from tests.fixtures.demo import REPO
    from tests.roles.harness import ansible_env

    before = run(["podman", "exec", NODES["node1"], "test", "-e", "/etc/beegfs"]).returncode
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        str(REPO / "playbooks" / "storage.yml"),
        "-i",
        str(REPO / "inventories" / "demo"),
        "--check",
        "-e",
        "carme_storage_backend=beegfs",
    ]
    proc = subprocess.run(argv, cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "check mode: would install beegfs-mgmtd, beegfs-meta, beegfs-storage" in out
    assert "check mode: would install beegfs-client, beegfs-helperd, beegfs-utils" in out
    assert "failed=0" in out and "unreachable=0" in out
    assert run(["podman", "exec", NODES["node1"], "test", "-e", "/etc/beegfs"]).returncode == before
