# SPDX-License-Identifier: GPL-3.0-or-later
"""A waiting session says why, in words: Slurm's pending reason on the dashboard and in the API."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from flask import Flask

from webui.sessions.pending_reasons import REASONS
from webui.sessions.pending_reasons import explain

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import log_in_as


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("Resources", "Waiting for free resources: the nodes it fits on are busy."),
        ("Priority", "Waiting behind jobs with a higher priority."),
        ("QOSMaxGRESPerUser", "You already use all the GPUs sessions may have at once"),
        ("ReqNodeNotAvail, UnavailableNodes:node[1-2]", "The nodes it needs are down, drained or reserved"),
        ("Reservation", "Waiting for its reservation to start."),
        ("AssocGrpGRESMinutes", "Your GPU budget for this month is used up"),
        ("None", "the scheduler has not looked at it yet"),
        ("BeginTime", "Waiting for its start time."),
    ],
)
def test_known_reasons_are_sentences(reason: str, words: str) -> None:
    assert words in explain(reason)


def test_limits_not_in_the_table_are_named_by_kind_and_unknown_reasons_shown_raw() -> None:
    assert explain("QOSGrpCpuLimit") == "A limit of its QOS holds it (Slurm: QOSGrpCpuLimit)."
    assert explain("AssocGrpMemLimit") == "One of your limits holds it (Slurm: AssocGrpMemLimit)."
    assert explain("FrontEndDown") == "FrontEndDown"
    assert explain("") == "" and explain("  ") == ""


def test_every_sentence_is_a_sentence() -> None:
    for code, words in REASONS.items():
        assert words[0].isupper() and words.endswith("."), (code, words)


def pending(fake_scheduler: FakeScheduler, job_id: int, reason: str) -> None:
    fake_scheduler.jobs[job_id] = dataclasses.replace(fake_scheduler.jobs[job_id], state="PENDING", reason=reason)


def my_view(client: Any, job_id: int) -> dict[str, Any]:
    return next(v for v in client.get("/api/sessions").get_json()["sessions"] if v["job_id"] == job_id)


def test_a_pending_session_says_why_on_the_dashboard_and_in_the_api(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice", running=False)
    pending(fake_scheduler, job_id, "Resources")
    log_in_as(app, client, "alice")
    page = client.get("/").get_data(as_text=True)
    assert 'title="Slurm: Resources">(Waiting for free resources: the nodes it fits on are busy.)</small>' in page
    view = my_view(client, job_id)
    assert view["state"] == "PENDING"
    assert view["reason"] == REASONS["Resources"] and view["slurm_reason"] == "Resources", view

    pending(fake_scheduler, job_id, "SomethingNew")  # a reason of a newer Slurm: shown as Slurm gives it
    assert "(SomethingNew)" in client.get("/").get_data(as_text=True)
    assert my_view(client, job_id)["reason"] == "SomethingNew"


def test_a_running_session_has_no_pending_reason(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    fake_scheduler.jobs[job_id] = dataclasses.replace(fake_scheduler.jobs[job_id], reason="Resources")
    log_in_as(app, client, "alice")
    view = my_view(client, job_id)
    assert view["state"] == "RUNNING" and view["reason"] == "" and view["slurm_reason"] == "", view
    html = client.get("/").get_data(as_text=True)
    # the row keeps an empty, hidden reason element for the live updates (dashboard.js), never a shown one
    assert re.findall(r'<small class="reason"[^>]*>', html) in ([], ['<small class="reason" hidden>']), html
