"""The session front: real sockets on 127.0.0.1, a real app behind it."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import socket
import threading
from collections.abc import Iterator

import pytest

from carme_runtime import front
from carme_runtime.launch import pick_free_port
from tests.fixtures.net import serve_http

SECRET = "front-secret-" + "y" * 40
JOB = 4242
BASE = f"/proxy/{JOB}/"


class AppHandler(http.server.BaseHTTPRequestHandler):
    """The "app": echoes what it received (path, headers, body) as JSON."""

    seen: list[dict[str, object]] = []  # noqa: RUF012 - shared on purpose, reset per test

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        record = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body}
        AppHandler.seen.append(record)
        data = json.dumps(record).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def app_port() -> Iterator[int]:
    AppHandler.seen = []
    with serve_http(AppHandler) as srv:
        yield srv.server_address[1]


def start(app_port: int, secret: str = SECRET, job_id: int = JOB) -> front.Front:
    return front.start_front(
        "127.0.0.1", app_host="127.0.0.1", app_port=app_port, secret=secret, job_id=job_id, base_path=BASE
    )


@pytest.fixture
def fr(app_port: int) -> Iterator[front.Front]:
    f = start(app_port)
    try:
        yield f
    finally:
        f.stop()


def request(
    port: int, path: str, headers: dict[str, str] | None = None, method: str = "GET", body: bytes | None = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def good() -> dict[str, str]:
    return front.front_headers(SECRET, JOB)


def test_listens_in_the_port_range(fr: front.Front) -> None:
    lo, hi = front.PORT_RANGE
    assert lo <= fr.port <= hi


def test_no_or_wrong_key_is_403_and_never_reaches_the_app(fr: front.Front) -> None:
    assert request(fr.port, BASE + "api/status")[0] == 403
    wrong = front.front_headers("another-secret-" + "z" * 40, JOB)
    assert request(fr.port, BASE + "api/status", wrong)[0] == 403
    other_job = front.front_headers(SECRET, JOB + 1)
    assert request(fr.port, BASE + "api/status", other_job)[0] == 403
    # the raw secret is not the key either
    assert request(fr.port, BASE, {front.FRONT_HEADER: SECRET})[0] == 403
    assert AppHandler.seen == []


def test_duplicate_key_headers_are_refused(fr: front.Front) -> None:
    conn = socket.create_connection(("127.0.0.1", fr.port), timeout=10)
    key = good()[front.FRONT_HEADER]
    conn.sendall(f"GET {BASE} HTTP/1.1\r\nHost: x\r\nX-Carme-Front: {key}\r\nX-Carme-Front: {key}\r\n\r\n".encode())
    assert conn.recv(100).startswith(b"HTTP/1.1 403")
    conn.close()
    assert AppHandler.seen == []


def test_right_key_is_proxied_without_the_key_and_with_connection_close(fr: front.Front) -> None:
    status, body = request(fr.port, BASE + "api/status?x=1", {**good(), "Authorization": "token t"})
    assert status == 200
    seen = json.loads(body)
    assert seen["path"] == BASE + "api/status?x=1"
    names = {k.lower(): v for k, v in seen["headers"].items()}
    assert front.FRONT_HEADER.lower() not in names
    assert names["authorization"] == "token t"  # the app's own authentication passes through
    assert names["connection"] == "close"


def test_post_body_is_forwarded(fr: front.Front) -> None:
    status, body = request(fr.port, BASE + "upload", good(), method="POST", body=b"x" * 200_000)
    assert status == 200
    assert json.loads(body)["body"] == "x" * 200_000


def test_paths_outside_the_session_are_404(fr: front.Front) -> None:
    assert request(fr.port, "/proxy/1/api/status", good())[0] == 404
    assert request(fr.port, f"/proxy/{JOB}0/", good())[0] == 404
    assert request(fr.port, "/", good())[0] == 404
    assert request(fr.port, f"/proxy/{JOB}", good())[0] == 200
    assert all(s["path"].startswith(f"/proxy/{JOB}") for s in AppHandler.seen)  # type: ignore[union-attr]


def test_strip_prefix_serves_an_app_that_lives_at_the_root(app_port: int) -> None:
    """code-server cannot be told a base path: the front passes /proxy/<job>/x on as /x, and nothing else."""
    sock = front.bind_front_socket("127.0.0.1")
    f = front.Front(
        sock, app_host="127.0.0.1", app_port=app_port, secret=SECRET, job_id=JOB, base_path=BASE, strip_prefix=True
    ).start()
    try:
        for sent, arrived in ((BASE + "static/x.js?v=1", "/static/x.js?v=1"), (BASE, "/"), (BASE.rstrip("/"), "/")):
            status, body = request(f.port, sent, good())
            assert status == 200 and json.loads(body)["path"] == arrived, (sent, body)
        assert request(f.port, "/static/x.js", good())[0] == 404  # outside the session's path: still refused
        assert request(f.port, BASE + "healthz")[0] == 403  # and nothing without the key
    finally:
        f.stop()


def test_malformed_requests_are_400(fr: front.Front) -> None:
    for raw in (b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\n folded: x\r\n\r\n", b"GET nopath HTTP/1.1\r\n\r\n"):
        conn = socket.create_connection(("127.0.0.1", fr.port), timeout=10)
        conn.sendall(raw)
        assert conn.recv(100).startswith(b"HTTP/1.1 400"), raw
        conn.close()


def test_app_down_is_502(app_port: int) -> None:
    f = start(pick_free_port("127.0.0.1"))
    try:
        assert request(f.port, BASE, good())[0] == 502
    finally:
        f.stop()


def test_challenge_verifies_only_with_the_right_secret_and_job(fr: front.Front) -> None:
    assert front.verify_endpoint("127.0.0.1", fr.port, JOB, SECRET, 5.0)
    assert not front.verify_endpoint("127.0.0.1", fr.port, JOB, "another-secret-" + "z" * 40, 5.0)
    assert not front.verify_endpoint("127.0.0.1", fr.port, JOB + 1, SECRET, 5.0)
    # the challenge needs no key, answers only for its own job, and never reaches the app
    nonce = "ab" * 16
    status, body = request(fr.port, f"{front.CHALLENGE_PATH}?job={JOB}&nonce={nonce}")
    assert status == 200
    assert json.loads(body)["mac"] == front.challenge_answer(SECRET, JOB, nonce)
    assert json.loads(body)["mac"] != front.front_key(SECRET, JOB)  # the answer is never a usable key
    assert request(fr.port, f"{front.CHALLENGE_PATH}?job={JOB + 1}&nonce={nonce}")[0] == 404
    assert request(fr.port, f"{front.CHALLENGE_PATH}?job={JOB}&nonce=short")[0] == 404
    assert AppHandler.seen == []


def test_plain_servers_and_closed_ports_do_not_verify(app_port: int) -> None:
    assert not front.verify_endpoint("127.0.0.1", app_port, JOB, SECRET, 5.0)  # an app, not a front
    assert not front.verify_endpoint("127.0.0.1", pick_free_port("127.0.0.1"), JOB, SECRET, 1.0)


def test_keys_are_derived_not_the_secret() -> None:
    key = front.front_key(SECRET, JOB)
    assert SECRET not in key and len(key) == 64
    assert key != front.front_key(SECRET, JOB + 1)


class UpgradeApp:
    """Answers 101 to an Upgrade, then echoes every byte (a websocket stand-in)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.heads: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Wake the accept() (shutdown does, close alone does not) and wait for the thread: left blocked, a signal
        later made it retry accept() on a descriptor number that another test had reused (ENOTSOCK)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(timeout=10)

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return  # closed before any connection came
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            head, _, rest = data.partition(b"\r\n\r\n")
            self.heads.append(head)
            conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            if rest:
                conn.sendall(rest)
            while chunk := conn.recv(4096):
                conn.sendall(chunk)


