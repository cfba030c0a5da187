# SPDX-License-Identifier: GPL-3.0-or-later
"""Login against a real slapd: password, TOTP enrolment, replay refusal, lockout, roles."""

from __future__ import annotations

import html
import re
import time

import pyotp
import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.fixtures.slapd import SlapdServer
from webui.extensions import db
from webui.models import AuditLog
from webui.models import User

from .conftest import log_in_as
from .conftest import post

pytestmark = pytest.mark.host


def password_step(client: FlaskClient, username: str, password: str) -> object:
    return post(client, "/auth/login", {"username": username, "password": password})


def enrol(client: FlaskClient, slapd_server: SlapdServer, username: str) -> pyotp.TOTP:
    resp = password_step(client, username, slapd_server.users[username])
    assert resp.status_code == 302 and resp.headers["Location"].endswith("/auth/totp")
    page = client.get("/auth/totp").get_data(as_text=True)
    assert "<svg" in page, "the enrolment page shows a QR code"
    secret = re.search(r'<code class="secret">([A-Z2-7]+)</code>', page)
    assert secret
    totp = pyotp.TOTP(secret.group(1))
    resp = post(client, "/auth/totp", {"code": totp.now()})
    assert resp.status_code == 302 and resp.headers["Location"] == "/"
    return totp


def test_enrol_then_log_in_again(ldap_app: Flask, slapd_server: SlapdServer) -> None:
    client = ldap_app.test_client()
    assert client.get("/").status_code == 302  # not logged in: to the login page
    totp = enrol(client, slapd_server, "alice")
    page = client.get("/")
    assert page.status_code == 200 and "alice" in page.get_data(as_text=True)
    cookie = page.request.headers.get("Cookie", "")
    assert "__Host-carme_session=" in cookie

    post(client, "/auth/logout")
    assert client.get("/").status_code == 302
    # second login: no enrolment page any more, a code from the next time step is accepted
    assert password_step(client, "alice", slapd_server.users["alice"]).status_code == 302
    assert "<svg" not in client.get("/auth/totp").get_data(as_text=True)
    resp = post(client, "/auth/totp", {"code": totp.at(time.time() + 30)})
    assert resp.status_code == 302
    assert client.get("/").status_code == 200
    with ldap_app.app_context():
        assert db.session.query(AuditLog).filter_by(action="totp.enrol", target="alice").count() == 1


def test_replayed_totp_code_is_refused(ldap_app: Flask, slapd_server: SlapdServer) -> None:
    first = ldap_app.test_client()
    totp = enrol(first, slapd_server, "alice")
    used_code = totp.now()
    # the enrolment consumed the current step; log in again elsewhere with the very same code
    second = ldap_app.test_client()
    password_step(second, "alice", slapd_server.users["alice"])
    resp = post(second, "/auth/totp", {"code": used_code})
    assert resp.status_code == 401
    assert "already used" in resp.get_data(as_text=True)
    assert second.get("/").status_code == 302
    # a fresh code (next step) still works
    resp = post(second, "/auth/totp", {"code": totp.at(time.time() + 30)})
    assert resp.status_code == 302 and second.get("/").status_code == 200


def test_wrong_totp_code_is_refused(ldap_app: Flask, slapd_server: SlapdServer) -> None:
    client = ldap_app.test_client()
    enrol(client, slapd_server, "alice")
    post(client, "/auth/logout")
    password_step(client, "alice", slapd_server.users["alice"])
    resp = post(client, "/auth/totp", {"code": "000000" if pyotp.TOTP("A" * 32).now() != "000000" else "111111"})
    assert resp.status_code == 401
    assert client.get("/").status_code == 302


def test_ten_wrong_passwords_lock_the_account(ldap_app: Flask, slapd_server: SlapdServer) -> None:
    client = ldap_app.test_client()
    for attempt in range(9):
        resp = password_step(client, "alice", f"wrong-{attempt}")
        assert resp.status_code == 401, attempt
        assert "Wrong user name or password" in resp.get_data(as_text=True)
    resp = password_step(client, "alice", "wrong-9")
    assert resp.status_code == 429
    # now even the right password is refused, without asking LDAP
    resp = password_step(client, "alice", slapd_server.users["alice"])
    assert resp.status_code == 429
    assert "Too many failed attempts" in resp.get_data(as_text=True)
    with ldap_app.app_context():
        user = db.session.query(User).filter_by(username="alice").one()
        assert user.locked_until is not None
        assert db.session.query(AuditLog).filter_by(action="login.locked", target="alice").count() == 1
    # another user is not affected
    assert password_step(client, "bob", slapd_server.users["bob"]).status_code == 302


