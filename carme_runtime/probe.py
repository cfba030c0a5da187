# SPDX-License-Identifier: GPL-3.0-or-later
"""One HTTP GET to see whether an app answers: ``carme-launch``'s readiness probe, and the portal's check of a
session (``webui/scheduler.py``). Over TCP, or over the Unix socket of an app that has no TCP port."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Mapping


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the Unix socket of an ``isolation = "netns"`` app."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def probe_http(host: str, port: int, path: str, headers: Mapping[str, str], timeout: float) -> int | None:
    """One HTTP GET; the status code, or ``None`` when nothing answers. Redirects are not followed.

    A ``host`` starting with ``/`` is a Unix socket path (``port`` is then ignored).
    """
    conn = (
        UnixHTTPConnection(host, timeout)
        if host.startswith("/")
        else http.client.HTTPConnection(host, port, timeout=timeout)
    )
    try:
        conn.request("GET", path, headers=dict(headers))
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def is_ready_status(status: int | None) -> bool:
    return status is not None and 200 <= status < 400
