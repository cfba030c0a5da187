# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal under a preloading, forking server (gunicorn --preload, roles/carme_webui): create_app() and
prepare_for_fork() leave nothing that two processes may not share, and a forked worker gets database pools of its own.
"""

from __future__ import annotations

import contextlib
import gc
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from webui import create_app
from webui import prepare_for_fork
from webui.auth.logins import start_login
from webui.extensions import db
from webui.models import User

from .conftest import make_app


def open_fds() -> set[str]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the directory's own descriptor, closed again
            found.add(f"{fd} {os.readlink(f'/proc/self/fd/{fd}')}")
    return found


def pool_status(app: Flask) -> tuple[int, int]:
    with app.app_context():
        pool: Any = db.engine.pool
        return pool.checkedin(), pool.checkedout()


@pytest.fixture
def unfreeze() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_create_app_and_prepare_for_fork_start_and_open_nothing(base_config: dict[str, Any], unfreeze: None) -> None:
    threads, fds = set(threading.enumerate()), open_fds()
    app = create_app({k: v for k, v in base_config.items() if k != "TESTING"})
    prepare_for_fork(app)
    assert set(threading.enumerate()) <= threads  # no new thread, which a fork would leave behind in the master
    assert open_fds() <= fds  # no new socket or file, which the workers would share
    assert pool_status(app) == (0, 0)  # no database connection
    assert "carme_usage_display" not in app.extensions  # its refresh pool is made in the worker, on first use
    assert app.jinja_env.cache and len(app.jinja_env.cache) >= len(app.jinja_env.list_templates())  # compiled once
    assert gc.get_freeze_count() > 0


def test_a_forked_child_never_uses_the_parents_connections(base_config: dict[str, Any]) -> None:
    app = make_app(base_config)
    with app.app_context():
        db.session.execute(db.select(User)).all()
        db.session.remove()
        parent_pool = db.engine.pool
    assert pool_status(app)[0] >= 1  # a connection the parent keeps in its pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            with app.app_context():
                result = {"new_pool": db.engine.pool is not parent_pool, "status": pool_status(app)}
                db.session.execute(db.select(User)).all()  # a connection of its own works
                db.session.remove()
            os.write(write, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        result = json.loads(fh.read() or "{}")
    os.waitpid(pid, 0)
    assert result == {"new_pool": True, "status": [0, 0]}
    with app.app_context():
        assert db.engine.pool is parent_pool  # the parent keeps its pool and its connection
    assert pool_status(app)[0] >= 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_gunicorn_preload_serves_logged_in_requests(base_config: dict[str, Any], tmp_path: Path) -> None:
    """What roles/carme_webui runs: gunicorn --preload, two gthread workers, MALLOC_ARENA_MAX; a logged-in user's
    requests reach the database from both workers."""
    config = {k: v for k, v in base_config.items() if k != "TESTING"}
    config["SESSION_COOKIE_SECURE"] = False  # plain http on loopback
    app = make_app(config)
    with app.app_context():
        user = User(username="alice", totp_secret="X" * 32, totp_confirmed=True, session_version=1)
        db.session.add(user)
        db.session.flush()
        with app.test_request_context("/"):
            token = start_login(user, is_admin=False)
        db.session.commit()
        db.engine.dispose()
    cookie = app.session_interface.get_signing_serializer(app).dumps({"_permanent": True, "login": token})  # type: ignore[attr-defined]
    cfg = tmp_path / "config.py"
    cfg.write_text("\n".join(f"{k} = {v!r}" for k, v in config.items()) + "\n")
    port = free_port()
    gunicorn = Path(sys.executable).parent / "gunicorn"
    argv = [str(gunicorn), "--workers", "2", "--threads", "2", "--worker-class", "gthread", "--preload",
            "--bind", f"127.0.0.1:{port}", "--no-control-socket", "webui.wsgi:app"]  # fmt: skip
    env = {**os.environ, "CARME_WEBUI_CONFIG": str(cfg), "MALLOC_ARENA_MAX": "2"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.2)
        for _ in range(20):  # new connections: the kernel spreads them over both workers
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/api/sessions", headers={"Cookie": f"__Host-carme_session={cookie}"})
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            assert resp.status == 200, body[:300]
            assert json.loads(body)["sessions"] == []
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert b"Traceback" not in err, err.decode()[-3000:]
