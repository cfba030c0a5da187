"""The pages' CSRF token (webui/csrf_token.py) is Flask-WTF's token, byte for byte, and Flask-WTF accepts it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import zlib
from typing import Any

import pytest
from flask import Flask
from flask import g
from flask import session
from flask_wtf.csrf import generate_csrf  # type: ignore[import-untyped]
from flask_wtf.csrf import validate_csrf

from webui.csrf_token import csrf_token

from .conftest import log_in_as

REFERER = {"Referer": "https://localhost/"}


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    import itsdangerous.timed

    monkeypatch.setattr(itsdangerous.timed.time, "time", lambda: 1_800_000_000.0)


def test_same_token_as_flask_wtf(app: Flask, frozen_clock: None) -> None:
    with app.test_request_context("/"):
        first = generate_csrf()  # makes the raw token in the session
        g.pop("csrf_token")
        ours = csrf_token()
        g.pop("csrf_token")
        assert ours == generate_csrf() == first
        assert csrf_token() is g.csrf_token  # once per request, as Flask-WTF
        validate_csrf(ours)


def test_a_new_session_gets_its_raw_token_from_flask_wtf(app: Flask) -> None:
    with app.test_request_context("/"):
        token = csrf_token()
        assert re.fullmatch(r"[0-9a-f]{40}", session["csrf_token"])
        validate_csrf(token)


def test_other_raw_tokens_are_flask_wtfs_business(app: Flask, frozen_clock: None) -> None:
    with app.test_request_context("/"):
        session["csrf_token"] = "x" * 200  # not what Flask-WTF makes: its own serializer decides
        token = csrf_token()
        g.pop("csrf_token")
        assert token == generate_csrf()


def test_zlib_never_shortens_a_raw_token() -> None:
    """Why skipping the compression attempt changes nothing (itsdangerous keeps zlib's output only when it is more
    than one byte shorter)."""
    for _ in range(5000):
        payload = json.dumps(hashlib.sha1(os.urandom(64)).hexdigest()).encode()
        assert len(zlib.compress(payload)) >= len(payload) - 1


def test_a_page_token_is_accepted_and_a_forged_one_refused(app: Flask, client: Any) -> None:
    log_in_as(app, client, "alice")
    page = client.get("/").get_data(as_text=True)
    tokens = set(re.findall(r'name="csrf_token" value="([^"]+)"', page))
    assert len(tokens) == 1
    [token] = tokens
    assert client.post("/auth/logout", data={"csrf_token": token + "x"}, headers=REFERER).status_code == 400
    assert client.post("/auth/logout", data={"csrf_token": token}, headers=REFERER).status_code == 302
