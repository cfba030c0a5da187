# SPDX-License-Identifier: GPL-3.0-or-later
"""An origin per session (webui/sessions/app_origin.py): bound Connect tickets, apps cookies, proxy-auth, fetch
metadata."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs
from urllib.parse import urlsplit

import pytest
from flask import Flask
from flask.testing import FlaskClient

from webui.sessions.app_origin import session_label
from webui.sessions.app_origin import upstream_cookies

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import csrf_token
from .conftest import log_in_as
from .conftest import make_app
from .conftest import post

APPS = "https://*.apps.example.test:8444"
PORTAL = "https://portal.example.test"
VIA_APPS = {"X-Carme-Via": "apps"}


@pytest.fixture
def app(base_config: dict[str, Any], fake_scheduler: FakeScheduler) -> Iterator[Flask]:
    yield make_app({**base_config, "SCHEDULER": fake_scheduler, "APPS_ORIGIN": APPS, "PORTAL_URL": PORTAL})


def host_of(app: Flask, job_id: int) -> str:
    return f"{session_label(app.secret_key or '', job_id)}.apps.example.test:8444"


def connect(client: FlaskClient, browser: FlaskClient, job_id: int) -> tuple[str, str]:
    """Follow the portal's Connect link in one browser (``client`` on the portal's origin, ``browser`` on the
    session's): (job, ticket) of the enter URL it ends at, with ``browser`` holding the bind cookie."""
    first = client.get(f"/sessions/{job_id}/connect")
    assert first.status_code == 302, first.data
    url = urlsplit(first.headers["Location"])
    assert url.netloc == host_of(client.application, job_id) and url.path == "/.carme/enter", url
    assert first.headers["Cache-Control"] == "no-store"
    bound = enter(browser, str(job_id), "", host=url.netloc)
    assert bound.status_code == 302, bound.data
    back = urlsplit(bound.headers["Location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == f"{PORTAL}/sessions/{job_id}/connect"
    second = client.get(f"/sessions/{job_id}/connect?{back.query}")
    assert second.status_code == 302, second.data
    url = urlsplit(second.headers["Location"])
    assert url.netloc == host_of(client.application, job_id) and url.path == "/.carme/enter"
    query = parse_qs(url.query)
    return query["job"][0], query["ticket"][0]


def apps_client(app: Flask) -> FlaskClient:
    """A browser on the apps' origin: none of the portal's cookies."""
    return app.test_client()


def enter(browser: FlaskClient, job: str, ticket: str, host: str = "") -> Any:
    app = browser.application
    host = host or (host_of(app, int(job)) if job.isdigit() else "x.apps.example.test")
    query = {"job": job, "ticket": ticket} if ticket else {"job": job}
    return browser.get("/api/app-enter", query_string=query, headers={**VIA_APPS, "Host": host})


def auth(browser: FlaskClient, uri: str, via: str = "apps", app_cookie: str = "", host: str = "", **extra: str) -> Any:
    """nginx's auth_request: it passes the request's Host and Cookie headers."""
    job = int(uri.split("/")[2])
    headers = {"X-Original-URI": uri, "X-Carme-Via": via, "Host": host or host_of(browser.application, job), **extra}
    if app_cookie:
        headers["Cookie"] = f"__Host-carme_app={app_cookie}"
    return browser.application.test_client(use_cookies=False).get("/api/proxy-auth", headers=headers)


def cookie_of(resp: Any) -> str:
    value = next(v for v in resp.headers.getlist("Set-Cookie") if v.startswith("__Host-carme_app="))
    return str(value).split(";", 1)[0].split("=", 1)[1]


def test_connect_ticket_becomes_a_cookie_for_that_session_only(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    other = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    browser = apps_client(app)
    job, ticket = connect(client, browser, job_id)
    resp = enter(browser, job, ticket)
    assert resp.status_code == 302 and resp.headers["Location"] == f"/proxy/{job_id}/"
    cookie = next(v for v in resp.headers.getlist("Set-Cookie") if v.startswith("__Host-carme_app="))
    assert "Path=/;" in cookie and "Domain" not in cookie
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert auth(browser, f"/proxy/{job_id}/lab", app_cookie=cookie_of(resp)).status_code == 200
    # the cookie names its job: on another session's host it authorises nothing, nor for another path there
    assert auth(browser, f"/proxy/{other}/lab", app_cookie=cookie_of(resp)).status_code == 401
    wrong_host = host_of(app, other)
    assert auth(browser, f"/proxy/{job_id}/lab", app_cookie=cookie_of(resp), host=wrong_host).status_code == 404


def test_a_ticket_is_used_once(app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    browser = apps_client(app)
    job, ticket = connect(client, browser, job_id)
    assert enter(browser, job, ticket).headers["Location"] == f"/proxy/{job_id}/"
    browser.set_cookie("__Host-carme_bind", "whatever", domain=host_of(app, job_id).split(":")[0])
    again = enter(browser, job, ticket)
    assert again.status_code == 302 and again.headers["Location"] == f"{PORTAL}/sessions/{job_id}/connect"
    assert "__Host-carme_app" not in str(again.headers.getlist("Set-Cookie"))


def test_a_ticket_works_only_in_the_browser_that_asked(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    """bob's Connect ticket, sent to alice: her browser has no bind cookie of his (or another one): nothing."""
    job_id = add_session(app, fake_scheduler, "bob")
    log_in_as(app, client, "bob")
    job, ticket = connect(client, apps_client(app), job_id)
    alices = apps_client(app)
    refused = enter(alices, job, ticket)
    assert refused.status_code == 403 and "another browser" in refused.get_data(as_text=True)
    assert "Set-Cookie" not in refused.headers
    enter(alices, job, "")  # alice's browser gets a bind cookie of its own for bob's host: still not his ticket's
    again = enter(alices, job, ticket)
    assert again.status_code == 302 and again.headers["Location"] == f"{PORTAL}/sessions/{job_id}/connect"
    assert "__Host-carme_app" not in str(again.headers.getlist("Set-Cookie"))


def test_a_ticket_is_bound_to_its_job_and_expires(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    browser = apps_client(app)
    job, ticket = connect(client, browser, job_id)
    other = str(job_id + 1)
    assert enter(browser, other, ticket, host=host_of(app, job_id)).status_code == 404  # not that session's host
    assert "__Host-carme_app" not in str(enter(browser, other, ticket).headers.getlist("Set-Cookie"))
    app.config["APP_TICKET_SECONDS"] = -1
    browser = apps_client(app)
    job, ticket = connect(client, browser, job_id)
    assert "__Host-carme_app" not in str(enter(browser, job, ticket).headers.getlist("Set-Cookie"))  # expired


def test_forged_or_foreign_tickets_and_cookies_get_nothing(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    browser = apps_client(app)
    enter(browser, str(job_id), "")
    assert "__Host-carme_app" not in str(enter(browser, str(job_id), "x" * 43).headers.getlist("Set-Cookie"))
    assert enter(browser, "abc", "x").status_code == 400
    assert auth(browser, f"/proxy/{job_id}/lab", app_cookie="forged.value.sig").status_code == 401
    # a made-up host name for the session (a guessed tag) is no session's
    assert auth(browser, f"/proxy/{job_id}/lab", host=f"{job_id}-0000000000000000.apps.example.test").status_code == 404
    assert client.get(f"/sessions/{job_id}/connect?bind=x").status_code in (302, 400, 403)


def test_other_origins_may_only_navigate_to_a_session(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    """bob's app (same site, other origin) cannot make alice's browser call alice's app, nor another site."""
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    browser = apps_client(app)
    value = cookie_of(enter(browser, *connect(client, browser, job_id)))
    uri = f"/proxy/{job_id}/api/contents"
    for site in ("same-site", "cross-site"):
        for mode, dest in (("cors", "empty"), ("no-cors", "empty"), ("websocket", "websocket"), ("navigate", "iframe")):
            fetch = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode, "Sec-Fetch-Dest": dest}
            assert auth(browser, uri, app_cookie=value, **fetch).status_code == 403, fetch
        post_nav = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
        assert auth(browser, uri, app_cookie=value, **post_nav, **{"X-Original-Method": "POST"}).status_code == 403
        assert auth(browser, uri, app_cookie=value, **post_nav).status_code == 200
    same = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}
    assert auth(browser, uri, app_cookie=value, **same).status_code == 200
    # no fetch metadata (not a browser, or an old one): an Origin other than the session's own is refused
    assert auth(browser, uri, app_cookie=value, Origin="https://evil.example").status_code == 403
    own = "https://" + host_of(app, job_id)
    assert auth(browser, uri, app_cookie=value, Origin=own).status_code == 200


def test_no_carme_cookie_reaches_an_app() -> None:
    header = (
        "_xsrf=abc; __Host-carme_session=alice; carme_session=x;CARME_APP=y;  carme_app =z; "
        "__Host-carme_app=v; __Secure-Carme_x=1; theme=dark; __host-carme_bind=n; carme_session=again"
    )
    assert upstream_cookies(header) == "_xsrf=abc; theme=dark"
    assert upstream_cookies("") == ""
    assert upstream_cookies("carme_session=only") == ""


def test_proxy_auth_names_the_cookies_for_the_app(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    browser = apps_client(app)
    value = cookie_of(enter(browser, *connect(client, browser, job_id)))
    headers = {
        "X-Original-URI": f"/proxy/{job_id}/lab",
        "X-Carme-Via": "apps",
        "Host": host_of(app, job_id),
        "Cookie": f"_xsrf=1; carme_session=decoy; __Host-carme_app={value}; __Host-carme_session=real",
    }
    resp = app.test_client(use_cookies=False).get("/api/proxy-auth", headers=headers)
    assert resp.status_code == 200 and resp.headers["X-Carme-Cookie"] == "_xsrf=1"
    assert "X-Carme-Authorization" not in resp.headers


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
    value = cookie_of(enter(browser, *connect(client, browser, job_id)))
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
