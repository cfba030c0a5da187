"""Apps on their own origin (webui/app_origin.py): Connect ticket, apps cookie, proxy-auth, fetch metadata."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs
from urllib.parse import urlsplit

import pytest
from flask import Flask
from flask.testing import FlaskClient

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import csrf_token
from .conftest import log_in_as
from .conftest import make_app
from .conftest import post

APPS = "https://apps.example.test:8444"
PORTAL = "https://portal.example.test"
VIA_APPS = {"X-Carme-Via": "apps"}


@pytest.fixture
def app(base_config: dict[str, Any], fake_scheduler: FakeScheduler) -> Iterator[Flask]:
    yield make_app({**base_config, "SCHEDULER": fake_scheduler, "APPS_ORIGIN": APPS, "PORTAL_URL": PORTAL})


def connect(client: FlaskClient, job_id: int) -> tuple[str, str]:
    """Follow the portal's Connect link: (job, ticket) of the enter URL it redirects to."""
    resp = client.get(f"/sessions/{job_id}/connect")
    assert resp.status_code == 302, resp.data
    url = urlsplit(resp.headers["Location"])
    assert f"{url.scheme}://{url.netloc}" == APPS and url.path == "/.carme/enter"
    query = parse_qs(url.query)
    assert resp.headers["Cache-Control"] == "no-store"
    return query["job"][0], query["ticket"][0]


def apps_client(app: Flask) -> FlaskClient:
    """A browser on the apps' origin: none of the portal's cookies."""
    return app.test_client()


def enter(browser: FlaskClient, job: str, ticket: str) -> Any:
    return browser.get("/api/app-enter", query_string={"job": job, "ticket": ticket}, headers=VIA_APPS)


def auth(browser: FlaskClient, uri: str, via: str = "apps", app_cookie: str = "") -> Any:
    """nginx's auth_request: it passes the Cookie header of the proxied request (whose path the cookie matches)."""
    headers = {"X-Original-URI": uri, "X-Carme-Via": via}
    if app_cookie:
        headers["Cookie"] = f"carme_app={app_cookie}"
    return browser.application.test_client(use_cookies=False).get("/api/proxy-auth", headers=headers)


def cookie_of(resp: Any) -> str:
    return str(resp.headers["Set-Cookie"]).split(";", 1)[0].split("=", 1)[1]


def test_connect_ticket_becomes_a_cookie_for_that_session_only(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    other = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    job, ticket = connect(client, job_id)
    browser = apps_client(app)
    resp = enter(browser, job, ticket)
    assert resp.status_code == 302 and resp.headers["Location"] == f"/proxy/{job_id}/"
    cookie = resp.headers["Set-Cookie"]
    assert cookie.startswith("carme_app=") and f"Path=/proxy/{job_id}/" in cookie
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert auth(browser, f"/proxy/{job_id}/lab", app_cookie=cookie_of(resp)).status_code == 200
    # the cookie names its job: a request for another session of the same user is not authorised by it
    assert auth(browser, f"/proxy/{other}/lab", app_cookie=cookie_of(resp)).status_code == 401


def test_a_ticket_is_used_once(app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    job, ticket = connect(client, job_id)
    assert enter(apps_client(app), job, ticket).headers["Location"] == f"/proxy/{job_id}/"
    again = enter(apps_client(app), job, ticket)
    assert again.status_code == 302 and again.headers["Location"] == f"{PORTAL}/sessions/{job_id}/connect"
    assert "Set-Cookie" not in again.headers


def test_a_ticket_is_bound_to_its_job_and_expires(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    job, ticket = connect(client, job_id)
    assert "Set-Cookie" not in enter(apps_client(app), str(job_id + 1), ticket).headers  # another job: used up
    assert "Set-Cookie" not in enter(apps_client(app), job, ticket).headers
    app.config["APP_TICKET_SECONDS"] = -1
    job, ticket = connect(client, job_id)
    assert "Set-Cookie" not in enter(apps_client(app), job, ticket).headers  # expired at once


def test_forged_or_foreign_tickets_and_cookies_get_nothing(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    browser = apps_client(app)
    assert "Set-Cookie" not in enter(browser, str(job_id), "x" * 43).headers
    assert enter(browser, "abc", "x").status_code == 400
    assert auth(browser, f"/proxy/{job_id}/lab", app_cookie="forged.value.sig").status_code == 401


def test_bob_cannot_connect_to_alices_session(app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "bob")
    assert client.get(f"/sessions/{job_id}/connect").status_code == 403


def test_the_portal_cookie_authorises_nothing_for_the_apps(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    """With an apps origin, the portal's login cookie is no pass to /proxy/ (the demo's hosts share cookies)."""
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    assert auth(client, f"/proxy/{job_id}/lab").status_code == 401
    # and only nginx's apps server block asks at all: from the portal's block it does not exist
    assert auth(client, f"/proxy/{job_id}/lab", via="portal").status_code == 404
    assert client.get("/api/app-enter?job=1&ticket=x").status_code == 404


def test_logout_ends_the_apps_cookie_too(app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    browser = apps_client(app)
    job, ticket = connect(client, job_id)
    value = cookie_of(enter(browser, job, ticket))
    assert auth(browser, f"/proxy/{job_id}/lab", app_cookie=value).status_code == 200
    resp = post(client, "/auth/logout")
    assert resp.status_code in (200, 302)
    assert auth(browser, f"/proxy/{job_id}/lab", app_cookie=value).status_code == 401


def test_cross_site_requests_are_refused_navigations_are_not(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    """What a script on the apps' origin (same site, other origin) makes the browser send to the portal."""
    log_in_as(app, client, "alice")
    token = csrf_token(client)
    for site in ("same-site", "cross-site"):
        fetch = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}
        assert client.get("/api/sessions", headers=fetch).status_code == 403
        assert client.get("/api/csrf-token", headers=fetch).status_code == 403
        no_cors = {**fetch, "Sec-Fetch-Mode": "no-cors"}
        resp = client.post("/api/sessions", json={"app": "jupyterlab"}, headers={**no_cors, "X-CSRFToken": token})
        assert resp.status_code == 403 and "Cross-site" in resp.get_json()["error"]
        frame = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}
        assert client.get("/", headers=frame).status_code == 403
        navigate = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
        assert client.get("/", headers=navigate).status_code == 200
        assert client.post("/api/sessions", json={}, headers={**navigate, "X-CSRFToken": token}).status_code == 403
    same = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}
    assert client.get("/api/sessions", headers=same).status_code == 200
    assert client.get("/api/health", headers={"Sec-Fetch-Site": "cross-site"}).status_code in (200, 503)


def test_without_an_apps_origin_connect_stays_on_the_portal(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler
) -> None:
    app = make_app({**base_config, "SCHEDULER": fake_scheduler})
    client = app.test_client()
    with app.app_context():
        job_id = add_session(app, fake_scheduler, "alice")
        log_in_as(app, client, "alice")
        assert client.get(f"/sessions/{job_id}/connect").headers["Location"] == f"/proxy/{job_id}/"
        assert client.get("/api/app-enter?job=1&ticket=x", headers=VIA_APPS).status_code == 404