def test_unknown_users_are_counted_and_locked_too(ldap_app: Flask) -> None:
    client = ldap_app.test_client()
    answers = {password_step(client, "nobody", f"pw{i}").status_code for i in range(9)}
    assert answers == {401}
    assert password_step(client, "nobody", "pw9").status_code == 429
    assert password_step(client, "nobody", "pw10").status_code == 429


def test_wrong_password_and_unknown_user_look_the_same(ldap_app: Flask) -> None:
    client = ldap_app.test_client()
    known = password_step(client, "alice", "not-her-password")
    unknown = password_step(client, "zed", "whatever")
    assert known.status_code == unknown.status_code == 401
    strip = re.compile(r'value="[^"]*"|content="[^"]*"')
    assert strip.sub("", known.get_data(as_text=True)) == strip.sub("", unknown.get_data(as_text=True)).replace(
        "zed", "alice"
    )


def test_empty_password_is_not_an_anonymous_bind(ldap_app: Flask) -> None:
    client = ldap_app.test_client()
    resp = password_step(client, "alice", "")
    assert resp.status_code == 400
    assert "password" in resp.get_data(as_text=True)


def test_password_with_shell_and_filter_characters(ldap_app: Flask, slapd_server: SlapdServer) -> None:
    """bob's password holds ' " $( ) ; ` * — it is passed to LDAP as data, nothing else."""
    client = ldap_app.test_client()
    assert password_step(client, "bob", slapd_server.users["bob"]).status_code == 302
    assert password_step(ldap_app.test_client(), "bob", "*").status_code == 401


def test_username_with_special_characters_is_a_400_naming_the_field(ldap_app: Flask) -> None:
    resp = password_step(ldap_app.test_client(), "alice)(uid=*", "x")
    assert resp.status_code == 400
    body = resp.get_data(as_text=True)
    assert "username" in body
    assert "alice)(uid=*" not in body or html.escape("alice)(uid=*") in body


def test_roles_come_from_ldap_groups(ldap_app: Flask, slapd_server: SlapdServer) -> None:
    alice = ldap_app.test_client()
    enrol(alice, slapd_server, "alice")
    assert alice.get("/admin/").status_code == 403
    carol = ldap_app.test_client()
    enrol(carol, slapd_server, "carol")
    assert carol.get("/admin/").status_code == 200


def test_admin_resets_totp_and_the_user_enrols_again(ldap_app: Flask, slapd_server: SlapdServer) -> None:
    alice = ldap_app.test_client()
    enrol(alice, slapd_server, "alice")
    carol = ldap_app.test_client()
    enrol(carol, slapd_server, "carol")
    resp = post(carol, "/admin/users/alice/totp-reset")
    assert resp.status_code == 302
    # alice's open session is void now
    assert alice.get("/").status_code == 302
    with ldap_app.app_context():
        entry = db.session.query(AuditLog).filter_by(action="admin.totp.reset").one()
        assert (entry.actor, entry.target) == ("carol", "alice")
    enrol(ldap_app.test_client(), slapd_server, "alice")  # shows a QR code again


def test_non_admin_cannot_reset_totp(ldap_app: Flask) -> None:
    client = ldap_app.test_client()
    log_in_as(ldap_app, client, "bob")
    log_in_as(ldap_app, ldap_app.test_client(), "alice")
    assert post(client, "/admin/users/alice/totp-reset").status_code == 403


def test_totp_step_requires_the_password_step(ldap_app: Flask) -> None:
    client = ldap_app.test_client()
    resp = client.get("/auth/totp")
    assert resp.status_code == 302 and resp.headers["Location"].endswith("/auth/login")
    assert post(client, "/auth/totp", {"code": "123456"}).status_code == 302


def test_login_redirects_only_to_local_paths(ldap_app: Flask, slapd_server: SlapdServer) -> None:
    client = ldap_app.test_client()
    post(
        client,
        "/auth/login",
        {"username": "alice", "password": slapd_server.users["alice"], "next": "//evil.example/"},
    )
    page = client.get("/auth/totp").get_data(as_text=True)
    secret = re.search(r'<code class="secret">([A-Z2-7]+)</code>', page)
    assert secret
    resp = post(client, "/auth/totp", {"code": pyotp.TOTP(secret.group(1)).now()})
    assert resp.headers["Location"] == "/"


def test_ldap_down_is_a_503_and_not_a_failure(app: Flask) -> None:
    client = app.test_client()  # base config: LDAP on a closed 127.0.0.1 port
    resp = password_step(client, "alice", "whatever")
    assert resp.status_code == 503
    assert "unavailable" in resp.get_data(as_text=True)
    with app.app_context():
        assert db.session.query(User).filter_by(username="alice").one().failed_logins == 0
