# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU-hours from Slurm's accounting without a query per user (issue: dashboard p99 at 200 users).

* one ``slurmdb/jobs?account=`` per account (and one ``slurmdb/associations``) whatever the number of users, asked as
  the service user; each user's sum holds only their own jobs of their own accounts;
* the dashboard shows the last known value at once and refreshes it in the background (one refresh per key);
* the start's budget check still reads Slurm (not the display cache) and refuses on unknown or used-up budgets.
"""

from __future__ import annotations

import datetime as dt
import threading
import urllib.parse
from typing import Any

import pytest
from flask import Flask

from carme_runtime import gpu_hours
from webui import forms
from webui.auth.logins import CurrentUser
from webui.caches import SingleFlight
from webui.caches import StaleWhileRefresh
from webui.quota.usage import quota_view
from webui.sessions.service import start_session
from webui.slurm.client import SlurmClient
from webui.slurm.errors import SlurmUnavailable
from webui.slurm.jwt_tokens import TokenSource
from webui.slurm.scheduler import SlurmScheduler
from webui.slurm.scheduler import job_gpu_hours

from .conftest import FakeScheduler
from .conftest import set_slurm_limits

SINCE = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
STARTED = int(SINCE.timestamp()) + 3600
USERS = [f"u{i:03d}" for i in range(50)]
ASSOCS = [{"user": u, "account": "research"} for u in USERS] + [
    {"user": "eve", "account": "physics"},
    {"user": "bob", "account": "research"},
    {"user": "bob", "account": "physics"},
]


def gpu_job(user: str, account: str, gpus: int, hours: float) -> dict[str, Any]:
    return {
        "user": user,
        "account": account,
        # finished after SINCE (the one GPU-hour rule counts the seconds from SINCE on: start and end matter)
        "time": {"start": STARTED, "end": STARTED + int(hours * 3600), "elapsed": int(hours * 3600)},
        "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": gpus}]},
    }


JOBS = {
    "research": [
        gpu_job("u000", "research", 2, 1.0),
        gpu_job("u001", "research", 1, 3.0),
        gpu_job("bob", "research", 1, 1),
    ],
    "physics": [gpu_job("eve", "physics", 4, 10.0), gpu_job("bob", "physics", 1, 2.0)],
}


class CountingClient(SlurmClient):
    """Answers like slurmrestd 22.05 and records (path, user) of every request."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:1", TokenSource("/nonexistent"))
        self.calls: list[tuple[str, str, dict[str, list[str]]]] = []
        self.fail = False
        self.lock = threading.Lock()

    def request(self, method: str, path: str, user: str, body: Any = None) -> dict[str, Any]:
        parts = urllib.parse.urlsplit(path)
        query = urllib.parse.parse_qs(parts.query)
        with self.lock:
            self.calls.append((parts.path.rsplit("/", 1)[-1], user, query))
        if self.fail:
            raise SlurmUnavailable("down")
        if parts.path.endswith("/associations"):
            wanted = query.get("user", [None])[0]
            return {"associations": [a for a in ASSOCS if wanted in (None, a["user"])]}
        jobs = [j for a in query["account"][0].split(",") for j in JOBS.get(a, [])]
        return {"jobs": jobs}

    def count(self, endpoint: str) -> int:
        return sum(1 for c in self.calls if c[0] == endpoint)


def scheduler(client: CountingClient) -> SlurmScheduler:
    return SlurmScheduler(client, service_user="carme-portal", cache_seconds=2, quota_cache_seconds=60, app_dirs=())


def test_one_accounting_query_per_account_whatever_the_number_of_users() -> None:
    client = CountingClient()
    sched = scheduler(client)
    used = {u: sched.gpu_hours_used(u, SINCE) for u in [*USERS, "eve", "bob"]}
    assert used["u000"] == 2.0 and used["u001"] == 3.0 and used["u002"] == 0.0
    assert used["eve"] == 40.0 and used["bob"] == 3.0  # bob: his jobs in both his accounts
    assert client.count("jobs") == 2  # research and physics, once each
    assert client.count("associations") == 1  # all associations at once
    assert {c[1] for c in client.calls} == {"carme-portal"}  # the service user (an Operator), no user's token
    for _ in range(3):  # within QUOTA_CACHE_SECONDS: no further query
        assert sched.gpu_hours_used("u003", SINCE) == 0.0
    assert len(client.calls) == 3


