# SPDX-License-Identifier: GPL-3.0-or-later
"""carme-read-log: the portal's log reader, run as the job's owner through sudo (carme_runtime/read_log.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from carme_runtime import read_log
from carme_runtime.exit_codes import ExitCode


@pytest.fixture
def as_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run as an ordinary user (uid 1001), whoever runs the tests."""
    monkeypatch.setattr(read_log.os, "geteuid", lambda: 1001)


def _run(*argv: str) -> tuple[int, bytes]:
    out = io.BytesIO()
    return read_log.main(list(argv), out=out), out.getvalue()


def test_prints_the_whole_small_file(as_user: None, tmp_path: Path) -> None:
    log = tmp_path / "carme-jupyterlab-7.out"
    log.write_bytes(b"line 1\nline 2\n")
    assert _run(str(log)) == (0, b"line 1\nline 2\n")


def test_prints_only_the_last_bytes(as_user: None, tmp_path: Path) -> None:
    log = tmp_path / "big.out"
    log.write_bytes(b"a" * 200_000 + b"THE END\n")
    code, data = _run(str(log), "--tail-bytes", "8")
    assert (code, data) == (0, b"THE END\n")
    code, data = _run(str(log), "--tail-bytes", "100000")
    assert code == 0 and len(data) == 100_000 and data.endswith(b"THE END\n")


def test_missing_file(as_user: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(str(tmp_path / "nope.out")) == (ExitCode.LOG_MISSING, b"")
    assert "no such file" in capsys.readouterr().err
    assert _run(str(tmp_path / "nodir" / "x.out"))[0] == ExitCode.LOG_MISSING


def test_refuses_a_link(as_user: None, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("private\n")
    (tmp_path / "link.out").symlink_to(secret)
    assert _run(str(tmp_path / "link.out")) == (ExitCode.LOG_REFUSED, b"")


def test_refuses_a_directory_and_a_fifo(as_user: None, tmp_path: Path) -> None:
    assert _run(str(tmp_path))[0] == ExitCode.LOG_REFUSED
    fifo = tmp_path / "fifo.out"
    os.mkfifo(fifo)
    assert _run(str(fifo)) == (ExitCode.LOG_REFUSED, b"")  # no writer: it must not block


def test_refuses_root_and_system_users(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    log = tmp_path / "x.out"
    log.write_text("x\n")
    for uid in (0, 999):
        monkeypatch.setattr(read_log.os, "geteuid", lambda uid=uid: uid)
        assert _run(str(log)) == (ExitCode.LOG_REFUSED, b"")


@pytest.mark.parametrize("argv", [("relative.out",), ("/tmp/x", "--tail-bytes", "0"), ("/tmp/x", "--tail-bytes", "-5")])
def test_refuses_bad_arguments(as_user: None, argv: tuple[str, ...]) -> None:
    assert _run(*argv)[0] == ExitCode.USAGE


def test_tail_bytes_is_capped(as_user: None, tmp_path: Path) -> None:
    log = tmp_path / "x.out"
    log.write_text("x\n")
    assert _run(str(log), "--tail-bytes", str(read_log.MAX_TAIL_BYTES + 1))[0] == ExitCode.USAGE


def test_unreadable_file_is_refused(as_user: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(path: str, flags: int) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(read_log.os, "open", denied)
    assert _run(str(tmp_path / "x.out")) == (ExitCode.LOG_REFUSED, b"")


def test_console_script_runs(tmp_path: Path) -> None:
    """As installed: the module runs as a program, and (root here or not) never reads as root."""
    log = tmp_path / "x.out"
    log.write_text("hello\n")
    proc = subprocess.run(
        [sys.executable, "-m", "carme_runtime.read_log", str(log)], capture_output=True, check=False, timeout=30
    )
    if os.geteuid() < read_log.MIN_UID:
        assert proc.returncode == ExitCode.LOG_REFUSED and proc.stdout == b""
    else:
        assert (proc.returncode, proc.stdout) == (0, b"hello\n")
