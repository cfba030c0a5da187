# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a session's or job's output file is, and reading it as its owner.

The portal runs as its own system user, cannot read users' homes and may not gain privileges. It asks the log reader
on a unix socket (``LOG_READER_SOCKET``; roles/carme_webui ``carme-log-reader.socket``, which only the portal's group
may connect to): systemd starts ``carme-read-log --serve`` (carme_runtime/read_log.py) per connection, which becomes
the job's owner before it opens the file, so a log is read with exactly its owner's rights.
Tests plug in their own reader (``LOG_READER``).
"""

from __future__ import annotations

import json
import os
import re
import socket
from typing import Protocol

from flask import current_app

from webui.slurm.records import AccountJob

#: where the log reader listens (roles/carme_webui ``carme_webui_log_reader_socket``)
DEFAULT_SOCKET = "/run/carme/log-reader.sock"
#: the longest status line the reader answers
_MAX_STATUS = 1024

#: Slurm's filename patterns the portal fills in (sbatch(1) "filename pattern"); a path with any other is not guessed
_PATTERN = re.compile(r"%(.)")


class LogMissing(Exception):
    """There is no such file."""


class LogRefused(Exception):
    """The reader will not read it: not a regular file, a link, unreadable by its owner, or an owner it refuses."""


class LogUnavailable(Exception):
    """The reader could not be asked or did not answer (its socket missing, a timeout, an error of its own)."""


class LogReader(Protocol):
    def read(self, owner: str, path: str, max_bytes: int) -> bytes:
        """The last ``max_bytes`` of ``path``, read as ``owner``."""
        ...


def job_log_path(job: AccountJob) -> str | None:
    """A job's standard output: the ``std_out`` Slurm recorded (Slurm 23.02 and later), else sbatch's default
    ``slurm-%j.out`` in the job's working directory; None when it cannot be told."""
    pattern = job.std_out or (os.path.join(job.workdir, "slurm-%j.out") if job.workdir else "")
    fill = {"%": "%", "j": str(job.job_id), "A": str(job.job_id), "u": job.user, "x": job.name}
    if not pattern.startswith("/") or any(m.group(1) not in fill for m in _PATTERN.finditer(pattern)):
        return None
    return _PATTERN.sub(lambda m: fill[m.group(1)], pattern)


class SocketLogReader:
    """One connection to ``carme-read-log --serve`` per read: a JSON request line, a status line back, the bytes."""

    def __init__(self, path: str, *, timeout: float = 10.0) -> None:
        self.path = path
        self.timeout = timeout

    def read(self, owner: str, path: str, max_bytes: int) -> bytes:
        request = json.dumps({"user": owner, "path": path, "tail_bytes": max_bytes}).encode() + b"\n"
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(self.timeout)
                conn.connect(self.path)
                conn.sendall(request)
                conn.shutdown(socket.SHUT_WR)
                with conn.makefile("rb") as answer:
                    status = answer.readline(_MAX_STATUS)
                    data = answer.read(max_bytes + 1) if status.startswith(b"200 ") else b""
        except OSError as exc:  # timeouts too
            raise LogUnavailable(f"{self.path}: {exc}") from exc
        return _answer(status, data, path, max_bytes)


def _answer(status: bytes, data: bytes, path: str, max_bytes: int) -> bytes:
    """The bytes of a ``200`` answer, else the exception of its status."""
    code, _, message = status.decode("utf-8", "replace").strip().partition(" ")
    if code == "200" and len(data) <= max_bytes:
        return data
    if code == "404":
        raise LogMissing(path)
    if code == "403":
        raise LogRefused(f"{path}: {message}")
    raise LogUnavailable(f"the log reader answered {status[:200]!r}")


def current_log_reader() -> LogReader:
    """``LOG_READER`` (tests), else a :class:`SocketLogReader` of ``LOG_READER_SOCKET`` (:data:`DEFAULT_SOCKET`)."""
    reader: LogReader | None = current_app.config.get("LOG_READER")
    if reader is not None:
        return reader
    return SocketLogReader(str(current_app.config.get("LOG_READER_SOCKET") or DEFAULT_SOCKET))