def test_concurrent_users_of_an_account_share_one_query() -> None:
    client = CountingClient()
    sched = scheduler(client)
    threads = [threading.Thread(target=sched.gpu_hours_used, args=(u, SINCE)) for u in USERS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert client.count("jobs") == 1 and client.count("associations") == 1


def test_no_user_sees_another_accounts_jobs_or_another_users_hours() -> None:
    client = CountingClient()
    sched = scheduler(client)
    assert sched.gpu_hours_used("eve", SINCE) == 40.0  # physics read first
    assert sched.gpu_hours_used("u000", SINCE) == 2.0  # not eve's physics hours, not u001's research hours
    # a user in no association the service user sees is asked with their own token, and has no account's jobs
    assert sched.gpu_hours_used("mallory", SINCE) == 0.0
    assert ("associations", "mallory", {"user": ["mallory"]}) in client.calls
    assert all(c[2].get("account") in (None, ["research"], ["physics"]) for c in client.calls)  # one account a query


def test_an_accounting_failure_is_unknown_never_zero() -> None:
    client = CountingClient()
    client.fail = True
    assert scheduler(client).gpu_hours_used("u000", SINCE) is None


def test_single_flight_keeps_a_value_for_its_ttl() -> None:
    now = [0.0]
    cache: SingleFlight[int] = SingleFlight(10, clock=lambda: now[0])
    fetched: list[int] = []

    def fetch() -> int:
        fetched.append(1)
        return len(fetched)

    assert cache.get("k", fetch) == 1 and cache.get("k", fetch) == 1
    assert cache.get("k", fetch, max_age=0) == 2  # max_age shorter than the ttl
    now[0] = 11
    assert cache.get("k", fetch) == 3


def test_display_serves_the_last_value_while_one_refresh_runs() -> None:
    now = [0.0]
    shown = StaleWhileRefresh(60, failure=10, max_stale=300, first_wait=2, jitter=0, clock=lambda: now[0])
    release = threading.Event()
    entered = threading.Event()
    calls: list[int] = []

    def fetch() -> float | None:
        calls.append(1)
        if len(calls) > 1:
            entered.set()
            assert release.wait(5)
        return float(len(calls))

    assert shown.get("alice", fetch).value == 1.0  # the first look waits (bounded) for its value
    now[0] = 61  # stale: the next looks get 1.0 at once while one refresh (blocked here) runs
    for _ in range(20):
        assert shown.get("alice", fetch).value == 1.0
    assert entered.wait(5)
    for _ in range(20):
        assert shown.get("alice", fetch).value == 1.0
    assert len(calls) == 2, "more than one refresh in flight for a key"
    release.set()
    assert shown.wait_idle()
    assert shown.get("alice", fetch).value == 2.0


def test_display_first_look_waits_only_boundedly_and_failures_keep_the_last_value() -> None:
    now = [0.0]
    shown = StaleWhileRefresh(60, failure=10, max_stale=300, first_wait=0.05, jitter=0, clock=lambda: now[0])
    slow = threading.Event()
    first = shown.get("bob", lambda: 5.0 if slow.wait(5) else None)
    assert first.value is None and first.as_of is None  # "updating": shown as unknown, not waited for
    slow.set()
    assert shown.wait_idle()
    good = shown.get("bob", lambda: 7.0)
    assert good.value == 5.0 and good.as_of is not None
    now[0] = 61
    assert shown.get("bob", lambda: None).value == 5.0  # refresh fails: the last value stays, with its time
    assert shown.wait_idle()
    assert shown.get("bob", lambda: None).value == 5.0 and shown.get("bob", lambda: 1.0).as_of == good.as_of
    now[0] = 400  # older than max_stale: unknown
    assert shown.get("bob", lambda: None).value is None


def test_dashboard_value_is_not_refetched_per_load_and_start_reads_slurm(
    app: Flask, fake_scheduler: FakeScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    usage = {"alice": 1.0}

    def used(user: str, since: Any) -> float | None:
        calls.append(user)
        return usage[user]

    monkeypatch.setattr(fake_scheduler, "gpu_hours_used", used)
    set_slurm_limits(fake_scheduler, "alice", gpu_minutes=6000)  # a GPU budget in Slurm: the start checks it
    good = {"app": "jupyterlab", "image": "pytorch", "partition": "gpu", "gpus": "1", "time_minutes": "60"}
    with app.test_request_context("/"):
        for _ in range(5):
            view = quota_view("alice", cached=True)
            assert view["used_gpu_hours"] == 1.0 and view["used_as_of"] is not None
        assert calls == ["alice"]
        usage["alice"] = None  # type: ignore[assignment]  # Slurm cannot say now: the display keeps 1.0 ...
        assert quota_view("alice", cached=True)["used_gpu_hours"] == 1.0
        with pytest.raises(forms.FieldError, match="cannot be read from Slurm"):  # ... the start does not
            start_session(CurrentUser("alice", False), good)
        usage["alice"] = 10_000.0  # over the budget per Slurm, the display still shows the older value
        assert quota_view("alice", cached=True)["used_gpu_hours"] == 1.0
        with pytest.raises(forms.FieldError, match=r"GPU budget for this month is used up .*GrpTRESMins=gres/gpu=6000"):
            start_session(CurrentUser("alice", False), good)
        assert calls == ["alice"] * 3  # display once, each start once


def test_the_portal_counts_gpu_hours_by_the_rule_of_carme_quota_report() -> None:
    """One GPU-hour rule (issue 31): a job that began before the month counts from the month's start on, in the
    portal's budget as in ``carme-quota report`` (and as Slurm's GPU-minute budget after its monthly reset); one
    still running counts up to now."""
    start = int(SINCE.timestamp())
    across = gpu_job("bob", "research", 2, 3.0)
    across["time"] = {"start": start - 3600, "end": start + 7200, "elapsed": 3 * 3600}  # 1 h in April, 2 h in May
    running = gpu_job("bob", "research", 1, 0.0)
    running["time"] = {"start": start + 3600, "end": 0, "elapsed": 0}
    now = start + 2 * 3600
    assert job_gpu_hours(across, start, now) == 4.0  # 2 GPUs x 2 h in May, not 2 x 3 h
    assert job_gpu_hours(across, 0, now) == 6.0  # the whole job, as the history lists it
    assert job_gpu_hours(running, start, now) == 1.0
    records = [gpu_hours.job_record(j) for j in (across, running)]
    report = gpu_hours.usage_from_sacct(records, "2024-05", tz=dt.UTC, now=now)
    assert report.by_user == {"bob": 5.0}
