# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal is accessible and fits a phone (issue 30, acceptance): an axe-core audit in the demo's chromium.

At 1366 x 800 and at 390 x 844 CSS pixels, the login page (logged out), alice's dashboard (with a session of hers
starting), start form (its advanced fields opened), history and reservations, and carol's admin pages report no
serious or critical axe violation (tests/fixtures/axe.py: WCAG 2.1 A/AA and axe's best practices), and at 390 px no
page scrolls sideways (a wide table scrolls inside its own box). On the dashboard the first Tab reaches the skip link,
which moves the focus to the main content, and the focus is shown. axe-core is installed by ``make axe``
(``scripts/axe.sh``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.axe import audit
from tests.fixtures.axe import axe_source
from tests.fixtures.axe import overflow
from tests.fixtures.axe import report
from tests.fixtures.demo import BASE
from tests.fixtures.demo import Demo
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import start_jupyterlab

pytestmark = pytest.mark.e2e

VIEWPORTS = ({"width": 1366, "height": 800}, {"width": 390, "height": 844})
# alice manages the research project: its report and utilisation chart are hers to see
ALICE_PAGES = (
    "/",
    "/sessions/new",
    "/reservations/",
    "/notifications/",
    "/projects/",
    "/projects/research/report",
    "/projects/research/utilisation",
)
ADMIN_PAGES = (
    "/admin/",
    "/admin/users",
    "/admin/health",
    "/admin/images",
    "/admin/news",
    "/admin/audit",
    "/admin/utilisation",
    "/reservations/admin",
)
OPTIONAL_PAGES = ("/admin/profiles",)  # checked where the portal has them


@pytest.fixture(scope="module")
def alice(demo: Demo) -> Iterator[tuple[Any, int]]:
    """alice's page, logged in, and a session of hers (started, not waited for: its row is on the dashboard)."""
    axe_source()  # a missing axe-core fails here, before any login
    page, _ = login(demo, "alice")
    job_id = start_jupyterlab(page)
    try:
        yield page, job_id
    finally:
        on_head("scancel", str(job_id))
        page.context.close()


@pytest.fixture(scope="module")
def carol(demo: Demo) -> Iterator[Any]:
    axe_source()
    page, _ = login(demo, "carol")
    yield page
    page.context.close()


def check(demo: Demo, page: Any, path: str, viewport: dict[str, int]) -> list[str]:
    """Open ``path`` at ``viewport`` (advanced fields opened) and audit it: the problems found, as readable text."""
    where = f"{path} at {viewport['width']} px"
    page.set_viewport_size(viewport)
    response = page.goto(f"{BASE}{path}")
    assert response is not None and response.status == 200, f"{where}: {response and response.status}"
    page.evaluate("() => document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    demo.steps.shot(page, f"a11y-{viewport['width']}-{path.strip('/').replace('/', '-') or 'dashboard'}")
    problems = []
    violations = audit(page)
    if violations:
        problems.append(report(where, violations))
    if viewport["width"] < 600 and (wider := overflow(page)) > 1:
        problems.append(f"{where}: the page scrolls {wider} px sideways")
    return problems


def check_all(demo: Demo, page: Any, paths: tuple[str, ...]) -> None:
    problems = [p for viewport in VIEWPORTS for path in paths for p in check(demo, page, path, viewport)]
    assert not problems, "\n".join(problems)


def exists(page: Any, path: str) -> bool:
    return bool(page.context.request.get(f"{BASE}{path}", max_redirects=0).status != 404)


def test_login_page(demo: Demo) -> None:
    axe_source()
    context = demo.context()
    try:
        check_all(demo, context.new_page(), ("/auth/login",))
    finally:
        context.close()


def test_alice_pages(demo: Demo, alice: tuple[Any, int]) -> None:
    page, job_id = alice
    page.set_viewport_size(VIEWPORTS[0])
    page.goto(f"{BASE}/")
    page.wait_for_selector(f"[data-job='{job_id}']", timeout=20_000)
    check_all(demo, page, ALICE_PAGES)


def focus_ring(page: Any) -> str:
    return str(page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle"))


def test_keyboard_and_landmarks(demo: Demo, alice: tuple[Any, int]) -> None:
    """The first Tab on a page reaches the skip link, shown with a focus ring; Enter on it moves the focus into
    <main>, and the next Tab's element has a ring too. One labelled main navigation, one <main>, lang="en"."""
    page, _ = alice
    page.set_viewport_size(VIEWPORTS[0])
    page.goto(f"{BASE}/")
    assert page.evaluate("() => document.documentElement.lang") == "en"
    assert page.locator("header nav[aria-label='Main']").count() == 1
    assert page.locator("main").count() == 1
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.className") == "skip-link"
    box = page.locator(".skip-link").bounding_box()
    assert box is not None and box["y"] >= 0, f"the focused skip link is off screen: {box}"
    assert focus_ring(page) != "none"
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.closest('main') !== null")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.closest('main') !== null")
    assert focus_ring(page) != "none", page.evaluate("() => document.activeElement.outerHTML")


def test_history_page(demo: Demo, alice: tuple[Any, int]) -> None:
    page, _ = alice
    if not exists(page, "/history"):
        pytest.skip("/history answers 404: the portal has no history page yet")
    check_all(demo, page, ("/history",))


def test_admin_pages(demo: Demo, carol: Any) -> None:
    paths = ADMIN_PAGES + tuple(p for p in OPTIONAL_PAGES if exists(carol, p))
    check_all(demo, carol, paths)
