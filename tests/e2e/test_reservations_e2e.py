# SPDX-License-Identifier: GPL-3.0-or-later
"""Reservations on the demo cluster in the browser (issue 16, acceptance).

* alice requests 1 GPU for tomorrow 10:00-12:00 (UTC, the demo's RESERVATION_TIMEZONE); on the demo an
  administrator decides every request (inventories/demo: carme_webui_reservation_auto_approve: false), so carol
  approves it on the admin page; ``scontrol show reservation`` shows it for alice; alice's calendar shows it in full,
  bob's as a busy block;
* bob asks for both nodes over the same window; carol approves and Slurm refuses (its only reservation holds one of
  the two nodes): bob's request shows Slurm's own reason;
* a reservation starting now: alice starts a session inside it and gets 200 through the proxy; bob's
  ``sbatch --reservation=<alice's>`` is refused by Slurm.

Every reservation the test creates is deleted at the end (scontrol on the head), and alice's session cancelled.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import Demo
from tests.fixtures.demo import connect
from tests.fixtures.demo import fill_start_form
from tests.fixtures.demo import goto_until
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import proxied
from tests.fixtures.demo import submit_start_form
from tests.fixtures.reservations import approve as approve_request
from tests.fixtures.reservations import day_at
from tests.fixtures.reservations import request

pytestmark = pytest.mark.e2e

READY_TIMEOUT_S = 300.0
DASH = "\N{EN DASH}"  # between a calendar block's start and end


@dataclass
class Booking:
    demo: Demo
    pages: dict[str, Any] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # Slurm reservations made by this run
    tomorrow: str = ""  # alice's reservation for tomorrow 10:00-12:00
    now: str = ""  # alice's reservation starting now
    job_id: int = 0


def reservations() -> list[str]:
    out = on_head("scontrol", "show", "reservation", "--oneliner").stdout
    return re.findall(r"ReservationName=(\S+)", out)


def drop_leftovers() -> None:
    """Reservations of an interrupted earlier run, and alice's and bob's jobs (a node with a job is busy for a
    reservation that starts now)."""
    for name in reservations():
        if name.startswith(("carme-alice-", "carme-bob-")):
            on_head("scontrol", "delete", f"ReservationName={name}")
    on_head("scancel", "--user", "alice")
    on_head("scancel", "--user", "bob")


@pytest.fixture(scope="module")
def booking(demo: Demo) -> Iterator[Booking]:
    drop_leftovers()
    state = Booking(demo=demo)
    try:
        yield state
    finally:
        if state.job_id:
            on_head("scancel", str(state.job_id))
        for name in state.names:
            on_head("scontrol", "delete", f"ReservationName={name}")
        left = [n for n in reservations() if n in state.names]
        assert not left, f"reservations left behind: {left}"


def page_of(booking: Booking, user: str) -> Any:
    """The user's logged-in page; on first use, their requests still pending from an interrupted run are withdrawn
    (the policy refuses a request overlapping one's own)."""
    if user not in booking.pages:
        page, _ = login(booking.demo, user)
        booking.pages[user] = page
        page.goto(f"{BASE}/reservations/")
        pending = "#my-requests tr[data-request]:has(td.status:text-matches('^pending')) button.stop"
        while page.locator(pending).count():
            page.locator(pending).first.click()
            page.wait_for_load_state()
    return booking.pages[user]


def approve(booking: Booking, request_id: int) -> str:
    """carol approves on the admin page; returns the portal's message (the reservation's name, or Slurm's refusal)."""
    message, name = approve_request(page_of(booking, "carol"), request_id, booking.demo.steps)
    if name:
        booking.names.append(name)
    return message


def tomorrow_at(hour: int) -> dt.datetime:
    return day_at(1, hour)


def test_alice_requests_carol_approves_and_slurm_holds_it(booking: Booking) -> None:
    alice = page_of(booking, "alice")
    request_id = request(alice, tomorrow_at(10), tomorrow_at(12), purpose="e2e: course demo")
    booking.demo.steps.shot(alice, "alice-request-pending")
    message = approve(booking, request_id)
    assert f"reservation carme-alice-{request_id} created" in message, message
    booking.tomorrow = f"carme-alice-{request_id}"
    shown = on_head("scontrol", "show", "reservation", booking.tomorrow).stdout
    assert "Users=alice" in shown and "NodeCnt=1" in shown, shown
    # The demo's containers keep UTC, the zone the portal's form speaks.
    assert f"StartTime={tomorrow_at(10):%Y-%m-%d}T10:00:00" in shown and "Duration=02:00:00" in shown, shown


def test_alices_calendar_shows_it_and_bobs_a_busy_block(booking: Booking) -> None:
    assert booking.tomorrow, "no reservation (previous step failed)"
    day = tomorrow_at(10).date().isoformat()
    alice = page_of(booking, "alice")
    mine = f"[data-reservation='{booking.tomorrow}']"
    goto_until(alice, f"{BASE}/reservations/?date={day}", mine)  # carol's worker made it: others may be 2 s behind
    block = alice.locator(f"[data-reservation='{booking.tomorrow}']").first
    assert f"10:00{DASH}12:00" in block.inner_text() and "e2e: course demo" in block.inner_text()
    booking.demo.steps.shot(alice, "alice-calendar")
    alice.goto(f"{BASE}/reservations/?date={day}&view=month")
    assert alice.locator(f"[data-reservation='{booking.tomorrow}']").count() == 1
    booking.demo.steps.shot(alice, "alice-calendar-month")

    bob = page_of(booking, "bob")
    goto_until(bob, f"{BASE}/reservations/?date={day}", f"td[data-date='{day}'] .block.busy")
    assert bob.locator(f"[data-reservation='{booking.tomorrow}']").count() == 0
    busy = bob.locator(f"td[data-date='{day}'] .block.busy", has_text=f"10:00{DASH}12:00")
    assert busy.count() >= 1 and "Busy" in busy.first.inner_text()
    assert "e2e: course demo" not in bob.inner_text("#calendar")
    booking.demo.steps.shot(bob, "bob-calendar-busy")


def test_a_request_over_a_full_window_gets_slurms_reason(booking: Booking) -> None:
    assert booking.tomorrow, "no reservation (first step failed)"
    bob = page_of(booking, "bob")
    request_id = request(bob, tomorrow_at(10), tomorrow_at(12), gpus=2, nodes=2, purpose="e2e: both nodes")
    message = approve(booking, request_id)
    assert "Slurm refused" in message and "Requested nodes are busy" in message, message
    bob.goto(f"{BASE}/reservations/")
    status = bob.inner_text(f"#my-requests tr[data-request='{request_id}'] td.status")
    assert "failed" in status and "Requested nodes are busy" in status, status
    booking.demo.steps.shot(bob, "bob-refused-by-slurm")


def test_alice_starts_a_session_inside_a_reservation_starting_now(booking: Booking) -> None:
    alice = page_of(booking, "alice")
    now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    request_id = request(alice, now, now + dt.timedelta(minutes=40), purpose="e2e: now")
    message = approve(booking, request_id)
    assert f"reservation carme-alice-{request_id} created" in message, message
    booking.now = f"carme-alice-{request_id}"

    # time longer than the reservation: capped at its end
    fill_start_form(alice, app="jupyterlab", image="jupyter", reservation=booking.now, gpus=1, time_minutes=120)
    booking.demo.steps.shot(alice, "alice-start-in-reservation")
    booking.job_id = submit_start_form(alice)
    assert booking.job_id > 0
    shown = on_head("scontrol", "show", "job", str(booking.job_id)).stdout
    assert f"Reservation={booking.now}" in shown, shown
    limit = re.search(r"TimeLimit=(\d+):(\d+):(\d+)", shown)
    assert limit and int(limit.group(1)) * 60 + int(limit.group(2)) <= 40, shown
    assert f"ends with reservation {booking.now}" in alice.inner_text(f"tr[data-job='{booking.job_id}']")

    deadline = time.monotonic() + READY_TIMEOUT_S
    while alice.query_selector(f"tr[data-job='{booking.job_id}'] a.connect") is None:
        assert time.monotonic() < deadline, f"no Connect button after {READY_TIMEOUT_S:.0f} s"
        time.sleep(3)
        alice.reload()
    api = alice.context.request
    connect(api, booking.job_id)
    status = api.get(proxied(booking.job_id, "api/status"), max_redirects=0).status
    assert status == 200, status
    booking.demo.steps.shot(alice, "alice-session-in-reservation")


def test_bob_cannot_submit_into_alices_reservation(booking: Booking) -> None:
    assert booking.now, "no reservation starting now (previous step failed)"
    argv = ["runuser", "-u", "bob", "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "--mem=100",
            f"--reservation={booking.now}", "--time=5", "--wrap=sleep 60"]  # fmt: skip
    proc = on_head(*argv)
    if proc.returncode == 0:
        on_head("scancel", proc.stdout.strip().split(";")[0])
    assert proc.returncode != 0 and "Access denied to requested reservation" in proc.stderr, proc.stderr