def test_upgrade_bytes_pass_through_both_ways() -> None:
    app = UpgradeApp()
    f = start(app.port)
    try:
        conn = socket.create_connection(("127.0.0.1", f.port), timeout=10)
        key = good()[front.FRONT_HEADER]
        conn.sendall(
            f"GET {BASE}api/kernels/k/channels HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nX-Carme-Front: {key}\r\n\r\n".encode()
        )
        got = b""
        while b"\r\n\r\n" not in got:
            got += conn.recv(4096)
        assert got.startswith(b"HTTP/1.1 101")
        frame = bytes([0x81, 0x05]) + b"hello" + bytes(range(256))
        conn.sendall(frame)
        echoed = b""
        while len(echoed) < len(frame):
            echoed += conn.recv(4096)
        assert echoed == frame
        conn.close()
        head = app.heads[0].decode().lower()
        assert "connection: upgrade" in head and "x-carme-front" not in head
    finally:
        f.stop()
        app.close()


def test_upgrade_without_key_is_refused() -> None:
    app = UpgradeApp()
    f = start(app.port)
    try:
        conn = socket.create_connection(("127.0.0.1", f.port), timeout=10)
        conn.sendall(f"GET {BASE} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".encode())
        assert conn.recv(100).startswith(b"HTTP/1.1 403")
        conn.close()
        assert app.heads == []
    finally:
        f.stop()
        app.close()
