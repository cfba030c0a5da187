# SPDX-License-Identifier: GPL-3.0-or-later
"""Login hardening (issue 11): local-only ``next``, server-side logins (logout revokes, admin flag rechecked in LDAP),
failed attempts keyed on (user, client address) plus a per-user limit, ended sessions lose their secret.

Against the real slapd of ``tests/fixtures/slapd.py`` where LDAP matters; client addresses are set per test client
(``REMOTE_ADDR``, or ``X-Forwarded-For`` behind ProxyFix as nginx sends it).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import pyotp
import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.fixtures.slapd import SlapdServer
from webui.auth.views import clean_next
from webui.extensions import db
from webui.models import AuditLog
from webui.models import Login
from webui.models import LoginAttempt
from webui.models import PortalSession
from webui.models import User

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import log_in_as
from .conftest import make_app
from .conftest import post

AppFactory = Callable[..., Flask]


@pytest.fixture
def make_ldap_app(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, slapd_server: SlapdServer
) -> Iterator[AppFactory]:
    """Portal apps on the real slapd; the group recheck binds as the directory admin (the fixture has no
    anonymous read access)."""
    made: list[Flask] = []

    def factory(**overrides: Any) -> Flask:
        config = {
            **base_config,
            **slapd_server.portal_config(),
            "LDAP_BIND_DN": slapd_server.root_dn,
            "LDAP_BIND_PASSWORD": slapd_server.root_password,
            "SCHEDULER": fake_scheduler,
            **overrides,
        }
        made.append(make_app(config))
        return made[-1]

    yield factory
    for application in made:
        with application.app_context():
            db.engine.dispose()


def client_from(app: Flask, address: str) -> FlaskClient:
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return client


def password_step(client: FlaskClient, username: str, password: str, **extra: str) -> Any:
    return post(client, "/auth/login", {"username": username, "password": password, **extra})


def totp_step(app: Flask, client: FlaskClient) -> Any:
    """Pass the TOTP step after a successful password step (enrolling if needed, a fresh step every time)."""
    page = client.get("/auth/totp").get_data(as_text=True)
    secret = re.search(r'<code class="secret">([A-Z2-7]+)</code>', page)
    with app.app_context():
        user = db.session.query(User).filter_by(username=client_user(client)).one()
        key = secret.group(1) if secret else user.totp_secret
        user.totp_last_step = 0  # each test login may reuse the current 30 s step
        db.session.commit()
    assert key
    return post(client, "/auth/totp", {"code": pyotp.TOTP(key).now()})


def client_user(client: FlaskClient) -> str:
    with client.session_transaction() as sess:
        return str(sess["pending"]["user"])


def full_login(app: Flask, client: FlaskClient, slapd_server: SlapdServer, username: str, **extra: str) -> Any:
    resp = password_step(client, username, slapd_server.users[username], **extra)
    assert resp.status_code == 302, resp.get_data(as_text=True)
    return totp_step(app, client)


# --- next ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "/%09/evil.example/",
        "/\t/evil.example/",
        "/%2509/evil.example/",
        "//evil.example/",
        "/\\evil.example/",
        "/%5Cevil.example/",
        "https://evil.example/",
        "javascript:alert(1)",
        "evil.example",
        "/x%0D%0ASet-Cookie:%20a=b",
        "/x\r\nSet-Cookie: a=b",
        "/\u200b/evil.example/",
        "/" + "a" * 600,
        "/" * 10_000,
        "",
    ],
)
def test_next_accepts_no_foreign_or_odd_target(app: Flask, target: str) -> None:
    assert clean_next(target) == ""


@pytest.mark.parametrize("target", ["/", "/sessions/new?", "/admin/users", "/proxy/1001/lab?token=abc"])
def test_next_keeps_local_paths(app: Flask, target: str) -> None:
    assert clean_next(target) == target


@pytest.mark.host
@pytest.mark.parametrize(
    ("target", "location"),
    [
        ("/%09/evil.example/", "/"),
        ("/x%0D%0ASet-Cookie:%20a=b", "/"),
        ("/" + "x" * 10_000, "/"),
        ("/sessions/new", "/sessions/new"),
    ],
)
def test_login_next_redirects_only_to_local_paths(
    make_ldap_app: AppFactory, slapd_server: SlapdServer, target: str, location: str
) -> None:
    app = make_ldap_app()
    client = app.test_client()
    form = client.get("/auth/login", query_string={"next": target})
    assert form.status_code == 200
    assert len(form.get_data()) < 8_000  # the form never echoes a huge or foreign next
    resp = full_login(app, client, slapd_server, "alice", next=target)
    assert resp.status_code == 302
    assert resp.headers["Location"] == location
    assert "Set-Cookie: a=b" not in str(resp.headers)
    assert client.get("/").status_code == 200


# --- server-side logins ---------------------------------------------------------------------------------------


def test_the_cookie_carries_only_a_login_token(app: Flask, client: FlaskClient) -> None:
    log_in_as(app, client, "carol", admin=True)
    with client.session_transaction() as sess:
        assert set(sess) == {"login"}  # no user name, no admin flag


def test_logout_revokes_every_copy_of_the_cookie(app: Flask, client: FlaskClient) -> None:
    log_in_as(app, client, "alice")
    assert client.get("/api/sessions").status_code == 200
    cookie = client.get_cookie("__Host-carme_session")
    assert cookie is not None
    copy = app.test_client()
    copy.set_cookie("__Host-carme_session", cookie.value)
    assert copy.get("/api/sessions").status_code == 200

    assert post(client, "/auth/logout").status_code == 302
    assert copy.get("/api/sessions").status_code == 401
    page = copy.get("/")
    assert page.status_code == 302 and "/auth/login" in page.headers["Location"]
    with app.app_context():
        assert db.session.query(Login).filter_by(username="alice").count() == 0


def test_an_unknown_or_expired_login_is_refused(app: Flask, client: FlaskClient) -> None:
    with client.session_transaction() as sess:
        sess["login"] = "made-up-token"
    assert client.get("/api/sessions").status_code == 401
    log_in_as(app, client, "alice")
    with app.app_context():
        login = db.session.query(Login).filter_by(username="alice").one()
        login.expires_at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
        db.session.commit()
    assert client.get("/api/sessions").status_code == 401


@pytest.mark.host
def test_the_admin_flag_is_read_from_ldap_again_after_the_interval(make_ldap_app: AppFactory) -> None:
    app = make_ldap_app(LOGIN_RECHECK_SECONDS=60)
    alice = app.test_client()
    log_in_as(app, alice, "alice", admin=True)  # as if alice had been in carme-admins when she logged in
    assert alice.get("/admin/").status_code == 200  # within the interval: the recorded flag
    with app.app_context():
        login = db.session.query(Login).filter_by(username="alice").one()
        login.checked_at -= dt.timedelta(seconds=61)
        db.session.commit()
    assert alice.get("/admin/").status_code == 403  # LDAP says she is not an admin (any more)
    assert alice.get("/").status_code == 200  # still logged in
    with app.app_context():
        assert db.session.query(Login).filter_by(username="alice").one().is_admin is False

    carol = app.test_client()
    log_in_as(app, carol, "carol", admin=False)
    with app.app_context():
        db.session.query(Login).filter_by(username="carol").one().checked_at -= dt.timedelta(seconds=61)
        db.session.commit()
    assert carol.get("/admin/").status_code == 200  # added to carme-admins: an admin at the next check


@pytest.mark.host
def test_a_user_no_longer_in_the_user_group_is_logged_out(make_ldap_app: AppFactory) -> None:
    app = make_ldap_app(LOGIN_RECHECK_SECONDS=0, LDAP_USER_GROUP="carme-admins")  # as if alice left the group
    client = app.test_client()
    log_in_as(app, client, "alice")
    assert client.get("/api/sessions").status_code == 401
    with app.app_context():
        assert db.session.query(Login).filter_by(username="alice").count() == 0
        assert db.session.query(AuditLog).filter_by(action="login.ended", target="alice").count() == 1
    carol = app.test_client()
    log_in_as(app, carol, "carol", admin=True)
    assert carol.get("/admin/").status_code == 200


@pytest.mark.host
def test_unreadable_groups_drop_admin_rights_but_end_no_login(make_ldap_app: AppFactory) -> None:
    app = make_ldap_app(LOGIN_RECHECK_SECONDS=0, LDAP_BIND_DN=None)  # anonymous: the fixture hides everything
    client = app.test_client()
    log_in_as(app, client, "carol", admin=True)
    assert client.get("/admin/").status_code == 403
    assert client.get("/api/sessions").status_code == 200


def test_ldap_down_at_the_recheck_drops_admin_rights_not_the_login(base_config: dict[str, Any]) -> None:
    app = make_app({**base_config, "LOGIN_RECHECK_SECONDS": 0, "SCHEDULER": FakeScheduler()})
    client = app.test_client()  # base config: LDAP on a closed port
    log_in_as(app, client, "carol", admin=True)
    assert client.get("/admin/").status_code == 403  # fail closed
    assert client.get("/").status_code == 200
    with app.app_context():
        db.engine.dispose()


# --- failed attempts ----------------------------------------------------------------------------------------


@pytest.mark.host
def test_ten_failures_from_one_address_lock_only_that_address(
    make_ldap_app: AppFactory, slapd_server: SlapdServer
) -> None:
    app = make_ldap_app()
    open_login = app.test_client()
    log_in_as(app, open_login, "alice")
    attacker = client_from(app, "203.0.113.66")
    statuses = [password_step(attacker, "alice", f"wrong-{n}").status_code for n in range(10)]
    assert statuses == [401] * 9 + [429]
    refused = password_step(attacker, "alice", slapd_server.users["alice"])
    assert refused.status_code == 429 and "Too many failed attempts" in refused.get_data(as_text=True)

    assert open_login.get("/api/sessions").status_code == 200  # her open login goes on
    elsewhere = client_from(app, "198.51.100.7")
    assert password_step(elsewhere, "alice", slapd_server.users["alice"]).status_code == 302  # on to TOTP
    with app.app_context():
        entry = db.session.query(AuditLog).filter_by(action="login.locked", target="alice").one()
        assert entry.details == {"source": "203.0.113.66"}


@pytest.mark.host
def test_many_addresses_hit_the_per_user_limit_but_not_the_users_own_computer(
    make_ldap_app: AppFactory, slapd_server: SlapdServer
) -> None:
    app = make_ldap_app()
    home = client_from(app, "192.0.2.10")
    assert full_login(app, home, slapd_server, "alice").status_code == 302  # a computer alice uses
    for n in range(5):  # 5 addresses x 3 failures = 15 (LOGIN_USER_MAX_FAILURES), none locked by itself
        attacker = client_from(app, f"203.0.113.{n + 1}")
        for attempt in range(3):
            password_step(attacker, "alice", f"wrong-{n}-{attempt}")
    stranger = client_from(app, "198.51.100.99")
    resp = password_step(stranger, "alice", slapd_server.users["alice"])
    assert resp.status_code == 429
    assert "from several addresses" in resp.get_data(as_text=True)
    assert home.get("/").status_code == 200  # her open login goes on
    again = client_from(app, "192.0.2.10")
    assert password_step(again, "alice", slapd_server.users["alice"]).status_code == 302  # and she gets in
    assert password_step(client_from(app, "198.51.100.99"), "bob", slapd_server.users["bob"]).status_code == 302
    with app.app_context():
        assert db.session.query(AuditLog).filter_by(action="login.limited", target="alice").count() == 1


@pytest.mark.host
def test_unlock_clears_the_address_locks(make_ldap_app: AppFactory, slapd_server: SlapdServer) -> None:
    app = make_ldap_app()
    attacker = client_from(app, "203.0.113.66")
    for n in range(10):
        password_step(attacker, "alice", f"wrong-{n}")
    assert password_step(attacker, "alice", slapd_server.users["alice"]).status_code == 429
    result = app.test_cli_runner().invoke(args=["unlock", "alice"])
    assert result.exit_code == 0, result.output
    assert password_step(attacker, "alice", slapd_server.users["alice"]).status_code == 302


@pytest.mark.host
def test_the_address_is_the_one_nginx_saw_not_what_the_client_claims(
    make_ldap_app: AppFactory, slapd_server: SlapdServer
) -> None:
    app = make_ldap_app(PROXY_FIX_HOPS=1)
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = "127.0.0.1"  # nginx on the same host
    # nginx appends the peer's address to what the client sent ($proxy_add_x_forwarded_for)
    headers = {"X-Forwarded-For": "192.0.2.10, 203.0.113.66", "Referer": "https://localhost/"}
    post(client, "/auth/login", {"username": "alice", "password": "wrong"}, headers=headers)
    with app.app_context():
        assert [a.source for a in db.session.query(LoginAttempt).filter_by(username="alice")] == ["203.0.113.66"]


@pytest.mark.host
def test_ten_wrong_codes_lock_the_address_and_end_no_login(
    make_ldap_app: AppFactory, slapd_server: SlapdServer
) -> None:
    app = make_ldap_app()
    open_login = app.test_client()
    log_in_as(app, open_login, "alice")
    with app.app_context():
        user = db.session.query(User).filter_by(username="alice").one()
        key = user.totp_secret = pyotp.random_base32()
        db.session.commit()
    wrong = "000000" if pyotp.TOTP(key).now() != "000000" else "111111"
    client = client_from(app, "203.0.113.66")
    assert password_step(client, "alice", slapd_server.users["alice"]).status_code == 302
    answers = [post(client, "/auth/totp", {"code": wrong}).status_code for _ in range(10)]
    assert answers == [401] * 9 + [302]  # the 10th: back to the login page, the pending login is gone
    assert "Too many failed attempts" in client.get("/auth/login").get_data(as_text=True)
    assert open_login.get("/api/sessions").status_code == 200


# --- session secrets ----------------------------------------------------------------------------------------


def secret_of(app: Flask, job_id: int) -> tuple[str, dt.datetime | None]:
    with app.app_context():
        record = db.session.query(PortalSession).filter_by(job_id=job_id).one()
        return record.secret, record.ended_at


def test_a_stopped_session_loses_its_secret(app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    assert secret_of(app, job_id)[0]
    assert post(client, f"/sessions/{job_id}/stop").status_code == 302
    secret, ended_at = secret_of(app, job_id)
    assert secret == "" and ended_at is not None


def test_a_session_found_ended_in_slurm_loses_its_secret(
    app: Flask, client: FlaskClient, fake_scheduler: FakeScheduler
) -> None:
    job_id = add_session(app, fake_scheduler, "alice")
    log_in_as(app, client, "alice")
    del fake_scheduler.jobs[job_id]  # ended and purged by Slurm
    assert client.get("/api/sessions").get_json()["sessions"] == []
    secret, ended_at = secret_of(app, job_id)
    assert secret == "" and ended_at is not None


def test_a_conflicting_recheck_write_is_no_error(base_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two requests of one login that recheck at once: on MariaDB 11.8 the second one's write fails (error 1020,
    "Record has changed since last read"); that request still answers (seen as a 503 of /api/sessions on the
    Debian 13 demo before)."""
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.sql.dml import Update

    app = make_app({**base_config, "LOGIN_RECHECK_SECONDS": 0, "SCHEDULER": FakeScheduler()})
    client = app.test_client()
    log_in_as(app, client, "carol", admin=True)
    execute = db.session.execute

    def refuse_updates(statement: Any, *args: Any, **kwargs: Any) -> Any:  # as MariaDB refuses the second write
        if isinstance(statement, Update):
            raise OperationalError(str(statement), {}, Exception("1020 Record has changed since last read"))
        return execute(statement, *args, **kwargs)

    monkeypatch.setattr(db.session, "execute", refuse_updates)
    assert client.get("/api/sessions").status_code == 200
    assert client.get("/admin/").status_code == 403  # what this request read (LDAP down: no admin rights)
    monkeypatch.undo()
    with app.app_context():
        assert db.session.query(Login).filter_by(username="carol").count() == 1
        db.engine.dispose()
