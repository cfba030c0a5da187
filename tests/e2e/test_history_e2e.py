# SPDX-License-Identifier: GPL-3.0-or-later
"""History, logs and notices on the live demo (issue 30), in chromium:

carol (an administrator) stops bob's JupyterLab session from the admin page with the note "maintenance on node1";
bob's dashboard says so (with the note, until he dismisses it), his history lists the session with the note and a
link to its log, which he opens (the app's output, read as bob by the portal's log reader, carme-log-reader.socket)
and downloads, and alice gets 403 for the same URL.

Uses the ``demo`` fixture (tests/fixtures/demo.py): skips without a demo unless ``CARME_E2E_REQUIRED=1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import Demo
from tests.fixtures.demo import job_report
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import squeue_has
from tests.fixtures.demo import start_jupyterlab
from tests.fixtures.demo import wait_gone
from tests.fixtures.demo import wait_session_ready

pytestmark = pytest.mark.e2e

NOTE = "maintenance on node1"


@dataclass
class Stopped:
    demo: Demo
    bob: Any  # bob's page
    job_id: int


@pytest.fixture(scope="module")
def stopped(demo: Demo) -> Iterator[Stopped]:
    """bob's session, started and ready, then stopped by carol on the admin page with a note."""
    bob, _ = login(demo, "bob")
    job_id = start_jupyterlab(bob)
    try:
        wait_session_ready(bob.context.request, job_id)
        carol, _ = login(demo, "carol")
        carol.on("dialog", lambda dialog: dialog.accept())  # a confirmation, if the page asks one
        carol.goto(f"{BASE}/admin/")
        row = carol.locator(f"tr[data-job='{job_id}']")
        row.locator("input[name=note]").fill(NOTE)
        demo.steps.shot(carol, "carol-stops-with-note")
        row.locator("button[type=submit]").click()
        carol.wait_for_load_state()
        wait_gone(job_id)
        carol.context.close()
        yield Stopped(demo, bob, job_id)
    finally:
        if squeue_has(job_id):
            on_head("scancel", str(job_id))


def test_bobs_dashboard_says_carol_stopped_it(stopped: Stopped) -> None:
    page, job = stopped.bob, stopped.job_id
    page.goto(f"{BASE}/")
    notice = page.locator(f"[data-notice='{job}']")
    text = notice.inner_text()
    assert f"carol stopped your session {job} (JupyterLab): {NOTE}" in text, text
    stopped.demo.steps.shot(page, "bob-notice")


def test_bobs_history_lists_it_with_the_note_and_his_log(stopped: Stopped) -> None:
    page, job = stopped.bob, stopped.job_id
    page.goto(f"{BASE}/history/")
    row = page.locator(f"#job-{job}")
    assert f"Stopped by an administrator (carol): {NOTE}" in row.inner_text()
    stopped.demo.steps.shot(page, "bob-history")
    href = row.locator("a.log").get_attribute("href")
    assert href == f"/history/{job}/log"
    resp = page.context.request.get(BASE + href)
    assert resp.status == 200, (resp.status, resp.text(), job_report(job))
    assert resp.headers["content-type"].startswith("text/plain")
    assert "carme-launch" in resp.text() or "jupyter" in resp.text().lower(), resp.text()
    download = page.context.request.get(f"{BASE}{href}?download=1")
    assert download.status == 200
    assert download.headers["content-disposition"] == f'attachment; filename="carme-jupyterlab-{job}.out"'
    assert download.body().endswith(resp.body()[-100:])


def test_alice_cannot_read_bobs_log(stopped: Stopped) -> None:
    alice, _ = login(stopped.demo, "alice")
    try:
        for url in (f"{BASE}/history/{stopped.job_id}/log", f"{BASE}/history/{stopped.job_id}/log?download=1"):
            assert alice.context.request.get(url).status == 403
        alice.goto(f"{BASE}/history/")
        assert alice.locator(f"#job-{stopped.job_id}").count() == 0
    finally:
        alice.context.close()


def test_bob_dismisses_the_notice(stopped: Stopped) -> None:
    page, job = stopped.bob, stopped.job_id
    page.goto(f"{BASE}/")
    page.locator(f"[data-notice='{job}'] button").click()
    page.wait_for_load_state()
    assert page.locator(f"[data-notice='{job}']").count() == 0
    page.goto(f"{BASE}/history/")
    assert NOTE in page.locator(f"#job-{job}").inner_text()  # the history keeps it
