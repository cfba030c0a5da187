# SPDX-License-Identifier: GPL-3.0-or-later
"""The session front: real sockets on 127.0.0.1 (and 127.0.0.2 as another peer), a real app behind it."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import re
import select
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from carme_runtime import front
from carme_runtime.apps import MIN_SECRET_LENGTH
from carme_runtime.front_peers import PEER_LIMIT
from carme_runtime.launch import pick_free_port
from tests.fixtures.net import serve_http

SECRET = "front-secret-" + "y" * 40
JOB = 4242
BASE = f"/proxy/{JOB}/"
APP_SECRET = front.app_secret(SECRET, JOB)
APP_HEADERS = {"Authorization": f"token {APP_SECRET}"}  # jupyterlab's secret_header for the app secret


class AppHandler(http.server.BaseHTTPRequestHandler):
    """The "app": echoes what it received (path, headers, body) as JSON."""

    seen: list[dict[str, object]] = []  # noqa: RUF012 - shared on purpose, reset per test

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        fields = self.headers.items()
        record = {"method": self.command, "path": self.path, "headers": dict(fields), "fields": fields, "body": body}
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


def start(app_port: int, secret: str = SECRET, job_id: int = JOB, **kw: object) -> front.Front:
    sock = front.bind_front_socket("127.0.0.1")
    return front.Front(
        sock, app_host="127.0.0.1", app_port=app_port, secret=secret, job_id=job_id, base_path=BASE, **kw
    ).start()


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
    assert names["authorization"] == "token t"  # a front without app_headers (a proxy app) passes it on
    assert names["connection"] == "close"


def test_the_front_adds_the_apps_secret_header_in_place_of_the_clients(app_port: int) -> None:
    f = start(app_port, app_headers=APP_HEADERS)
    try:
        sent = {**good(), "authorization": "token forged", "X-Other": "kept"}
        status, body = request(f.port, BASE + "api/status", sent)
        assert status == 200
        fields = [(k.lower(), v) for k, v in json.loads(body)["fields"]]
        assert [v for k, v in fields if k == "authorization"] == [f"token {APP_SECRET}"]
        assert ("x-other", "kept") in fields
        status, body = request(f.port, BASE, good())  # the key alone: nginx and browsers never carry the token
        assert status == 200 and json.loads(body)["headers"]["Authorization"] == f"token {APP_SECRET}"
    finally:
        f.stop()


def test_the_app_secret_without_the_front_key_is_403(app_port: int) -> None:
    """What JupyterLab writes into its pages (the app secret) does not open the front."""
    f = start(app_port, app_headers=APP_HEADERS)
    try:
        assert request(f.port, BASE + "api/status", APP_HEADERS)[0] == 403
        assert request(f.port, BASE, {**APP_HEADERS, front.FRONT_HEADER: APP_SECRET})[0] == 403
        assert AppHandler.seen == []
    finally:
        f.stop()


def test_app_headers_that_could_split_the_head_are_refused() -> None:
    sock = front.bind_front_socket("127.0.0.1")
    try:
        for bad in ({"Authorization": "token x\r\nX-Evil: 1"}, {"Bad Name": "x"}):
            with pytest.raises(ValueError, match="bad app header"):
                front.Front(sock, app_host="h", app_port=1, secret=SECRET, job_id=JOB, base_path=BASE, app_headers=bad)
    finally:
        sock.close()


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


def test_the_app_secret_differs_per_job_and_from_every_other_derived_value() -> None:
    assert front.app_secret(SECRET, JOB) == APP_SECRET  # carme-launch and the portal compute the same value
    assert front.app_secret(SECRET, JOB + 1) != APP_SECRET
    assert front.app_secret("another-secret-" + "z" * 40, JOB) != APP_SECRET
    assert len(APP_SECRET) >= MIN_SECRET_LENGTH and re.fullmatch(r"[A-Za-z0-9_-]+", APP_SECRET)
    assert SECRET not in APP_SECRET
    nonce = "ab" * 16
    others = (front.front_key(SECRET, JOB), front.challenge_answer(SECRET, JOB, nonce), SECRET)
    assert not any(APP_SECRET in o or o in APP_SECRET for o in others)


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
    f = start(app.port, app_headers=APP_HEADERS)
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
        assert f"authorization: token {APP_SECRET.lower()}" in head  # the websocket gets the app's token too
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


# --- per-peer connection limit (issue #27, item 10c) -----------------------------------------------------------


def connect_from(source: str, port: int) -> socket.socket:
    """A TCP connection to the front on 127.0.0.1 from the loopback address ``source`` (another "node")."""
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


def closed_by_front(socks: list[socket.socket], want: int, wait: float) -> int:
    """How many of ``socks`` the front closed (EOF or reset) within ``wait`` s; stops early at ``want``."""
    closed: set[socket.socket] = set()
    deadline = time.monotonic() + wait
    while len(closed) < want and time.monotonic() < deadline:
        readable, _, _ = select.select([s for s in socks if s not in closed], [], [], 0.1)
        for s in readable:
            try:
                data = s.recv(100)
            except ConnectionError:
                data = b""
            if not data:
                closed.add(s)
    return len(closed)


def test_a_flood_from_one_peer_does_not_delay_another_peers_keyed_request(fr: front.Front) -> None:
    flood: list[socket.socket] = []
    try:
        for _ in range(200):  # idle connections from another user's node, as many as it likes
            flood.append(connect_from("127.0.0.2", fr.port))
        started = time.monotonic()
        assert request(fr.port, BASE + "api/status", good())[0] == 200  # nginx, from 127.0.0.1
        assert time.monotonic() - started < 1.0
        # the front kept PEER_LIMIT of them (until the head timeout) and closed the others at once
        assert closed_by_front(flood, 200 - PEER_LIMIT, 5.0) == 200 - PEER_LIMIT
        assert closed_by_front(flood, 200, 0.3) == 200 - PEER_LIMIT
    finally:
        for s in flood:
            s.close()


def test_a_peer_that_presented_the_key_is_never_limited(fr: front.Front) -> None:
    assert request(fr.port, BASE, good())[0] == 200  # 127.0.0.1 has the key (nginx)
    idle = [connect_from("127.0.0.1", fr.port) for _ in range(3 * PEER_LIMIT)]
    try:
        assert closed_by_front(idle, 1, 0.3) == 0
        assert request(fr.port, BASE, good())[0] == 200
    finally:
        for s in idle:
            s.close()


def test_an_incomplete_head_times_out_and_frees_its_place(app_port: int) -> None:
    f = start(app_port, head_timeout=0.3)
    held: list[socket.socket] = []
    try:
        for _ in range(PEER_LIMIT):
            held.append(connect_from("127.0.0.2", f.port))
            held[-1].sendall(b"GET " + BASE.encode() + b" HTTP/1.1\r\nHost: x\r\n")  # never finished
        over = connect_from("127.0.0.2", f.port)
        held.append(over)
        assert closed_by_front([over], 1, 2.0) == 1  # over the limit: closed at once, no answer
        for s in held[:PEER_LIMIT]:
            assert s.recv(100).startswith(b"HTTP/1.1 400")  # after head_timeout
        with connect_from("127.0.0.2", f.port) as again:  # the places are free again: a full answer
            again.sendall(f"GET {BASE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert again.recv(100).startswith(b"HTTP/1.1 403")
    finally:
        for s in held:
            s.close()
        f.stop()
