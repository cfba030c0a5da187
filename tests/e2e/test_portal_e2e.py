"""Browser end-to-end test of the portal on the demo cluster (issue 6, acceptance).

Headless Debian chromium driven by Playwright against https://127.0.0.1:8443 (the demo head's nginx):
alice logs in with her LDAP password and TOTP (enrolled here, codes from pyotp), starts JupyterLab with 1 GPU,
waits for Connect, opens JupyterLab through the owner-checked proxy, runs a notebook cell (kernel websocket),
then stops the session and checks it left ``squeue``. On the way: bob is refused alice's session through the proxy
and the API, and the IDE's port on the node refuses requests without the session secret.

Needs the demo up and deployed (``make demo``: site.yml with ldap, carme_runtime and the portal). Runs as root on the
demo host: it reads the initial passwords from ``.secrets/demo/initial-passwords/`` and uses ``podman exec`` for
``squeue`` and the portal's admin CLI (TOTP reset, unlock), so every run starts from a fresh enrolment.
A screenshot per step goes to ``.artifacts/e2e/<run>/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BASE = os.environ.get("CARME_E2E_URL", "https://127.0.0.1:8443")
HEAD = os.environ.get("CARME_E2E_HEAD", "carme-demo-head")
PASSWORDS = Path(os.environ.get("CARME_E2E_PASSWORDS", REPO / ".secrets" / "demo" / "initial-passwords"))
CHROMIUM = os.environ.get("CARME_E2E_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = REPO / ".artifacts" / "e2e" / time.strftime("%Y%m%d-%H%M%S")
CONNECT_TIMEOUT_S = float(os.environ.get("CARME_E2E_CONNECT_TIMEOUT", "300"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
PORTAL_CLI = [
    "podman", "exec", "-e", "CARME_WEBUI_CONFIG=/etc/carme/webui/config.py", HEAD,
    "runuser", "-u", "carme-portal", "--", "/opt/carme/webui-venv/bin/flask", "--app", "webui",
]  # fmt: skip

pytestmark = pytest.mark.e2e


def _portal_answers() -> str | None:
    """None when the portal answers its login page, else why not."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"{BASE}/auth/login", timeout=5, context=ctx) as resp:
            return None if resp.status == 200 else f"{BASE}/auth/login answered {resp.status}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{BASE} does not answer ({exc})"


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def squeue_has(job_id: int) -> bool:
    out = _run(["podman", "exec", HEAD, "squeue", "--noheader", "--format=%i", "--jobs", str(job_id)])
    # squeue exits non-zero for an unknown (purged) job id; both mean "not in the queue".
    return out.returncode == 0 and str(job_id) in out.stdout.split()


def job_comment(job_id: int) -> str:
    return _run(["podman", "exec", HEAD, "squeue", "--noheader", "--format=%k", "--jobs", str(job_id)]).stdout.strip()


@dataclass
class Steps:
    """Numbered screenshots, one per step."""

    directory: Path
    n: int = 0
    names: list[str] = field(default_factory=list)

    def shot(self, page: Any, name: str) -> None:
        self.n += 1
        path = self.directory / f"{self.n:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        self.names.append(path.name)


@dataclass
class Portal:
    browser: Any
    steps: Steps
    alice: Any = None  # alice's page
    job_id: int = 0
    stopped: bool = False


