# SPDX-License-Identifier: GPL-3.0-or-later
"""CSRF protection stays on: a POST without the token is a 400 (pages and API)."""

from __future__ import annotations

from typing import Any

from flask import Flask

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import csrf_token
from .conftest import log_in_as
from .conftest import post

REFERER = {"Referer": "https://localhost/"}


def test_login_post_without_token_is_400(client: Any) -> None:
    resp = client.post("/auth/login", data={"username": "alice", "password": "x"}, headers=REFERER)
    assert resp.status_code == 400
    assert "CSRF" in resp.get_data(as_text=True)


def test_stop_without_token_is_400_and_nothing_happens(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    resp = client.post(f"/sessions/{job_id}/stop", headers=REFERER)
    assert resp.status_code == 400
    assert fake_scheduler.cancelled == []


def test_wrong_token_is_400(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    resp = client.post("/auth/logout", data={"csrf_token": "forged"}, headers=REFERER)
    assert resp.status_code == 400


def test_cross_site_referer_is_400(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    token = csrf_token(client)
    resp = client.post("/auth/logout", data={"csrf_token": token}, headers={"Referer": "https://evil.example/"})
    assert resp.status_code == 400


def test_api_post_needs_the_header_token(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    resp = client.post(f"/api/sessions/{job_id}/stop", headers=REFERER)
    assert resp.status_code == 400 and resp.is_json
    assert fake_scheduler.cancelled == []
    token = client.get("/api/csrf-token").get_json()["csrf_token"]
    resp = client.post(f"/api/sessions/{job_id}/stop", headers={**REFERER, "X-CSRFToken": token})
    assert resp.status_code == 200
    assert fake_scheduler.cancelled == [(job_id, "alice")]


def test_form_post_with_token_passes(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    assert post(client, "/auth/logout").status_code == 302
