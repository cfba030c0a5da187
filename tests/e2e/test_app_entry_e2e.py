# SPDX-License-Identifier: GPL-3.0-or-later
"""Into the app without friction, and no lost work, on the live demo (issue 30), in chromium:

* code-server started from the portal (``POST /api/sessions``, app ``code-server``) opens its workbench through
  Connect with no password page (``--auth none`` behind the session front), while the front itself still refuses a
  request without its key (from the head, straight to the published host:port);
* Stop on the dashboard asks first (a dialog saying unsaved work is lost); Cancel keeps the session running; the
  page without JavaScript (``GET /sessions/<job>/stop``) asks the same;
* a session with at most 15 minutes left warns on its row, and "Extend" raises its time limit in Slurm (as the
  portal's Slurm admin identity) and moves its time left up.

Uses the ``demo`` fixture (tests/fixtures/demo.py): skips without a demo unless ``CARME_E2E_REQUIRED=1``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import Demo
from tests.fixtures.demo import apps_origin
from tests.fixtures.demo import csrf_headers
from tests.fixtures.demo import job_comment
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import squeue_has
from tests.fixtures.demo import wait_gone
from tests.fixtures.demo import wait_session_ready

pytestmark = pytest.mark.e2e

#: the session starts with this time limit (minutes): at most 15 minutes left, so its row offers "Extend" at once
START_MINUTES = 10


@dataclass
class CodeServer:
    demo: Demo
    page: Any
    job_id: int


@pytest.fixture(scope="module")
def code_server(demo: Demo) -> Iterator[CodeServer]:
    page, _ = login(demo, "alice")
    body = {"app": "code-server", "image": "code-server", "gpus": 0, "time_minutes": START_MINUTES}
    started = page.context.request.post(f"{BASE}/api/sessions", data=body, headers=csrf_headers(page.context))
    assert started.status == 201, started.text()
    job_id = int(started.json()["job_id"])
    try:
        wait_session_ready(page.context.request, job_id)
        yield CodeServer(demo, page, job_id)
    finally:
        on_head("scancel", str(job_id))
        wait_gone(job_id)


def seconds_left(page: Any, job_id: int) -> int:
    views = page.context.request.get(f"{BASE}/api/sessions").json()["sessions"]
    view = next(v for v in views if v["job_id"] == job_id)
    return int(view["seconds_left"])


def test_code_server_opens_its_workbench_without_a_password_page(code_server: CodeServer) -> None:
    job = code_server.job_id
    page = code_server.page.context.new_page()
    try:
        page.goto(f"{BASE}/")
        assert "password" not in page.inner_text(f"tr[data-job='{job}']").lower()  # nothing to copy by hand
        page.goto(f"{BASE}/sessions/{job}/connect")
        assert page.url.startswith(f"{apps_origin(job)}/proxy/{job}/"), page.url
        page.wait_for_selector(".monaco-workbench", timeout=120_000)
        assert page.query_selector("input[type=password]") is None
        code_server.demo.steps.shot(page, "code-server-workbench")
    finally:
        page.close()


def test_the_front_still_refuses_without_its_key(code_server: CodeServer) -> None:
    fields = dict(kv.split("=", 1) for kv in job_comment(code_server.job_id).split(";") if "=" in kv)
    url = f"http://{fields['host']}:{fields['port']}/proxy/{code_server.job_id}/"
    code = on_head("curl", "-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", url).stdout.strip()
    assert code == "403", code


def test_stop_asks_first_and_cancel_keeps_the_session(code_server: CodeServer) -> None:
    page, job = code_server.page, code_server.job_id
    page.goto(f"{BASE}/")
    page.click(f"tr[data-job='{job}'] a.stop")
    dialog = page.locator("#stop-dialog")
    dialog.wait_for(state="visible", timeout=10_000)
    assert "Unsaved work in the app is lost" in dialog.inner_text()
    code_server.demo.steps.shot(page, "stop-asks-first")
    page.click("#stop-dialog button.cancel")
    dialog.wait_for(state="hidden", timeout=10_000)
    time.sleep(3)
    assert squeue_has(job), "Cancel stopped the session"
    page.goto(f"{BASE}/sessions/{job}/stop")  # the same question without JavaScript
    assert "Unsaved work in the app is lost" in page.inner_text("main")
    assert squeue_has(job)


def test_extend_moves_the_time_left_up(code_server: CodeServer) -> None:
    page, job = code_server.page, code_server.job_id
    before = seconds_left(page, job)
    page.goto(f"{BASE}/")
    row = f"tr[data-job='{job}']"
    assert "Ends soon" in page.inner_text(row)
    page.select_option(f"{row} form.extend-form select[name=minutes]", "15")
    page.click(f"{row} form.extend-form button.extend")
    page.wait_for_selector("text=now has a time limit of 25 minutes", timeout=20_000)
    code_server.demo.steps.shot(page, "extended")
    shown = on_head("scontrol", "show", "job", str(job)).stdout
    assert "TimeLimit=00:25:00" in shown, shown
    # another portal worker may answer from its scheduler snapshot for up to SCHEDULER_CACHE_SECONDS (2 s)
    deadline = time.monotonic() + 10
    while (left := seconds_left(page, job)) <= before + 10 * 60 and time.monotonic() < deadline:
        time.sleep(1)
    assert left > before + 10 * 60, (left, before)
    assert squeue_has(job)
