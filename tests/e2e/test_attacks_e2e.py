# SPDX-License-Identifier: GPL-3.0-or-later
"""Security issue #27, items 6, 7 and 10a, tried on the live demo as a user of the cluster would (adversarial).

6. bob sends the same ``POST /reservations/request`` four times at the same moment (one connection each, with his
   portal cookie and CSRF token): his reservations page then shows exactly one pending request for that window
   (before the fix: one per request that got through the policy side by side);
7. alice, with one running session, sends three ``POST /api/sessions`` at the same moment: at most one more is
   accepted (201), the others get a 4xx naming the limit, and squeue holds no more of her jobs than the limit (2 on
   the demo; before the fix all three answered 201: four sessions);
10a. carol posts the admin image form with paths such as ``/tmp``, ``..`` and ``;``: each is a 400 naming the image
   field, and the image list is unchanged (before the fix each was stored).

Items 8, 9 and 10c (the nodes' agents, LDAP and the session front) are in test_attacks_hosts_e2e.py.
Uses the ``demo`` fixture (tests/fixtures/demo.py): skips without a demo unless ``CARME_E2E_REQUIRED=1``.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import re
import ssl
import threading
import time
import urllib.parse
import uuid
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import Demo
from tests.fixtures.demo import csrf_headers
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import start_jupyterlab
from tests.fixtures.demo import wait_session_ready

pytestmark = pytest.mark.e2e

Answer = tuple[int, str]  # status, and the Location of a redirect or else the body


def post_form(context: Any, url: str, form: dict[str, str]) -> Any:
    """A form POST as the browser would send it (CSRF token in the form, the portal as Referer); not followed."""
    headers = csrf_headers(context)
    return context.request.post(
        url, form={**form, "csrf_token": headers["X-CSRFToken"]}, headers=headers, max_redirects=0
    )


def portal_cookie(context: Any) -> str:
    return "; ".join(f"{c['name']}={c['value']}" for c in context.cookies([BASE]))


def post_at_once(context: Any, path: str, body: bytes, content_type: str, count: int) -> list[Answer]:
    """``count`` identical POSTs with the context's login, each on its own TLS connection, released together (the
    connections are open before the barrier). Plain http.client in threads: Playwright's API is not thread-safe."""
    headers = {**csrf_headers(context), "Cookie": portal_cookie(context), "Content-Type": content_type}
    url = urllib.parse.urlsplit(BASE)
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE
    barrier = threading.Barrier(count)
    answers: list[Answer] = [(0, "no answer")] * count

    def one(index: int) -> None:
        conn = http.client.HTTPSConnection(url.hostname or "", url.port or 443, context=tls, timeout=90)
        try:
            conn.connect()
            barrier.wait(timeout=30)
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            text = resp.read().decode(errors="replace")
            answers[index] = (resp.status, resp.getheader("Location") or text)
        except Exception as exc:  # reported in the test's assertion, with the other answers
            answers[index] = (-1, repr(exc))
        finally:
            conn.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return answers


# --- 6: one reservation request, sent four times at once -------------------------------------------------------


def my_requests(api: Any) -> list[dict[str, str]]:
    """bob's requests as his reservations page shows them: id, purpose, status."""
    html = api.get(f"{BASE}/reservations/").text()
    rows = []
    for rid, row in re.findall(r'<tr data-request="(\d+)">(.*?)</tr>', html, re.S):
        purpose = re.search(r"<small>(.*?)</small>", row, re.S)
        status = re.search(r'<td class="status">\s*([a-z]+)', row)
        rows.append({"id": rid, "purpose": purpose.group(1) if purpose else "", "status": status[1] if status else ""})
    return rows


def withdraw(context: Any, purpose_prefix: str) -> None:
    """Cancel bob's open requests whose purpose starts with ``purpose_prefix`` (this test's, of any run)."""
    api = context.request
    for row in my_requests(api):
        if row["purpose"].startswith(purpose_prefix) and row["status"] in ("pending", "approved"):
            resp = post_form(context, f"{BASE}/reservations/{row['id']}/cancel", {})
            assert resp.status in (302, 303), (row, resp.status)


def test_identical_reservation_requests_sent_at_once_make_one_request(demo: Demo) -> None:
    marker = "e2e attack 6"
    purpose = f"{marker} {uuid.uuid4().hex[:8]}"
    day = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=3)
    start, end = dt.datetime.combine(day, dt.time(14)), dt.datetime.combine(day, dt.time(15))  # UTC on the demo
    page, _ = login(demo, "bob")
    context = page.context
    try:
        withdraw(context, marker)  # an interrupted earlier run's (the policy refuses a request overlapping one's own)
        form = {
            "csrf_token": csrf_headers(context)["X-CSRFToken"],
            "gpus": "1",
            "nodes": "1",
            "start": start.strftime("%Y-%m-%dT%H:%M"),
            "end": end.strftime("%Y-%m-%dT%H:%M"),
            "purpose": purpose,
        }
        body = urllib.parse.urlencode(form).encode()
        answers = post_at_once(context, "/reservations/request", body, "application/x-www-form-urlencoded", 4)
        assert all(0 < status < 500 for status, _ in answers), answers
        assert any(status in (302, 303) for status, _ in answers), f"no request was accepted: {answers}"
        mine = [r for r in my_requests(context.request) if r["purpose"] == purpose]
        pending = [r for r in mine if r["status"] == "pending"]
        assert len(pending) == 1, f"{len(pending)} pending requests for one window: {mine}; answers {answers}"
        assert len(mine) == 1, mine
        page.goto(f"{BASE}/reservations/")
        demo.steps.shot(page, "bob-one-request-after-four-at-once")
    finally:
        withdraw(context, marker)
        context.close()


