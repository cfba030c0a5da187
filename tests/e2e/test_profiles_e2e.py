# SPDX-License-Identifier: GPL-3.0-or-later
"""Session profiles on the demo (issue 30): a user with no remembered choice clicks Start session, then Start, and
gets JupyterLab (the first profile) with its launcher through Connect; a new notebook's first cell prints its output.

The user's remembered choice is cleared in the portal's database first (``portal_user.last_start``, MariaDB on the
head), and the user's jobs are cancelled, so the demo's one GPU per user is free for the first profile."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import Demo
from tests.fixtures.demo import apps_origin
from tests.fixtures.demo import csrf_headers
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import wait_connect_button
from tests.fixtures.demo import wait_gone
from tests.fixtures.jupyterlab import new_notebook
from tests.fixtures.jupyterlab import run_cell

pytestmark = pytest.mark.e2e

USER = "alice"


def forget_last_choice(user: str) -> None:
    sql = f"UPDATE portal_user SET last_start = NULL WHERE username = '{user}'"
    done = on_head("mysql", "carme_webui", "-e", sql)
    assert done.returncode == 0, done.stderr


def my_newest_session(page: Any, app: str) -> int:
    views = page.context.request.get(f"{BASE}/api/sessions").json()["sessions"]
    return max(int(v["job_id"]) for v in views if v["app"] == app)


def open_launcher(page: Any, job_id: int) -> Any:
    """Click the session's Connect button; JupyterLab's page, with its launcher shown (no reset asked for)."""
    with page.context.expect_page() as new_page:
        page.click(f"tr[data-job='{job_id}'] a.connect")
    lab = new_page.value
    lab.wait_for_load_state()
    assert lab.url.startswith(f"{apps_origin(job_id)}/proxy/{job_id}/"), lab.url
    lab.wait_for_selector(".jp-LauncherCard", timeout=90_000)
    return lab


def test_start_session_then_start_opens_jupyterlabs_launcher_and_runs_a_cell(demo: Demo) -> None:
    on_head("scancel", "--user", USER)
    forget_last_choice(USER)
    page, _ = login(demo, USER)
    job_id = 0
    try:
        page.click("header.top a[href='/sessions/new']")
        page.wait_for_selector("input[name=profile]:checked")
        chosen = page.get_attribute("input[name=profile]:checked", "value")
        assert chosen is not None and chosen.startswith("jupyterlab"), chosen  # the first profile: JupyterLab
        assert page.query_selector("details.advanced[open]") is None  # the advanced fields stay folded
        demo.steps.shot(page, "profiles-start-form")
        page.click("form.start-form button[type=submit]")
        page.wait_for_selector("text=My sessions", timeout=30_000)
        job_id = my_newest_session(page, "jupyterlab")
        wait_connect_button(page, job_id)
        lab = open_launcher(page, job_id)
        demo.steps.shot(lab, "profiles-jupyterlab-launcher")
        new_notebook(lab)
        assert "42" in run_cell(lab, "print(6*7)", "42", timeout_s=120)
        demo.steps.shot(lab, "profiles-first-cell")
        lab.close()
        page.goto(f"{BASE}/sessions/new")
        assert page.get_attribute("input[name=profile]:checked", "value") == chosen  # remembered
    finally:
        if job_id:
            stopped = page.context.request.post(
                f"{BASE}/api/sessions/{job_id}/stop", headers=csrf_headers(page.context)
            )
            assert stopped.status in (200, 202, 204), stopped.text()
            wait_gone(job_id)