def login(context: Any, steps: Steps, user: str, password: str) -> Any:
    """Log in with password and a fresh TOTP enrolment; returns the page on the dashboard."""
    import pyotp

    page = context.new_page()
    page.goto(f"{BASE}/auth/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    steps.shot(page, f"{user}-login")
    page.click("button[type=submit]")
    page.wait_for_selector("code.secret", timeout=20_000)  # enrolment page: the key to type by hand
    secret = re.sub(r"\s", "", page.inner_text("code.secret"))
    steps.shot(page, f"{user}-totp-enrol")
    page.fill("input[name=code]", pyotp.TOTP(secret).now())
    page.click("button[type=submit]")
    page.wait_for_selector("text=My sessions", timeout=20_000)
    steps.shot(page, f"{user}-dashboard")
    return page


def fresh_account(user: str) -> None:
    """Forget the user's TOTP enrolment and lock (the user row may not exist yet: then nothing to do)."""
    for cmd in ("totp-reset", "unlock"):
        _run([*PORTAL_CLI, cmd, user])


def password_of(user: str) -> str:
    path = PASSWORDS / user
    if not path.is_file():
        pytest.skip(f"no initial password for {user} at {path} (LDAP users not deployed: run site.yml)")
    return path.read_text().strip()


@pytest.fixture(scope="module")
def portal() -> Iterator[Portal]:
    why = _portal_answers()
    if why:
        pytest.skip(f"demo portal not up: {why}")
    if shutil.which("podman") is None or _run(["podman", "exec", HEAD, "true"]).returncode != 0:
        pytest.skip(f"cannot podman exec into {HEAD}")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} missing (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    for user in ("alice", "bob"):
        password_of(user)  # skips the module when the LDAP users are not deployed
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    steps = Steps(ARTIFACTS)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        state = Portal(browser=browser, steps=steps)
        try:
            yield state
        finally:
            if state.job_id and not state.stopped:
                _run(["podman", "exec", HEAD, "scancel", str(state.job_id)])
            browser.close()
            (ARTIFACTS / "steps.json").write_text(json.dumps({"job_id": state.job_id, "steps": steps.names}, indent=1))


def test_alice_logs_in_and_starts_jupyterlab_with_one_gpu(portal: Portal) -> None:
    password = password_of("alice")
    _run(["podman", "exec", HEAD, "scancel", "--user", "alice"])  # leftovers of an interrupted run
    fresh_account("alice")
    context = portal.browser.new_context(ignore_https_errors=True, viewport={"width": 1400, "height": 900})
    page = login(context, portal.steps, "alice", password)
    portal.alice = page

    page.goto(f"{BASE}/sessions/new")
    page.select_option("select[name=app]", "jupyterlab")
    page.select_option("select[name=image]", "jupyter")
    page.fill("input[name=gpus]", "1")
    page.fill("input[name=time_minutes]", "30")
    portal.steps.shot(page, "alice-start-form")
    page.get_by_role("button", name="Start", exact=True).click()  # not the nav bar's "Log out" submit button
    row = page.wait_for_selector("tr[data-job]", timeout=20_000)
    portal.job_id = int(row.get_attribute("data-job") or 0)
    assert portal.job_id > 0
    assert "1" in page.inner_text(f"tr[data-job='{portal.job_id}'] td:nth-child(5)")  # GPUs column
    portal.steps.shot(page, "alice-submitted")

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
    portal.steps.shot(page, "alice-connect-button")


def test_jupyterlab_loads_through_the_proxy_and_runs_a_cell(portal: Portal) -> None:
    assert portal.alice is not None and portal.job_id, "no running session (previous step failed)"
    page = portal.alice
    with page.context.expect_page() as new_page:
        page.click(f"tr[data-job='{portal.job_id}'] a.connect")
    lab = new_page.value
    lab.wait_for_load_state()
    assert f"/proxy/{portal.job_id}/" in lab.url
    lab.wait_for_selector(".jp-LabShell", timeout=60_000)
    # JupyterLab restores the last workspace from the user's home (a notebook left open by an earlier run
    # hides the launcher): start from a reset workspace.
    lab.goto(lab.url.split("?")[0].split("#")[0] + "?reset")
    lab.wait_for_selector(".jp-LauncherCard", timeout=60_000)
    portal.steps.shot(lab, "jupyterlab-loaded")

    lab.click(".jp-LauncherCard[data-category='Notebook']")
    lab.wait_for_selector(".jp-NotebookPanel .jp-Cell .cm-content", timeout=60_000)
    # The kernel connects over the proxied websocket; wait until it reports idle.
    lab.wait_for_selector(".jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
    # A locator, not an element handle: JupyterLab re-renders the cell editor while the kernel starts.
    lab.locator(".jp-NotebookPanel .jp-Cell .cm-content").first.click()
    lab.keyboard.type("import os; print('carme', 6 * 7, os.environ.get('CUDA_VISIBLE_DEVICES'))")
    lab.keyboard.press("Shift+Enter")
    out = lab.wait_for_selector(".jp-NotebookPanel .jp-OutputArea-output:has-text('carme 42')", timeout=60_000)
    text = out.inner_text()
    portal.steps.shot(lab, "notebook-cell-executed")
    assert "carme 42" in text
    lab.close()


def test_bob_is_refused_alices_session(portal: Portal) -> None:
    assert portal.job_id, "no session (first step failed)"
    password = password_of("bob")
    fresh_account("bob")
    context = portal.browser.new_context(ignore_https_errors=True)
    page = login(context, portal.steps, "bob", password)
    assert page.query_selector(f"tr[data-job='{portal.job_id}']") is None  # not on bob's dashboard
    proxied = page.goto(f"{BASE}/proxy/{portal.job_id}/lab")
    assert proxied is not None and proxied.status == 403
    portal.steps.shot(page, "bob-proxy-403")
    api = context.request
    assert api.get(f"{BASE}/proxy/{portal.job_id}/api/kernels").status == 403
    token = api.get(f"{BASE}/api/csrf-token").json()["csrf_token"]
    stop = api.post(f"{BASE}/api/sessions/{portal.job_id}/stop", headers={"X-CSRFToken": token, "Referer": BASE + "/"})
    assert stop.status == 403, stop.text()
    assert api.get(f"{BASE}/sessions/{portal.job_id}/connect", max_redirects=0).status in (302, 403, 404)
    assert squeue_has(portal.job_id), "bob's attempt must not have stopped alice's session"
    context.close()


def test_the_ide_port_refuses_requests_without_the_secret(portal: Portal) -> None:
    assert portal.job_id, "no session (first step failed)"
    fields = dict(kv.split("=", 1) for kv in job_comment(portal.job_id).split(";") if "=" in kv)
    host, port = fields.get("host"), fields.get("port")
    assert host and port, f"no endpoint in the job comment {job_comment(portal.job_id)!r}"
    base = f"http://{host}:{port}/proxy/{portal.job_id}"
    # From the portal host (the only host nodes should accept app connections from): no token, no entry.
    for path, wrong in (("/api/status", ""), ("/api/kernels", "token not-the-secret")):
        argv = ["podman", "exec", HEAD, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", base + path]
        if wrong:
            argv[-1:-1] = ["-H", f"Authorization: {wrong}"]
        code = _run(argv).stdout.strip()
        assert code in ("401", "403"), f"{path} without the secret answered {code}"
    lab = _run(
        ["podman", "exec", HEAD, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", base + "/lab"]
    )
    code, _, where = lab.stdout.strip().partition(" ")
    assert code in ("401", "403") or (code == "302" and "login" in where), lab.stdout


def test_alice_stops_the_session_and_it_leaves_squeue(portal: Portal) -> None:
    assert portal.alice is not None and portal.job_id, "no session (first step failed)"
    page = portal.alice
    page.goto(f"{BASE}/")
    page.click(f"tr[data-job='{portal.job_id}'] button.stop")
    page.wait_for_load_state()
    portal.steps.shot(page, "alice-stopped")
    deadline = time.monotonic() + 90
    while squeue_has(portal.job_id):
        assert time.monotonic() < deadline, f"job {portal.job_id} still in squeue 90 s after Stop"
        time.sleep(2)
    portal.stopped = True
    page.reload()
    portal.steps.shot(page, "alice-dashboard-after-stop")