# --- 7: three session starts at once beside a running one -------------------------------------------------------


def jobs_of(user: str) -> list[str]:
    return on_head("squeue", "--noheader", "--user", user, "--format=%i").stdout.split()


def no_jobs_left(user: str, timeout: float = 60) -> None:
    on_head("scancel", "--user", user)
    deadline = time.monotonic() + timeout
    while jobs_of(user):
        assert time.monotonic() < deadline, f"{user}'s jobs still in squeue: {jobs_of(user)}"
        time.sleep(2)


def test_concurrent_session_starts_stay_within_the_session_limit(demo: Demo) -> None:
    no_jobs_left("alice")
    page, _ = login(demo, "alice")
    try:
        first = start_jupyterlab(page, time_minutes=10)
        wait_session_ready(page.context.request, first)
        body = json.dumps({"app": "jupyterlab", "image": "jupyter", "gpus": 0, "time_minutes": 10}).encode()
        # one more than Slurm's MaxJobs leaves room for (the demo's association: 4, slurm.yml) beside the running one
        answers = post_at_once(page.context, "/api/sessions", body, "application/json", 4)
        accepted = [a for a in answers if a[0] == 201]
        refused = [a for a in answers if a[0] != 201]
        assert refused, f"4 concurrent starts all accepted beside a running session: {answers}"
        limits = set()
        for status, text in refused:
            named = re.search(r"the limit is (\d+)", text)
            assert 400 <= status < 500 and named, f"a refused start does not name the limit: {status} {text[:300]}"
            limits.add(int(named.group(1)))
        assert len(limits) <= 1, f"the refusals name different limits: {answers}"
        limit = limits.pop() if limits else 4  # the demo's MaxJobs per user, in Slurm
        queued = jobs_of("alice")
        assert len(queued) <= limit, f"squeue holds {len(queued)} jobs of alice's (limit {limit}): {queued}"
        assert 1 + len(accepted) <= limit, answers
    finally:
        no_jobs_left("alice")
        page.context.close()


# --- 10a: paths the admin image form must not store -------------------------------------------------------------

HEX = "0" * 64
BAD_IMAGES = [  # (kind, image path)
    ("image", "/tmp"),
    ("image", "/tmp/bob.sif"),
    ("image", ".."),
    ("image", "/opt/carme/images/../../../tmp/bob.sif"),
    ("image", ";"),
    ("image", "/opt/carme/images/jupyter.sif; touch /tmp/pwned"),
    ("container", f"/tmp/bob.sif@sha256:{HEX}"),
    ("environment", "../../tmp/env"),
]


def image_rows(api: Any) -> list[tuple[str, str, str]]:
    """The image catalogue as the admin page lists it: (name, kind, image)."""
    html = api.get(f"{BASE}/admin/images").text()
    cell = r"<td[^>]*>"  # cells may carry attributes (data-label: the table stacks into cards on a phone)
    found = re.findall(rf"<tr>{cell}([^<]*)</td>{cell}([^<]*)</td>{cell}<code>([^<]*)</code>", html)
    return [(name, kind, image) for name, kind, image in found]


def disable_leftovers(context: Any, prefix: str) -> None:
    """Disable entries this test stored (only on a vulnerable portal; the catalogue has no delete)."""
    api = context.request
    html = api.get(f"{BASE}/admin/images").text()
    for row in re.findall(r"<tr><td[^>]*>[^<]*</td>.*?</tr>", html, re.S):
        toggle = re.search(r'action="(/admin/images/\d+/toggle)"', row)
        if re.match(rf"<tr><td[^>]*>{re.escape(prefix)}", row) and toggle and ">Disable<" in row:
            post_form(context, BASE + toggle.group(1), {})


def test_the_admin_image_form_refuses_unsafe_paths(demo: Demo) -> None:
    prefix = "e2e-attack-10a"
    page, _ = login(demo, "carol")
    context, api = page.context, page.context.request
    try:
        before = image_rows(api)
        assert before, "the admin image page lists no images (the page did not parse)"
        for n, (kind, image) in enumerate(BAD_IMAGES):
            form = {
                "name": f"{prefix}-{n}",
                "kind": kind,
                "image": image,
                "allowed_apps": "jupyterlab",
                "description": "e2e: must not be stored",
            }
            resp = post_form(context, f"{BASE}/admin/images", form)
            text = resp.text()
            assert resp.status == 400, f"{image!r} ({kind}): {resp.status}, stored? {text[:200]}"
            assert "image:" in text or "Image path or environment" in text, f"{image!r}: no field named: {text[:500]}"
        after = image_rows(api)
        assert after == before, f"the image list changed: {sorted(set(after) - set(before))}"
        page.goto(f"{BASE}/admin/images")
        demo.steps.shot(page, "carol-images-unchanged")
    finally:
        disable_leftovers(context, prefix)
        context.close()
