# SPDX-License-Identifier: GPL-3.0-or-later
"""Browser end-to-end test of sessions in an Apptainer SIF on the Debian 13 demo (issue 33, acceptance).

On the default demo (Debian 13, ``make demo``) the nodes run Apptainer (roles/apptainer, test-bed source; podman's
``--security-opt unmask=ALL``), and the catalogue's ``base`` is the SIF of ``images/session/base.def``
(scripts/session-images.sh, carme_admin/sif_cache.py). alice starts JupyterLab in it from the portal; a notebook cell
prints the image's ``/etc/os-release`` (Debian 12's: the image, not the Debian 13 node), Apptainer's mark
(``APPTAINER_NAME``) and her uid. bob cannot reach the session: the portal's proxy answers 403, alice's front on the
node answers bob 403 without the session's secret, and JupyterLab has no TCP port on the node at all (a Unix socket
in alice's 0700 directory, which refuses bob). An altered copy of the SIF, registered by carol with the real SIF's
digest, makes alice's session fail within seconds, with the reason on her dashboard.

Skipped at collection unless the demo's nodes are Debian 13 (``CARME_RELEASE=bookworm make demo`` has
Charliecloud: its equivalent is ``test_containers_e2e.py``). Runs as root on the demo host (``podman exec``, and it
writes the altered SIF into /var/lib/carme/images/apptainer, which the nodes mount read-only; removed again).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_promises_proxy_e2e import UNIX_CONNECT
from tests.e2e.test_promises_proxy_e2e import as_bob_on
from tests.e2e.test_promises_proxy_e2e import bob_gets
from tests.e2e.test_promises_proxy_e2e import comment_fields
from tests.e2e.test_promises_proxy_e2e import node_of
from tests.e2e.test_promises_proxy_e2e import on_node
from tests.fixtures.demo import BASE
from tests.fixtures.demo import AliceSession
from tests.fixtures.demo import Demo
from tests.fixtures.demo import alice_session
from tests.fixtures.demo import demo_debian_version
from tests.fixtures.demo import fill_start_form
from tests.fixtures.demo import job_comment
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import submit_start_form
from tests.fixtures.demo import wait_connect_button
from tests.fixtures.demo import wait_gone
from tests.fixtures.jupyterlab import new_notebook
from tests.fixtures.jupyterlab import open_lab
from tests.fixtures.jupyterlab import run_cell

REF = Path(os.environ.get("CARME_E2E_SIF_REF", "/var/lib/carme/images/apptainer/carme-base-1.0.ref"))
ALTERED = "e2e-altered-sif"


if not demo_debian_version().startswith("13"):
    pytest.skip("the Debian 13 demo (make demo), whose runtime is Apptainer", allow_module_level=True)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def session(demo: Demo) -> Iterator[AliceSession]:
    yield from alice_session(demo)


def start(page: Any, image: str) -> int:
    fill_start_form(page)
    options = page.inner_text("select[name=image]")
    assert f"{image} (container" in options, f"no container image {image!r} in the start form: {options!r}"
    fill_start_form(page, app="jupyterlab", image=image, gpus=0, time_minutes=30)
    return submit_start_form(page)


def test_the_catalogue_offers_the_sif_and_the_nodes_run_apptainer() -> None:
    reference = REF.read_text().strip()
    assert reference.startswith(f"{REF.parent}/carme-base-1.0.sif@sha256:"), reference
    for node in ("node1", "node2"):
        version = on_node(node, "apptainer", "--version")
        assert version.returncode == 0 and version.stdout.startswith("apptainer version 1."), version
    config = on_head("cat", "/etc/carme/webui/config.py").stdout  # the portal's settings, a JSON string in Python
    assert 'CONTAINER_RUNTIME\\": \\"apptainer\\"' in config


def test_alice_starts_jupyterlab_in_the_apptainer_image(session: AliceSession) -> None:
    on_head("scancel", "--user", "alice")
    page, _ = login(session.demo, "alice")
    session.alice = page
    session.job_id = start(page, "base")
    session.demo.steps.shot(page, "alice-apptainer-submitted")
    wait_connect_button(page, session.job_id)
    assert "state=ready" in job_comment(session.job_id)
    session.demo.steps.shot(page, "alice-apptainer-connect")


def test_a_cell_prints_the_images_os_release_and_alices_uid(session: AliceSession) -> None:
    assert session.alice is not None and session.job_id, "no running session (previous step failed)"
    lab = open_lab(session.alice, session.job_id)
    new_notebook(lab)
    code = (
        "import os; print('AP', os.getuid(), os.environ.get('APPTAINER_NAME'), "
        "'OS', open('/etc/os-release').read().replace(chr(10), ' | '))"
    )
    text = run_cell(lab, code, "AP ", 90)
    session.demo.steps.shot(lab, "apptainer-cell-executed")
    lab.close()
    uid = on_head("id", "-u", "alice").stdout.strip()
    assert text.split()[:3] == ["AP", uid, "carme-base-1.0.sif"], text
    shown = text.split(" OS ", 1)[1].strip()
    assert 'VERSION_ID="12"' in shown, shown  # the image's release (Debian 12 base tree) ...
    node = node_of(session.job_id)
    assert 'VERSION_ID="13"' in on_node(node, "cat", "/etc/os-release").stdout  # ... not its Debian 13 node's


def test_bob_cannot_reach_alices_apptainer_session(session: AliceSession) -> None:
    assert session.job_id, "no session (first step failed)"
    job = session.job_id
    page, _ = login(session.demo, "bob")
    proxied = page.goto(f"{BASE}/proxy/{job}/lab")
    assert proxied is not None and proxied.status == 403
    session.demo.steps.shot(page, "bob-apptainer-proxy-403")
    page.context.close()
    fields, node = comment_fields(job), node_of(job)
    front = f"http://{fields['host']}:{fields['port']}/proxy/{job}/api/status"
    for extra in ([], ["X-Carme-Front: 00"]):
        code = bob_gets(node, front, *extra)
        assert code.stdout.strip() == "403", (extra, code.stdout, code.stderr)
    conn = json.loads(on_node(node, "cat", f"/home/alice/.carme/sessions/{job}.json").stdout)
    assert conn["isolation"] == "socket" and conn["app_port"] is None, conn  # no TCP port of JupyterLab's
    assert as_bob_on(node, "python3", "-c", UNIX_CONNECT, conn["app_socket"]).stdout.strip() == "PermissionError"


def test_alice_stops_the_apptainer_session(session: AliceSession) -> None:
    assert session.alice is not None and session.job_id, "no session (first step failed)"
    page = session.alice
    page.goto(f"{BASE}/")
    page.click(f"tr[data-job='{session.job_id}'] a.stop")
    page.click("#stop-dialog button.stop")
    page.wait_for_load_state()
    wait_gone(session.job_id)
    session.stopped = True


def altered_copy(sif: Path) -> Path:
    """A copy of ``sif`` with one byte flipped in its middle, next to it (the nodes see it at the same path)."""
    altered = sif.with_name("e2e-altered.sif")
    shutil.copyfile(sif, altered)
    with altered.open("r+b") as fh:
        fh.seek(altered.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    altered.chmod(0o644)
    return altered


def register(carol: Any, name: str, image: str) -> None:
    carol.goto(f"{BASE}/admin/images")
    carol.fill("input[name=name]", name)
    carol.select_option("select[name=kind]", "container")
    carol.fill("input[name=image]", image)
    carol.fill("input[name=allowed_apps]", "jupyterlab")
    carol.get_by_role("button", name="Save").click()
    carol.wait_for_load_state()


def disable(carol: Any, name: str) -> None:
    carol.goto(f"{BASE}/admin/images")
    row = carol.locator("tr", has_text=name).first
    if row.count() and "Disable" in row.inner_text():
        row.get_by_role("button", name="Disable").click()
        carol.wait_for_load_state()


def test_an_altered_sif_is_refused_within_seconds_with_the_reason_on_the_dashboard(demo: Demo) -> None:
    path, digest = REF.read_text().strip().split("@", 1)
    altered = altered_copy(Path(path))
    carol, _ = login(demo, "carol")
    try:
        register(carol, ALTERED, f"{altered}@{digest}")  # the real SIF's digest, the altered file
        on_head("scancel", "--user", "alice")
        alice, _ = login(demo, "alice")
        job_id = start(alice, ALTERED)
        started = time.monotonic()
        row = f"tr[data-job='{job_id}']"
        shown = ""
        while time.monotonic() - started < 60 and "registered digest" not in shown:
            time.sleep(2)
            alice.goto(f"{BASE}/")
            shown = alice.inner_text(row) if alice.query_selector(row) else "(row gone)"
        took = time.monotonic() - started
        demo.steps.shot(alice, "alice-altered-sif-refused")
        assert "does not match its registered digest" in shown, (shown, job_comment(job_id))
        assert took < 60, took
        assert alice.query_selector(f"{row}[data-failed]") is not None
        wait_gone(job_id)
        alice.context.close()
    finally:
        disable(carol, ALTERED)
        carol.context.close()
        altered.unlink(missing_ok=True)
