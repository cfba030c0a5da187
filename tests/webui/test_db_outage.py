# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's database (MariaDB) stopped or broken: a 503 with a clear message and a banner, never a 500.

Two ways to lose the database: an app whose MariaDB does not answer at all (pymysql to a closed 127.0.0.1 port,
what ``systemctl stop mariadb`` looks like to the portal), and a working SQLite database that goes bad under a
logged-in user and comes back (recovery without a restart).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from webui import create_app
from webui.extensions import db

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import closed_port
from .conftest import log_in_as
from .conftest import post

MESSAGE = "The portal's database is unavailable right now."


@pytest.fixture
def no_db_app(base_config: dict[str, Any], fake_scheduler: FakeScheduler) -> Iterator[Flask]:
    url = f"mysql+pymysql://carme_webui:pw@127.0.0.1:{closed_port()}/carme_webui?charset=utf8mb4&connect_timeout=2"
    application = create_app({**base_config, "SQLALCHEMY_DATABASE_URI": url, "SCHEDULER": fake_scheduler})
    yield application
    with application.app_context():
        db.engine.dispose()


def logged_in_cookie(client: FlaskClient) -> None:
    """A cookie as a login leaves it (the database that would know the login is down)."""
    with client.session_transaction() as sess:
        sess.permanent = True
        sess["login"] = "a-token-the-database-would-know"


def assert_html_503(resp: Any) -> None:
    assert resp.status_code == 503
    body = resp.get_data(as_text=True)
    assert MESSAGE in body
    assert 'class="banner"' in body
    assert resp.headers["Retry-After"]


def test_pages_and_api_answer_503_with_a_message_while_mariadb_is_down(no_db_app: Flask) -> None:
    client = no_db_app.test_client()
    logged_in_cookie(client)
    for path in ("/", "/sessions/new"):
        assert_html_503(client.get(path))
    for path in ("/api/sessions", "/api/csrf-token", "/api/cluster"):
        resp = client.get(path)
        assert resp.status_code == 503, path
        assert resp.get_json() == {"error": MESSAGE + " Please try again in a minute.", "database": "down"}


def test_login_is_refused_with_a_message_while_mariadb_is_down(no_db_app: Flask) -> None:
    client = no_db_app.test_client()
    assert client.get("/auth/login").status_code == 200  # the form itself needs no database
    resp = post(client, "/auth/login", {"username": "alice", "password": "whatever"})
    assert resp.status_code == 503
    body = resp.get_data(as_text=True)
    assert MESSAGE in body and "try again in a minute" in body
    assert 'name="username"' in body  # the login form again, to retry


def test_health_reports_the_database(no_db_app: Flask, app: Flask) -> None:
    down = no_db_app.test_client().get("/api/health")
    assert down.status_code == 503
    assert down.get_json()["database"] == "down" and down.get_json()["ok"] is False
    up = app.test_client().get("/api/health")
    assert up.status_code == 200
    assert up.get_json() == {"ok": True, "database": "ok", "scheduler": "ok"}


@pytest.mark.sqlite_file
def test_a_database_that_goes_bad_under_a_logged_in_user_and_comes_back(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler, base_config: dict[str, Any]
) -> None:
    add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    assert client.get("/").status_code == 200
    path = Path(str(base_config["SQLALCHEMY_DATABASE_URI"]).removeprefix("sqlite:///"))
    saved = path.with_suffix(".saved")
    shutil.copy(path, saved)
    with app.app_context():
        db.engine.dispose()
    path.write_bytes(b"this is not a database" * 512)
    try:
        assert_html_503(client.get("/"))
        assert client.get("/api/sessions").status_code == 503
        assert client.get("/api/health").get_json()["database"] == "down"
    finally:
        with app.app_context():
            db.engine.dispose()
        shutil.copy(saved, path)
    sessions = client.get("/api/sessions")  # the same login works again: nothing was lost
    assert sessions.status_code == 200 and len(sessions.get_json()["sessions"]) == 1
    assert client.get("/api/health").status_code == 200
