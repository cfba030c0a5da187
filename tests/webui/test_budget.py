# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU-hour usage from Slurm's accounting and the budget check of ``start_session`` (issue 11).

* ``SlurmClient.account_jobs`` sends a query slurmrestd 22.05.8 accepts (no ``users=``, no epoch ``start_time``) and
  reads 22.05's "Nothing found" as no jobs (the scheduler keeps each user's own: tests/webui/test_usage_cache.py);
* an unknown usage is cached briefly for the dashboard (not re-queried on every load) and never read as "allowed":
  a GPU session is refused with a message, a CPU-only one still starts.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import pytest
from flask import Flask

from webui import forms
from webui.auth.logins import CurrentUser
from webui.quota.usage import quota_view
from webui.sessions.service import start_session
from webui.slurm.client import SlurmClient
from webui.slurm.errors import SlurmError
from webui.slurm.jwt_tokens import TokenSource

from .conftest import FakeScheduler
from .conftest import set_slurm_limits


class RecordingClient(SlurmClient):
    def __init__(self, answers: dict[str, Any]):
        super().__init__("http://127.0.0.1:1", TokenSource("/nonexistent"))
        self.answers = answers
        self.paths: list[str] = []

    def request(self, method: str, path: str, user: str, body: Any = None) -> dict[str, Any]:
        self.paths.append(path)
        answer = self.answers[urllib.parse.urlsplit(path).path.rsplit("/", 1)[-1]]
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


GOOD = {"app": "jupyterlab", "image": "pytorch", "partition": "gpu", "gpus": "1", "time_minutes": "60"}


def test_the_accounting_query_is_one_slurmrestd_22_05_accepts() -> None:
    jobs = {"jobs": [{"user": "alice", "job_id": 1}, {"user": "bob", "job_id": 2}]}
    client = RecordingClient({"jobs": jobs})
    assert client.account_jobs("alice", ["research"], 1_700_000_000) == jobs["jobs"]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(client.paths[-1]).query)
    assert "users" not in query and query["account"] == ["research"] and query["skip_steps"] == ["true"]
    assert query["start_time"][0].count("-") == 2 and "T" in query["start_time"][0], query  # not an epoch


def test_nothing_found_is_no_jobs_and_other_errors_are_raised() -> None:
    nothing = SlurmError("Slurm reported: Nothing found", errors=[{"error_number": 9003}])
    assert RecordingClient({"jobs": nothing}).account_jobs("alice", ["research"], 0) == []
    broken = SlurmError("Slurm reported: Unknown Query field", errors=[{"error_number": 9000}])
    with pytest.raises(SlurmError):
        RecordingClient({"jobs": broken}).account_jobs("alice", ["research"], 0)


def test_an_unknown_usage_is_cached_briefly_and_refuses_gpu_sessions(
    app: Flask, fake_scheduler: FakeScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def unknown(user: str, since: Any) -> float | None:
        calls.append(user)
        return None

    monkeypatch.setattr(fake_scheduler, "gpu_hours_used", unknown)
    set_slurm_limits(fake_scheduler, "alice", gpu_minutes=6000)  # a GPU budget in Slurm: the start checks it
    with app.test_request_context("/"):
        for _ in range(5):
            assert quota_view("alice", cached=True)["used_gpu_hours"] is None
        assert len(calls) == 1, "every dashboard load asked Slurm again"
        user = CurrentUser("alice", False)
        with pytest.raises(forms.FieldError, match="cannot be read from Slurm"):
            start_session(user, GOOD)
