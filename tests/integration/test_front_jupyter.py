# SPDX-License-Identifier: GPL-3.0-or-later
"""The session front in front of a real Jupyter Server: REST and a kernel websocket pass with the key, nothing without.

No Slurm needed: Jupyter from the cached test venv (``tests/fixtures/carmeenvs.py``) on 127.0.0.1, the front from
``carme_runtime.front`` on 127.0.0.1, as ``carme-launch`` starts them on a node: Jupyter's token is the app secret
(``front.app_secret``), never the session secret, and the front adds it to every request itself.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import secrets
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from carme_runtime import front
from carme_runtime.apps import load_apps
from carme_runtime.launch import pick_free_port
from tests.fixtures.carmeenvs import ensure_jupyter_env

pytestmark = [pytest.mark.slow]

JOB = 31337
BASE = f"/proxy/{JOB}/"


@dataclass
class Served:
    front: front.Front
    secret: str  # the session secret S
    app_port: int

    @property
    def app_secret(self) -> str:
        return front.app_secret(self.secret, JOB)

    def headers(self, *, key: bool = True, token: bool = False) -> dict[str, str]:
        """What nginx sends (the front key), plus, with ``token``, Jupyter's token from the client."""
        out: dict[str, str] = {}
        if key:
            out |= front.front_headers(self.secret, JOB)
        if token:
            out["Authorization"] = f"token {self.app_secret}"
        return out


def request(port: int, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # the front's port, or Jupyter's own
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    env = ensure_jupyter_env()
    tmp = tmp_path_factory.mktemp("jupyter")
    secret = secrets.token_urlsafe(32)
    app_port = pick_free_port("127.0.0.1")
    argv = [
        str(env / "bin" / "jupyter"),
        "server",
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={app_port}",
        f"--ServerApp.base_url={BASE}",
        "--ServerApp.allow_remote_access=True",
        f"--ServerApp.root_dir={tmp}",
    ]
    child_env = {
        "PATH": f"{env / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp),
        "JUPYTER_TOKEN": front.app_secret(secret, JOB),  # as carme-launch renders jupyterlab.toml
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
    }
    log = (tmp / "jupyter.log").open("wb")
    proc = subprocess.Popen(argv, env=child_env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
    app_headers = load_apps([])["jupyterlab"].proxy_headers(front.app_secret(secret, JOB))
    fr = front.start_front(
        "127.0.0.1",
        app_host="127.0.0.1",
        app_port=app_port,
        secret=secret,
        job_id=JOB,
        base_path=BASE,
        app_headers=app_headers,
    )
    s = Served(fr, secret, app_port)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, Path(tmp / "jupyter.log").read_text(errors="replace")
            try:
                if request(fr.port, "GET", BASE + "api/status", s.headers())[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, Path(tmp / "jupyter.log").read_text(errors="replace")
            time.sleep(0.5)
        yield s
    finally:
        fr.stop()
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_rest_needs_the_key_and_the_front_adds_the_token(served: Served) -> None:
    port = served.front.port
    assert request(port, "GET", BASE + "api/contents", served.headers())[0] == 200  # the key alone, as from nginx
    assert request(port, "GET", BASE + "api/contents", served.headers(key=False, token=True))[0] == 403  # the front
    forged = served.headers() | {"Authorization": "token forged"}
    assert request(port, "GET", BASE + "api/contents", forged)[0] == 200  # the front's token replaces the client's
    # Jupyter itself still checks its token: the app secret, and not the session secret
    app = served.app_port
    assert request(app, "GET", BASE + "api/contents", {})[0] in (401, 403)
    assert request(app, "GET", BASE + "api/contents", {"Authorization": f"token {served.secret}"})[0] in (401, 403)
    assert request(app, "GET", BASE + "api/contents", served.headers(key=False, token=True))[0] == 200


def test_the_pages_hold_the_app_secret_and_never_the_session_secret(served: Served) -> None:
    """JupyterLab writes its token into its pages: a script that reads them learns the app secret, from which
    the front key cannot be computed, and with which the front answers 403."""
    status, page = request(served.front.port, "GET", BASE + "lab", served.headers())
    assert status == 200, page[:300]
    assert served.secret.encode() not in page
    assert front.front_key(served.secret, JOB).encode() not in page
    leaked = {"Authorization": f"token {served.app_secret}", front.FRONT_HEADER: served.app_secret}
    assert request(served.front.port, "GET", BASE + "api/contents", leaked)[0] == 403


def ws_frame(text: str) -> bytes:
    """A masked client text frame (RFC 6455)."""
    payload = text.encode()
    mask = os.urandom(4)
    head = bytes([0x81])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def upgrade(port: int, path: str, headers: dict[str, str]) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return sock, got


def test_a_kernel_websocket_passes_through_the_front(served: Served) -> None:
    port = served.front.port
    status, body = request(
        port, "POST", BASE + "api/kernels", served.headers() | {"Content-Type": "application/json"}, b"{}"
    )
    assert status == 201, body[:300]
    kernel = json.loads(body)["id"]
    channels = f"{BASE}api/kernels/{kernel}/channels"
    try:
        refused, head = upgrade(port, channels, served.headers(key=False, token=True))
        refused.close()
        assert head.startswith(b"HTTP/1.1 403"), head[:100]

        sock, head = upgrade(port, channels, served.headers())  # the front adds Jupyter's token to the upgrade
        assert head.startswith(b"HTTP/1.1 101"), head[:300]
        msg = {
            "header": {
                "msg_id": uuid.uuid4().hex,
                "msg_type": "kernel_info_request",
                "username": "test",
                "session": uuid.uuid4().hex,
                "date": "2026-01-01T00:00:00Z",
                "version": "5.3",
            },
            "parent_header": {},
            "metadata": {},
            "content": {},
            "channel": "shell",
            "buffers": [],
        }
        sock.sendall(ws_frame(json.dumps(msg)))
        received = head.partition(b"\r\n\r\n")[2]
        deadline = time.monotonic() + 60
        while b"kernel_info_reply" not in received:
            assert time.monotonic() < deadline, received[-500:]
            chunk = sock.recv(65536)
            assert chunk, f"the websocket closed: {received[-500:]!r}"
            received += chunk
        sock.close()
    finally:
        request(port, "DELETE", f"{BASE}api/kernels/{kernel}", served.headers())
