# SPDX-License-Identifier: GPL-3.0-or-later
"""Browser end-to-end test of sessions in a container image on the demo cluster (issue 13, acceptance).

alice starts JupyterLab from the portal in the container image ``base`` (built by ``carme image build base
--runtime charliecloud`` and registered with kind ``container``; the demo's nodes run it with Charliecloud's
``ch-run``), it answers through the owner-checked proxy, and a notebook cell shows the image's ``/etc/os-release``
(with ``/ch/labels.json``, a file only the image has, and ch-run's ``CH_RUNNING``), alice's UID from ``id`` and
writes a file into her home that the head sees with her ownership. bob, who is no admin, cannot register an image
(403, nothing stored). An entry whose digest does not match the image (registered here by carol, an admin, and
disabled again) makes a session fail within seconds with the reason in the job comment.

Needs the demo up and deployed with ``carme_container_runtime: charliecloud`` and the image built and registered
(``CARME_E2E_CONTAINER_IMAGE``, default ``base``). Runs as root on the demo host (``podman exec``).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.demo import BASE
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
from tests.fixtures.demo import wait_gone
from tests.fixtures.jupyterlab import new_notebook
from tests.fixtures.jupyterlab import open_lab
from tests.fixtures.jupyterlab import run_cell

IMAGE = os.environ.get("CARME_E2E_CONTAINER_IMAGE", "base")
NODE = os.environ.get("CARME_E2E_NODE", "carme-demo-node1")
IMAGE_PATH = os.environ.get("CARME_E2E_CONTAINER_PATH", "/var/lib/carme/images/carme-base-1.0")  # on the nodes
MARKER = "carme-container-e2e.txt"
BROKEN = "e2e-broken-digest"

pytestmark = pytest.mark.e2e


def _charliecloud_demo() -> bool:
    """The demo's nodes run Charliecloud sessions: always on Debian 12; on Debian 13 (Apptainer by default,
    tests/e2e/test_apptainer_e2e.py) only when deployed with ``carme_container_runtime=charliecloud``."""
    probe = f"grep -q '^13' /etc/debian_version || exit 0; command -v ch-run >/dev/null && test -d {IMAGE_PATH}"
    probe += " || exit 1"
    try:
        got = run(["podman", "exec", NODE, "sh", "-c", probe], timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return True  # no demo: the demo fixture says so
    return got.returncode != 1  # 1: Debian 13 without Charliecloud; podman's own failures: the demo fixture says so


if not _charliecloud_demo():
    pytest.skip("the Debian 13 demo runs Apptainer sessions (tests/e2e/test_apptainer_e2e.py)", allow_module_level=True)


@pytest.fixture(scope="module")
def session(demo: Demo) -> Iterator[AliceSession]:
    yield from alice_session(demo)


def start(page: Any, image: str) -> int:
    fill_start_form(page)
    options = page.inner_text("select[name=image]")
    assert f"{image} (container" in options, f"no container image {image!r} in the start form: {options!r}"
    fill_start_form(page, app="jupyterlab", image=image, gpus=1, time_minutes=30)
    return submit_start_form(page)


def test_alice_starts_jupyterlab_in_a_container_image(session: AliceSession) -> None:
    on_head("scancel", "--user", "alice")
    on_head("rm", "-f", f"/home/alice/{MARKER}")
    page, _ = login(session.demo, "alice")
    session.alice = page
    session.job_id = start(page, IMAGE)
    assert session.job_id > 0
    session.demo.steps.shot(page, "alice-container-submitted")
    wait_connect_button(page, session.job_id)
    assert "state=ready" in job_comment(session.job_id)
    session.demo.steps.shot(page, "alice-container-connect")


def test_a_cell_runs_inside_the_image_as_alice(session: AliceSession) -> None:
    assert session.alice is not None and session.job_id, "no running session (previous step failed)"
    lab = open_lab(session.alice, session.job_id)
    new_notebook(lab)
    code = (
        "import os, subprocess, pathlib; "
        f"pathlib.Path.home().joinpath('{MARKER}').write_text('written in the container'); "
        "print('CT', subprocess.run(['id', '-u'], capture_output=True, text=True).stdout.strip(), "
        "os.path.exists('/ch/labels.json'), os.environ.get('CH_RUNNING'), "
        "os.environ.get('CUDA_VISIBLE_DEVICES'), 'OS', open('/etc/os-release').read().replace(chr(10), ' | '))"
    )
    text = run_cell(lab, code, "CT ", 60)
    session.demo.steps.shot(lab, "container-cell-executed")
    lab.close()

    uid = on_head("id", "-u", "alice").stdout.strip()
    words = text.split()
    assert words[:5] == ["CT", uid, "True", "Weird", "Al"], text  # alice's UID, /ch/labels.json, ch-run's mark
    # the image's /etc/os-release (read from the image directory on the node), not the node's own
    image_path = IMAGE_PATH
    os_release = run(["podman", "exec", NODE, "cat", f"{image_path}/etc/os-release"]).stdout
    assert os_release.strip(), f"cannot read {image_path}/etc/os-release on {NODE}"
    shown = text.split(" OS ", 1)[1].strip()
    assert shown == os_release.replace("\n", " | ").strip(), (shown, os_release)
    owner = on_head("stat", "-c", "%U %u", f"/home/alice/{MARKER}")
    assert owner.returncode == 0, f"the head does not see /home/alice/{MARKER}: {owner.stderr}"
    assert owner.stdout.split() == ["alice", uid]


def test_alice_stops_the_container_session(session: AliceSession) -> None:
    assert session.alice is not None and session.job_id, "no session (first step failed)"
    page = session.alice
    page.goto(f"{BASE}/")
    page.click(f"tr[data-job='{session.job_id}'] a.stop")  # Stop asks first (issue 30)
    page.click("#stop-dialog button.stop")
    page.wait_for_load_state()
    wait_gone(session.job_id)
    session.stopped = True


def test_a_non_admin_cannot_register_an_image(demo: Demo) -> None:
    page, _ = login(demo, "bob")
    api = page.context.request
    form = {"name": "bobs-image", "kind": "container", "image": "/tmp/evil@sha256:" + "0" * 64,
            "allowed_apps": "jupyterlab", "description": "not allowed"}  # fmt: skip
    resp = api.post(f"{BASE}/admin/images", form=form, headers=csrf_headers(page.context), max_redirects=0)
    assert resp.status == 403, (resp.status, resp.text()[:200])
    page.goto(f"{BASE}/sessions/new")
    assert "bobs-image" not in page.inner_text("select[name=image]")
    demo.steps.shot(page, "bob-cannot-register-image")
    page.context.close()


def test_an_image_with_a_wrong_digest_fails_within_seconds_with_the_reason(demo: Demo) -> None:
    carol, _ = login(demo, "carol")
    carol.goto(f"{BASE}/admin/images")
    carol.fill("input[name=name]", BROKEN)
    carol.select_option("select[name=kind]", "container")
    carol.fill("input[name=image]", f"{IMAGE_PATH}@sha256:{'0' * 64}")
    carol.fill("input[name=allowed_apps]", "jupyterlab")
    carol.get_by_role("button", name="Save").click()
    carol.wait_for_load_state()
    try:
        on_head("scancel", "--user", "alice")
        alice, _ = login(demo, "alice")
        job_id = start(alice, BROKEN)
        started = time.monotonic()
        comment = ""
        while time.monotonic() - started < 60 and "state=failed" not in comment:
            time.sleep(2)
            # the job has ended by then (carme-launch exits 15): plain squeue lists running and pending jobs only
            comment = on_head("squeue", "--noheader", "--states=all", "--format=%k", "--jobs", str(job_id)).stdout
            comment = comment.strip()
        assert "state=failed" in comment and "reason=image" in comment, comment
        assert time.monotonic() - started < 60
        wait_gone(job_id)
        demo.steps.shot(alice, "alice-broken-image-failed")
        alice.context.close()
    finally:
        carol.goto(f"{BASE}/admin/images")
        row = carol.locator("tr", has_text=BROKEN).first
        if row.count() and "Disable" in row.inner_text():
            row.get_by_role("button", name="Disable").click()
            carol.wait_for_load_state()
        carol.context.close()


@pytest.mark.parametrize("node", ["carme-demo-node1", "carme-demo-node2"])
def test_every_compute_node_has_the_runtime(demo: Demo, node: str) -> None:
    """playbooks/runtime.yml installed Charliecloud's ch-run on every compute node, and the image is there."""
    version = run(["podman", "exec", "-e", "USER=root", node, "ch-run", "--version"])
    printed = version.stdout + version.stderr  # ch-run prints its version on stderr
    # Debian's charliecloud-runtime: 0.31 on Debian 12, 0.38 on Debian 13
    assert version.returncode == 0 and printed.startswith(("0.31", "0.38")), (version.stdout, version.stderr)
    assert run(["podman", "exec", node, "test", "-d", f"{IMAGE_PATH}/etc"]).returncode == 0, f"{IMAGE_PATH} on {node}"
