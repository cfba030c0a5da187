# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's side of the log reader (webui/history/logs.py ``SocketLogReader``): what it sends, how it reads each
answer, and a round trip with the real ``carme-read-log --serve`` (carme_runtime/read_log.py) on a unix socket."""

from __future__ import annotations

import json
import os
import pwd
import socket
import threading
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import pytest

from carme_runtime import read_log
from webui.history import logs
from webui.history.logs import SocketLogReader

Handler = Callable[[socket.socket], None]


@pytest.fixture
def listen(tmp_path: Path) -> Iterator[Callable[[Handler], str]]:
    """A unix socket answering one connection with ``handler``, in a thread; its path."""
    threads: list[threading.Thread] = []

    def start(handler: Handler) -> str:
        path = str(tmp_path / f"reader-{len(threads)}.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        server.listen(1)

        def accept_one() -> None:
            with server:
                conn, _ = server.accept()
                with conn:
                    handler(conn)

        threads.append(threading.Thread(target=accept_one, daemon=True))
        threads[-1].start()
        return path

    yield start
    for thread in threads:
        thread.join(timeout=5)


def answering(answer: bytes, requests: list[dict[str, object]] | None = None) -> Handler:
    def handler(conn: socket.socket) -> None:
        line = conn.makefile("rb").readline()
        if requests is not None:
            requests.append(json.loads(line))
        conn.sendall(answer)

    return handler


def test_sends_one_request_and_returns_the_bytes(listen: Callable[[Handler], str]) -> None:
    requests: list[dict[str, object]] = []
    path = listen(answering(b"200 OK\ntail\n", requests))
    assert SocketLogReader(path).read("bob", "/home/bob/slurm-7.out", 100) == b"tail\n"
    assert requests == [{"user": "bob", "path": "/home/bob/slurm-7.out", "tail_bytes": 100}]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"404 no such file\n", logs.LogMissing),
        (b"403 not a regular file\n", logs.LogRefused),
        (b"400 the request is not JSON\n", logs.LogUnavailable),
        (b"500 cannot switch to the user\n", logs.LogUnavailable),
        (b"", logs.LogUnavailable),  # it failed before it answered
        (b"200 OK\n" + b"x" * 11, logs.LogUnavailable),  # more than asked for
    ],
)
def test_each_answer(listen: Callable[[Handler], str], answer: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        SocketLogReader(listen(answering(answer))).read("bob", "/a", 10)


def test_no_reader_and_a_silent_reader_are_unavailable(listen: Callable[[Handler], str], tmp_path: Path) -> None:
    with pytest.raises(logs.LogUnavailable):
        SocketLogReader(str(tmp_path / "none.sock")).read("bob", "/a", 10)
    done = threading.Event()
    path = listen(lambda conn: done.wait(5))
    with pytest.raises(logs.LogUnavailable, match="timed out"):
        SocketLogReader(path, timeout=0.1).read("bob", "/a", 10)
    done.set()


def test_round_trip_with_the_real_reader(
    listen: Callable[[Handler], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``carme-read-log --serve`` answers what the portal understands (the user switch left out: it needs root)."""
    me = pwd.getpwuid(os.getuid()).pw_name
    real = pwd.getpwnam
    bob = pwd.struct_passwd(("bob", "x", 2001, 2001, "", "/home/bob", "/bin/sh"))
    monkeypatch.setattr(read_log.pwd, "getpwnam", lambda name: bob if name == "bob" else real(name))
    log = tmp_path / "slurm-7.out"
    log.write_bytes(b"a" * 100 + b"the end\n")

    def reader(conn: socket.socket) -> None:
        read_log.serve(conn.dup(), me, lambda owner: None)

    assert SocketLogReader(listen(reader)).read("bob", str(log), 8) == b"the end\n"
    with pytest.raises(logs.LogMissing):
        SocketLogReader(listen(reader)).read("bob", str(tmp_path / "none.out"), 8)
    with pytest.raises(logs.LogRefused):
        SocketLogReader(listen(reader)).read("root", str(log), 8)
