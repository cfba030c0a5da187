# SPDX-License-Identifier: GPL-3.0-or-later
"""Browser end-to-end test of the portal on the demo cluster (issue 6, acceptance).

Headless Debian chromium driven by Playwright against https://127.0.0.1:8443 (the demo head's nginx):
alice logs in with her LDAP password and TOTP (enrolled here, codes from pyotp), starts JupyterLab with 1 GPU,
waits for Connect, opens JupyterLab through the owner-checked proxy, runs a notebook cell (kernel websocket),
then stops the session and checks it left ``squeue``. On the way: bob is refused alice's session through the proxy
and the API, and the IDE's port on the node refuses requests without the session secret.

Needs the demo up and deployed (``make demo``: site.yml with ldap, carme_runtime and the portal). Runs as root on the
demo host: it reads the initial passwords from ``.secrets/demo/initial-passwords/`` and uses ``podman exec`` for
``squeue`` and the portal's admin CLI (TOTP reset, unlock), so every run starts from a fresh enrolment.
A screenshot per step goes to ``.artifacts/e2e/<run>/``. With ``CARME_E2E_SCREENSHOTS_TO_DOCS=1`` the README's two
pictures are taken again too (``docs_shot``): docs/images/dashboard.png and docs/images/session.png.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import AliceSession
from tests.fixtures.demo import Demo
from tests.fixtures.demo import alice_session
from tests.fixtures.demo import apps_origin
from tests.fixtures.demo import csrf_headers
from tests.fixtures.demo import fill_start_form
from tests.fixtures.demo import job_comment
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import squeue_has
from tests.fixtures.demo import submit_start_form
from tests.fixtures.demo import wait_connect_button
from tests.fixtures.demo import wait_gone
from tests.fixtures.jupyterlab import new_notebook
from tests.fixtures.jupyterlab import open_lab
from tests.fixtures.jupyterlab import run_cell

pytestmark = pytest.mark.e2e
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def docs_shot(page: Any, name: str) -> None:
    """The README's picture ``docs/images/<name>.png`` (1280x800, the viewport only), when
    CARME_E2E_SCREENSHOTS_TO_DOCS=1; a normal run leaves the tree alone. tests/docs/test_readme.py checks the files."""
    if os.environ.get("CARME_E2E_SCREENSHOTS_TO_DOCS") != "1":
        return
    size = page.viewport_size
    page.set_viewport_size({"width": 1280, "height": 800})
    page.wait_for_timeout(500)  # the page lays itself out again for the new size
    page.screenshot(path=str(DOCS_IMAGES / f"{name}.png"), full_page=False)
    if size:
        page.set_viewport_size(size)


@pytest.fixture(scope="module")
def portal(demo: Demo) -> Iterator[AliceSession]:
    yield from alice_session(demo)


def test_alice_logs_in_and_starts_jupyterlab_with_one_gpu(portal: AliceSession) -> None:
    on_head("scancel", "--user", "alice")  # leftovers of an interrupted run
    page, _ = login(portal.demo, "alice")
    portal.alice = page

    fill_start_form(page, app="jupyterlab", image="jupyter", gpus=1, time_minutes=30)
    portal.demo.steps.shot(page, "alice-start-form")
    portal.job_id = submit_start_form(page)
    assert portal.job_id > 0
    assert "1" in page.inner_text(f"tr[data-job='{portal.job_id}'] td:nth-child(5)")  # GPUs column
    portal.demo.steps.shot(page, "alice-submitted")

    wait_connect_button(page, portal.job_id)
    portal.demo.steps.shot(page, "alice-connect-button")
    docs_shot(page, "dashboard")  # docs/images/dashboard.png


def test_jupyterlab_loads_through_the_proxy_and_runs_a_cell(portal: AliceSession) -> None:
    assert portal.alice is not None and portal.job_id, "no running session (previous step failed)"
    lab = open_lab(portal.alice, portal.job_id)
    portal.demo.steps.shot(lab, "jupyterlab-loaded")

    new_notebook(lab)
    code = "import os; print('carme', 6 * 7, os.environ.get('CUDA_VISIBLE_DEVICES'))"
    text = run_cell(lab, code, "carme 42", 60)
    portal.demo.steps.shot(lab, "notebook-cell-executed")
    docs_shot(lab, "session")  # docs/images/session.png
    assert "carme 42" in text
    lab.close()


def test_bob_is_refused_alices_session(portal: AliceSession) -> None:
    assert portal.job_id, "no session (first step failed)"
    page, _ = login(portal.demo, "bob")
    context = page.context
    assert page.query_selector(f"tr[data-job='{portal.job_id}']") is None  # not on bob's dashboard
    proxied = page.goto(f"{BASE}/proxy/{portal.job_id}/lab")
    assert proxied is not None and proxied.status == 403
    portal.demo.steps.shot(page, "bob-proxy-403")
    api = context.request
    assert api.get(f"{BASE}/proxy/{portal.job_id}/api/kernels").status == 403
    # on the apps' origin: no apps cookie for her session, so to its Connect link, which refuses bob
    direct = page.goto(f"{apps_origin(portal.job_id)}/proxy/{portal.job_id}/lab")
    assert direct is not None and direct.status == 403 and direct.url.startswith(BASE), direct and direct.url
    stop = api.post(f"{BASE}/api/sessions/{portal.job_id}/stop", headers=csrf_headers(context))
    assert stop.status == 403, stop.text()
    assert api.get(f"{BASE}/sessions/{portal.job_id}/connect", max_redirects=0).status in (302, 403, 404)
    assert squeue_has(portal.job_id), "bob's attempt must not have stopped alice's session"
    context.close()


def test_the_ide_port_refuses_requests_without_the_secret(portal: AliceSession) -> None:
    assert portal.job_id, "no session (first step failed)"
    fields = dict(kv.split("=", 1) for kv in job_comment(portal.job_id).split(";") if "=" in kv)
    host, port = fields.get("host"), fields.get("port")
    assert host and port, f"no endpoint in the job comment {job_comment(portal.job_id)!r}"
    base = f"http://{host}:{port}/proxy/{portal.job_id}"
    # From the portal host (the only host nodes should accept app connections from): no token, no entry.
    for path, wrong in (("/api/status", ""), ("/api/kernels", "token not-the-secret")):
        argv = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", base + path]
        if wrong:
            argv[-1:-1] = ["-H", f"Authorization: {wrong}"]
        code = on_head(*argv).stdout.strip()
        assert code in ("401", "403"), f"{path} without the secret answered {code}"
    lab = on_head("curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", base + "/lab")
    code, _, where = lab.stdout.strip().partition(" ")
    assert code in ("401", "403") or (code == "302" and "login" in where), lab.stdout


def test_alice_stops_the_session_and_it_leaves_squeue(portal: AliceSession) -> None:
    assert portal.alice is not None and portal.job_id, "no session (first step failed)"
    page = portal.alice
    page.goto(f"{BASE}/")
    page.click(f"tr[data-job='{portal.job_id}'] a.stop")  # Stop asks first (issue 30)
    page.click("#stop-dialog button.stop")
    page.wait_for_load_state()
    portal.demo.steps.shot(page, "alice-stopped")
    wait_gone(portal.job_id)
    portal.stopped = True
    page.reload()
    portal.demo.steps.shot(page, "alice-dashboard-after-stop")
