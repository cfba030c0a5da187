# SPDX-License-Identifier: GPL-3.0-or-later
"""The session front: a small secret-checking reverse proxy in front of every session app.

``carme-launch`` starts the app on ``127.0.0.1`` and this front on the node address (the ``host:port``
published in the job comment). The front:

* answers ``GET /.carme/challenge?job=<id>&nonce=<hex>`` with ``{"job_id": id, "mac": HMAC(secret,
  "carme-challenge-v1|<id>|<nonce>")}``: the portal sends a fresh nonce and checks the answer with the session
  secret before it lets nginx proxy to that ``host:port`` (:func:`verify_endpoint`). A job comment edited to
  name another port therefore changes nothing: whatever listens there cannot answer for this session;
* forwards any other request only when it carries ``X-Carme-Front: <front key>`` (an HMAC of the job id with
  the session secret, added by nginx from the portal's ``auth_request`` answer) and its path lies under the
  session's base URL; anything else is a 403 (404 for a foreign path), and the app never sees it;
* reaches the app on ``127.0.0.1:<port>``, or through a Unix socket when the app runs in a private network
  namespace (``isolation = "netns"``, :mod:`carme_runtime.netns`);
* forwards one request per connection (``Connection: close`` upstream), except an ``Upgrade`` (websocket),
  whose bytes are then piped both ways untouched.

The challenge needs no secret from the asker and its answer is domain-separated from the front key, so it
proves "this is job N's front" (public anyway) and nothing else. Stdlib only: it runs inside the job.

Three values are derived from the session secret S, each an HMAC-SHA256 keyed with S over its own message, so that
knowing one of them tells nothing about S or the others:

* the front key (:func:`front_key`, ``carme-front-v1|<job>``): nginx's ``X-Carme-Front``; only the portal and the
  launcher know it;
* the challenge answer (:func:`challenge_answer`, ``carme-challenge-v1|<job>|<nonce>``);
* the app secret (:func:`app_secret`, ``carme-app-v1|<job>``): the app's own token or password (``{secret}`` in the
  app specs, :mod:`carme_runtime.apps`). The app, its pages (JupyterLab writes its token into every page) and the
  browser see only this value, never S: a script that reads it cannot compute the front key. The front adds the app's
  secret header itself (``app_headers``, e.g. ``Authorization: token <app secret>``) and drops any such header the
  client sent, so the token never has to travel through nginx or the browser.

Other users on the cluster can open TCP connections to any front. A peer address may hold at most
``peer_limit`` connections that have not (yet) presented the front key; further ones are closed at once, and a
connection must send its whole request head within ``head_timeout`` seconds. A peer that has presented the key
(nginx on the portal host) is not limited, so no other peer's flood of idle connections can delay its requests
(:mod:`carme_runtime.front_peers`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import http.client
import json
import re
import secrets
import socket
import threading
from collections.abc import Mapping
from urllib.parse import parse_qs
from urllib.parse import urlsplit

from carme_runtime.front_peers import PEER_LIMIT
from carme_runtime.front_peers import PeerLimit
from carme_runtime.front_peers import Slot
from carme_runtime.front_peers import peer_address

FRONT_HEADER = "X-Carme-Front"
CHALLENGE_PATH = "/.carme/challenge"
#: Ports a front may listen on; the portal refuses to verify or proxy to any other (``PROXY_PORT_RANGE``).
PORT_RANGE = (32768, 60999)
MAX_HEAD_BYTES = 64 * 1024
NONCE_RE = re.compile(r"^[0-9a-f]{32,128}$")
HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9-]+$")
#: seconds a connection has to send its whole request head
HEAD_TIMEOUT_S = 10.0
_CHUNK = 64 * 1024


def _mac(secret: str, message: str) -> str:
    return hmac.new(secret.encode(), message.encode(), hashlib.sha256).hexdigest()


def front_key(secret: str, job_id: int) -> str:
    """The value nginx sends in ``X-Carme-Front`` for this session (never the secret itself)."""
    return _mac(secret, f"carme-front-v1|{job_id}")


def app_secret(secret: str, job_id: int) -> str:
    """The app's own token or password for this session (43 URL-safe characters), never the session secret.

    Domain-separated from :func:`front_key` and :func:`challenge_answer`: whoever learns it (the app writes it into
    its pages) can neither compute the front key nor answer the portal's challenge.
    """
    digest = hmac.new(secret.encode(), f"carme-app-v1|{job_id}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def front_headers(secret: str, job_id: int) -> dict[str, str]:
    return {FRONT_HEADER: front_key(secret, job_id)}


def challenge_answer(secret: str, job_id: int, nonce: str) -> str:
    return _mac(secret, f"carme-challenge-v1|{job_id}|{nonce}")


def verify_endpoint(host: str, port: int, job_id: int, secret: str, timeout: float) -> bool:
    """Ask ``host:port`` to prove it is job ``job_id``'s front; True only for a correct answer.

    Sends nothing secret; reads at most 4 KiB of the answer, which is never shown to anyone.
    """
    nonce = secrets.token_hex(16)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", f"{CHALLENGE_PATH}?job={job_id}&nonce={nonce}", headers={"Connection": "close"})
        resp = conn.getresponse()
        if resp.status != 200:
            return False
        data = json.loads(resp.read(4096))
    except (OSError, http.client.HTTPException, ValueError):
        return False
    finally:
        conn.close()
    mac = data.get("mac") if isinstance(data, dict) else None
    return isinstance(mac, str) and hmac.compare_digest(mac, challenge_answer(secret, job_id, nonce))


def bind_front_socket(host: str, port_range: tuple[int, int] = PORT_RANGE, attempts: int = 64) -> socket.socket:
    """A listening socket on ``host`` at a random free port of ``port_range`` (kept open: no race)."""
    lo, hi = port_range
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    last: OSError | None = None
    for _ in range(attempts):
        port = lo + secrets.randbelow(hi - lo + 1)
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        return sock
    raise OSError(f"no free port in {lo}-{hi} on {host}: {last}")


def _reply(status: int, reason: str, body: bytes = b"", content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class BadRequest(ValueError):
    pass


def parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    """Request line and header fields of an HTTP/1.x request head (ending in CRLF CRLF); strict."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes every byte
        raise BadRequest("undecodable head") from exc
    lines = text.split("\r\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise BadRequest("empty request")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise BadRequest("bad request line")
    method, target, version = parts
    fields: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line or line[0] in " \t" or "\n" in line:
            raise BadRequest("bad header line (folded or empty)")
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest("bad header line")
        fields.append((name, value.strip()))
    return method, target, version, fields


def _values(fields: list[tuple[str, str]], name: str) -> list[str]:
    return [v for n, v in fields if n.lower() == name.lower()]


class Front:
    """The front of one session; :meth:`start` serves from a daemon thread, :meth:`stop` ends it."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        app_host: str,
        app_port: int,
        secret: str,
        job_id: int,
        base_path: str,
        head_timeout: float = HEAD_TIMEOUT_S,
        app_unix: str | None = None,
        strip_prefix: bool = False,
        app_headers: Mapping[str, str] | None = None,
        peer_limit: int = PEER_LIMIT,
    ) -> None:
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.app_host = app_host
        self.app_port = app_port
        self.app_unix = app_unix
        self.job_id = job_id
        self.base_path = base_path.rstrip("/")
        self.strip_prefix = strip_prefix
        self.head_timeout = head_timeout
        self._key = front_key(secret, job_id)
        self._secret = secret
        self._app_headers = _checked_headers(app_headers or {})
        self._peers = PeerLimit(peer_limit)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._connections: set[asyncio.Task[None]] = set()  # each connection's handler, ended when the front stops
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Front:
        self._thread = threading.Thread(target=self._run, name="carme-front", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(stopped.set)
        if self._thread is not None:
            self._thread.join(10)
        self.sock.close()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._handle, sock=self.sock, limit=MAX_HEAD_BYTES)
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            server.close()
            # the handlers still running close their connections (their finally) instead of being destroyed
            # pending with the loop, which left sockets to the garbage collector ("unclosed StreamWriter")
            for task in self._connections:
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

    # --- one connection --------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)
        slot = self._peers.admit(peer_address(writer))
        try:
            if slot is not None:  # else: too many connections without the key from this peer, closed at once
                await self._serve(reader, writer, slot)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if slot is not None:
                slot.release()
            writer.close()

    def _allowed_path(self, path: str) -> bool:
        return path == self.base_path or path.startswith(self.base_path + "/")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, slot: Slot) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.head_timeout)
            method, target, version, fields = parse_head(head)
        except (TimeoutError, asyncio.LimitOverrunError, BadRequest, ValueError):
            writer.write(_reply(400, "Bad Request", b"bad request\n"))
            await writer.drain()
            return
        split = urlsplit(target)
        if split.path == CHALLENGE_PATH:
            writer.write(self._challenge(method, split.query))
            await writer.drain()
            return
        given = _values(fields, FRONT_HEADER)
        if len(given) != 1 or not hmac.compare_digest(given[0].encode(), self._key.encode()):
            writer.write(_reply(403, "Forbidden", b"forbidden\n"))
            await writer.drain()
            return
        slot.keyed()  # this peer has the key: no longer counted, never limited
        if not self._allowed_path(split.path):
            writer.write(_reply(404, "Not Found", b"not found\n"))
            await writer.drain()
            return
        try:
            if self.app_unix:
                opening = asyncio.open_unix_connection(self.app_unix, limit=_CHUNK)
            else:
                opening = asyncio.open_connection(self.app_host, self.app_port, limit=_CHUNK)
            app_reader, app_writer = await asyncio.wait_for(opening, 10)
        except (TimeoutError, OSError):
            writer.write(_reply(502, "Bad Gateway", b"the session app does not answer\n"))
            await writer.drain()
            return
        try:
            app_writer.write(self._upstream_head(method, self._app_target(target), version, fields))
            await app_writer.drain()
            upload = asyncio.ensure_future(pump(reader, app_writer))
            try:
                await pump(app_reader, writer)
            finally:
                upload.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                    await upload
        finally:
            app_writer.close()

    def _app_target(self, target: str) -> str:
        """The request target the app sees: as sent, or without the base path for apps served at ``/``."""
        if not self.strip_prefix:
            return target
        rest = target[len(self.base_path) :]  # _allowed_path: target starts with the base path
        return rest if rest.startswith("/") else "/" + rest

    def _challenge(self, method: str, query: str) -> bytes:
        params = parse_qs(query, keep_blank_values=True)
        job = params.get("job", [""])
        nonce = params.get("nonce", [""])
        if method != "GET" or job != [str(self.job_id)] or len(nonce) != 1 or not NONCE_RE.match(nonce[0]):
            return _reply(404, "Not Found", b"not found\n")
        body = json.dumps({"job_id": self.job_id, "mac": challenge_answer(self._secret, self.job_id, nonce[0])})
        return _reply(200, "OK", body.encode(), "application/json")

    def _upstream_head(self, method: str, target: str, version: str, fields: list[tuple[str, str]]) -> bytes:
        """The request head for the app: without ``X-Carme-Front``, with the front's own ``app_headers`` in place of
        any the client sent under those names; ``Connection: close`` unless an upgrade."""
        connection = ",".join(_values(fields, "Connection")).lower()
        upgrade = bool(_values(fields, "Upgrade")) and "upgrade" in [t.strip() for t in connection.split(",")]
        drop = {FRONT_HEADER.lower()} | {n.lower() for n in self._app_headers}
        drop |= set() if upgrade else {"connection", "keep-alive"}
        lines = [f"{method} {target} {version}"]
        lines += [f"{n}: {v}" for n, v in fields if n.lower() not in drop]
        lines += [f"{n}: {v}" for n, v in self._app_headers.items()]
        if not upgrade:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy bytes until EOF, then half-close ``dst``."""
    with contextlib.suppress(ConnectionError, OSError):
        while True:
            data = await src.read(_CHUNK)
            if not data:
                break
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()


def start_front(
    host: str,
    *,
    app_host: str,
    app_port: int,
    secret: str,
    job_id: int,
    base_path: str,
    port_range: tuple[int, int] = PORT_RANGE,
    app_headers: Mapping[str, str] | None = None,
) -> Front:
    """Bind a port of ``port_range`` on ``host`` and serve the front for ``app_host:app_port``."""
    sock = bind_front_socket(host, port_range)
    return Front(
        sock,
        app_host=app_host,
        app_port=app_port,
        secret=secret,
        job_id=job_id,
        base_path=base_path,
        app_headers=app_headers,
    ).start()


def _checked_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` as given, refused if a name or value could split the request head."""
    for name, value in headers.items():
        if not HEADER_NAME_RE.match(name) or any(c in value for c in "\r\n\0"):
            raise ValueError(f"bad app header {name!r}")
    return dict(headers)
