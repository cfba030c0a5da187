# SPDX-License-Identifier: GPL-3.0-or-later
"""create_app: configuration refusals, security headers, cookie flags, migrations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask import Flask
from flask.testing import FlaskCliRunner

from webui import ConfigError
from webui import create_app
from webui.extensions import db
from webui.models import Base

from .conftest import log_in_as
from .conftest import post


def test_refuses_to_start_without_secret_key(base_config: dict[str, Any]) -> None:
    config = dict(base_config)
    del config["SECRET_KEY"]
    with pytest.raises(ConfigError, match="SECRET_KEY"):
        create_app(config)


def test_refuses_a_short_secret_key(base_config: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="SECRET_KEY"):
        create_app({**base_config, "SECRET_KEY": "short"})


def test_refuses_plaintext_ldap_unless_allowed(base_config: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="clear text"):
        create_app({**base_config, "LDAP_ALLOW_PLAINTEXT": False})
    create_app({**base_config, "LDAP_ALLOW_PLAINTEXT": False, "LDAP_START_TLS": True})
    create_app({**base_config, "LDAP_ALLOW_PLAINTEXT": False, "LDAP_URI": "ldaps://127.0.0.1:636"})


def test_production_config_comes_from_the_file_named_by_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_config: dict[str, Any]
) -> None:
    cfg = tmp_path / "config.py"
    lines = [f"{k} = {v!r}" for k, v in base_config.items() if k != "TESTING"]
    cfg.write_text("# rendered by roles/carme_webui\n" + "\n".join(lines) + "\n")
    monkeypatch.setenv("CARME_WEBUI_CONFIG", str(cfg))
    app = create_app()
    assert app.config["SECRET_KEY"] == base_config["SECRET_KEY"]
    assert app.config["SESSION_COOKIE_SECURE"] is True


def test_production_config_without_secret_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "config.py"
    cfg.write_text("LDAP_URI = 'ldaps://ldap.example.org'\n")
    monkeypatch.setenv("CARME_WEBUI_CONFIG", str(cfg))
    with pytest.raises(ConfigError):
        create_app()


def test_security_headers(client: Any) -> None:
    resp = client.get("/auth/login")
    assert resp.status_code == 200
    h = resp.headers
    assert "default-src 'self'" in h["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in h["Content-Security-Policy"]
    assert h["X-Frame-Options"] == "DENY"
    assert h["X-Content-Type-Options"] == "nosniff"
    assert h["Strict-Transport-Security"].startswith("max-age=")
    assert h["Referrer-Policy"] == "same-origin"
    assert h["Cache-Control"] == "no-store"


def test_session_cookie_flags(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    resp = post(client, "/auth/logout")  # any response that rewrites the session cookie
    cookie = next(v for v in resp.headers.getlist("Set-Cookie") if v.startswith("__Host-carme_session="))
    flags = {part.strip().lower() for part in cookie.split(";")}
    assert "secure" in flags
    assert "httponly" in flags
    assert "samesite=lax" in flags


def test_migrations_match_the_models(app: Flask) -> None:
    with app.app_context(), db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_db_upgrade_command(runner: FlaskCliRunner) -> None:
    result = runner.invoke(args=["db-upgrade"])
    assert result.exit_code == 0, result.output
    assert "head" in result.output


def test_unknown_page_is_a_404_page(client: Any) -> None:
    resp = client.get("/no-such-page")
    assert resp.status_code == 404
    assert "Error 404" in resp.get_data(as_text=True)


def test_api_errors_are_json(client: Any) -> None:
    resp = client.get("/api/sessions")
    assert resp.status_code == 401
    assert resp.is_json
