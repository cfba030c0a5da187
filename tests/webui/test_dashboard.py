# SPDX-License-Identifier: GPL-3.0-or-later
"""The dashboard's caches: what is computed once per scheduler snapshot, what is kept per worker, what never is."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from flask import Flask

from webui.caches import TTLMap
from webui.dashboard.views import usage_card
from webui.extensions import db
from webui.models import News
from webui.models import User
from webui.quota.limits import user_limits
from webui.slurm.scheduler import state_cache
from webui.slurm.state import ClusterState
from webui.slurm.state import Job
from webui.slurm.state import Node
from webui.slurm.state import Partition

from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import post
from .conftest import set_slurm_limits


def node(name: str, used: int, total: int = 4, state: str = "mixed") -> Node:
    return Node(name=name, state=state, gpus_total=total, gpus_used=used, partitions=("gpu",))


def snapshot(used: int) -> ClusterState:
    return ClusterState(
        jobs=(
            Job(job_id=1, user="alice", name="a", state="RUNNING", partition="gpu", gpus=1),
            Job(job_id=2, user="bob", name="b", state="PENDING", partition="gpu", gpus=2),
            Job(job_id=3, user="alice", name="c", state="PENDING", partition="gpu", gpus=1),
        ),
        nodes=(node("n1", used), node("n2", 0, state="down")),
        partitions=(Partition(name="gpu", nodes=("n1", "n2"), max_time_minutes=60, state="up"),),
        fetched_at=1.0,
    )


def test_derived_views_are_computed_once_per_snapshot() -> None:
    state = snapshot(used=1)
    usage = state.gpu_usage()
    assert state.gpu_usage() is usage  # the same object for every request that sees this snapshot
    assert usage["partitions"] == [{"name": "gpu", "state": "up", "total": 8, "used": 1, "free": 3, "queued": 3}]
    assert [n["free"] for n in usage["nodes"]] == [3, 0]  # a down node offers nothing
    assert [j.job_id for j in state.jobs_of("alice")] == [1, 3]
    assert state.jobs_of("nobody") == []
    bob = state.job(2)
    assert bob is not None and bob.user == "bob"
    assert state.job(99) is None


def test_derived_views_follow_a_cache_refresh() -> None:
    used = {"n": 1}
    now = {"t": 0.0}
    cache = state_cache(lambda: snapshot(used["n"]), ttl=2.0, clock=lambda: now["t"])
    first = cache.get()
    assert first.gpu_usage()["partitions"][0]["used"] == 1
    used["n"] = 3
    assert cache.get() is first  # within the cache interval: the same snapshot and views
    now["t"] = 2.5
    second = cache.get()
    assert second is not first
    assert second.gpu_usage()["partitions"][0]["used"] == 3
    assert first.gpu_usage()["partitions"][0]["used"] == 1  # an old snapshot keeps its own views


def test_usage_card_is_rendered_once_per_snapshot(app: Flask) -> None:
    with app.test_request_context("/"):
        one, two = snapshot(used=1), snapshot(used=2)
        card = usage_card(one)
        assert usage_card(one) is card
        new_card = usage_card(two)
        assert new_card is not card and new_card != card
        assert "<td>n1</td><td>mixed</td><td>2</td><td>2</td><td>4</td>" in new_card


def card_rows(page: str) -> list[tuple[str, str, str]]:
    """(name, free, used) of each node row in the cluster GPU card."""
    return re.findall(r"<tr><td>(gpu01)</td><td>\w+</td><td>(\d+)</td><td>(\d+)</td>", page)


def test_dashboard_shows_the_new_state_after_a_refresh(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    log_in_as(app, client, "alice")
    assert card_rows(client.get("/").get_data(as_text=True)) == [("gpu01", "2", "0")]
    fake_scheduler.nodes[0] = Node(name="gpu01", state="mixed", gpus_total=2, gpus_used=1, partitions=("gpu",))
    assert card_rows(client.get("/").get_data(as_text=True)) == [("gpu01", "1", "1")]


def test_session_version_is_checked_on_every_request_a_lock_ends_no_login(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    assert client.get("/").status_code == 200
    with app.app_context():
        db.session.query(User).filter_by(username="alice").one().session_version += 1
        db.session.commit()
    resp = client.get("/")
    assert resp.status_code == 302 and "/auth/login" in resp.headers["Location"]
    log_in_as(app, client, "alice")
    assert client.get("/").status_code == 200
    with app.app_context():
        user = db.session.query(User).filter_by(username="alice").one()
        user.locked_until = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
        db.session.commit()
    assert client.get("/").status_code == 200  # failed attempts (by anyone) never end an open login


def test_ttl_map_expires_per_key() -> None:
    now = {"t": 0.0}
    cache = TTLMap(2.0, clock=lambda: now["t"])
    cache.put("short", 1)
    cache.put("long", 2, ttl=60.0)
    now["t"] = 1.9
    assert cache.get("short") == (True, 1)
    now["t"] = 2.0
    assert cache.get("short") == (False, None)
    assert cache.get("long") == (True, 2)
    cache.clear()
    assert cache.get("long") == (False, None)


def test_ttl_map_jitter_spreads_expiry_below_the_ttl() -> None:
    now = {"t": 0.0}
    cache = TTLMap(60.0, clock=lambda: now["t"], jitter=0.25)
    for user in range(200):
        cache.put(user, user)
    now["t"] = 44.9
    assert all(cache.get(user)[0] for user in range(200))  # none before 0.75 * ttl
    now["t"] = 53.0
    alive = sum(cache.get(user)[0] for user in range(200))
    assert 0 < alive < 200  # spread out, not all at once
    now["t"] = 60.0
    assert not any(cache.get(user)[0] for user in range(200))  # none after the ttl


def test_admin_news_shows_at_once_and_other_workers_follow_within_the_interval(app: Flask, client: Any) -> None:
    log_in_as(app, client, "carol", admin=True)
    assert "First news" not in client.get("/").get_data(as_text=True)  # the (empty) news list is now cached
    assert post(client, "/admin/news", {"title": "First news", "body": "b"}).status_code == 302
    assert "First news" in client.get("/").get_data(as_text=True)  # this worker cleared its cache
    with app.app_context():  # as another worker would: the row changes, this worker's cache does not know
        db.session.add(News(title="Second news", body="b", author="carol", published=True))
        db.session.commit()
    assert "Second news" not in client.get("/").get_data(as_text=True)
    app.extensions["carme_view_cache"].clear()  # what the end of the interval does
    assert "Second news" in client.get("/").get_data(as_text=True)


def limit_shown(client: Any, label: str) -> str:
    page = client.get("/").get_data(as_text=True)
    found = re.search(rf'<dd data-limit="{label}">(.*?)</dd>', page, re.S)
    assert found, page
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", found.group(1))).strip()


def test_limits_are_slurms_and_cached_for_display_only(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    set_slurm_limits(fake_scheduler, "alice", gpus_per_job=4, max_jobs=2, gpu_minutes=600)
    log_in_as(app, client, "alice")
    assert limit_shown(client, "GPUs per session") == "4 GPUs (association alice@research MaxTRESPerJob=gres/gpu)"
    assert limit_shown(client, "Sessions at a time") == "2 sessions (association alice@research MaxJobs)"
    assert limit_shown(client, "Time per session") == "no limit"
    assert "1.5 of 10.0 GPU-hours used this month (15 %); 8.5 left." in client.get("/").get_data(as_text=True)
    set_slurm_limits(fake_scheduler, "alice", gpus_per_job=1)  # a deploy changed the inventory, and so Slurm
    with app.test_request_context("/"):
        assert user_limits("alice").gpus_per_session.value == 1  # decisions read Slurm's records
        assert user_limits("alice", cached=True).gpus_per_session.value == 4  # display may lag
    form = {"app": "jupyterlab", "image": "pytorch", "partition": "gpu", "gpus": "2", "time_minutes": "30"}
    resp = post(client, "/sessions/new", form)
    assert resp.status_code == 400 and "(Slurm: association alice@research MaxTRESPerJob=gres/gpu=1)" in resp.get_data(
        as_text=True
    )
    app.extensions["carme_view_cache"].clear()  # what the end of the interval does
    assert limit_shown(client, "GPUs per session") == "1 GPU (association alice@research MaxTRESPerJob=gres/gpu)"
    assert "1.5 GPU-hours used this month; budget: no limit." in client.get("/").get_data(as_text=True)


def test_limits_slurm_cannot_read_are_said_so(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    log_in_as(app, client, "alice")
    fake_scheduler.error = "slurmdbd is down"
    page = client.get("/").get_data(as_text=True)
    assert "Your limits cannot be read from Slurm right now" in page


def session_cookie(resp: Any) -> str | None:
    return next((v for v in resp.headers.getlist("Set-Cookie") if v.startswith("__Host-carme_session=")), None)


def test_session_cookie_is_reissued_when_changed_or_old(app: Flask, client: Any, monkeypatch: Any) -> None:
    log_in_as(app, client, "alice")
    with client.session_transaction() as sess:
        sess.permanent = True  # as auth.totp leaves it
    first = client.get("/")
    assert session_cookie(first) is not None  # the CSRF token was added: changed
    assert session_cookie(client.get("/")) is None  # unchanged and just signed: nothing to send
    monkeypatch.setattr("webui.auth.login_cookie.REFRESH_AFTER_SECONDS", 0.0)
    again = session_cookie(client.get("/"))
    assert again is not None and "Expires=" in again  # old enough: re-signed, the lifetime slides


def test_tampered_session_cookie_is_refused(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    cookie = client.get_cookie("__Host-carme_session")
    assert cookie is not None
    client.set_cookie("__Host-carme_session", cookie.value[:-2] + ("AA" if cookie.value[-2:] != "AA" else "BB"))
    resp = client.get("/")
    assert resp.status_code == 302 and "/auth/login" in resp.headers["Location"]
