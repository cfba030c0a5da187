# SPDX-License-Identifier: GPL-3.0-or-later
"""carme-read-log (carme_runtime/read_log.py): reading a log as its owner, and ``--serve``, the portal's reader on a
socket (roles/carme_webui carme-log-reader.socket), tested over a socketpair."""

from __future__ import annotations

import io
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from collections.abc import Iterator
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


# --- --serve ---------------------------------------------------------------------------------------------------------

ME = pwd.getpwuid(os.getuid()).pw_name


def account(name: str, uid: int) -> pwd.struct_passwd:
    return pwd.struct_passwd((name, "x", uid, uid, "", f"/home/{name}", "/bin/sh"))


class Switch:
    """A stand-in for :func:`read_log.drop_privileges`: records who it became."""

    def __init__(self) -> None:
        self.became: list[str] = []

    def __call__(self, owner: pwd.struct_passwd) -> None:
        self.became.append(owner.pw_name)


def ask(request: bytes, peer_user: str = ME, drop: Callable[[pwd.struct_passwd], None] | None = None) -> bytes:
    """Send ``request`` to :func:`read_log.serve` over a socketpair; its whole answer."""
    portal, reader = socket.socketpair()
    with portal:
        portal.sendall(request)
        portal.shutdown(socket.SHUT_WR)
        read_log.serve(reader, peer_user, drop or Switch())
        return portal.makefile("rb").read()


def req(user: str, path: str | Path, tail_bytes: object = 1000) -> bytes:
    return json.dumps({"user": user, "path": str(path), "tail_bytes": tail_bytes}).encode() + b"\n"


@pytest.fixture
def users(monkeypatch: pytest.MonkeyPatch) -> None:
    """bob (uid 2001), the system user daemon (uid 1) and nobody; mallory is unknown; the rest as they are here."""
    known = {"bob": account("bob", 2001), "daemon": account("daemon", 1), "nobody": account("nobody", 65534)}
    real = pwd.getpwnam

    def getpwnam(name: str) -> pwd.struct_passwd:
        if name == "mallory":
            raise KeyError(name)
        return known[name] if name in known else real(name)

    monkeypatch.setattr(read_log.pwd, "getpwnam", getpwnam)


def test_serve_reads_the_tail_as_the_owner(users: None, tmp_path: Path) -> None:
    log = tmp_path / "slurm-7.out"
    log.write_bytes(b"x" * 5000 + b"THE END\n")
    switch = Switch()
    assert ask(req("bob", log, 8), drop=switch) == b"200 OK\nTHE END\n"
    assert switch.became == ["bob"]


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        (b"not json\n", b"400"),
        (b"[1]\n", b"400"),
        (b'{"user": "bob"}\n', b"400"),
        (req("bob", "/tmp/x", 0), b"400"),
        (req("bob", "/tmp/x", True), b"400"),
        (req("bob", "/tmp/x", read_log.MAX_TAIL_BYTES + 1), b"400"),
        (req("bob", "relative.out"), b"400"),
        (b"{" + b" " * read_log.MAX_REQUEST_BYTES, b"400"),  # one byte too many (more, unread, would reset it)
        (b"", b"400"),
        (req("root", "/etc/shadow"), b"403"),
        (req("daemon", "/etc/shadow"), b"403"),
        (req("nobody", "/etc/shadow"), b"403"),
        (req("mallory", "/etc/shadow"), b"403"),
        (req("bob", "/nonexistent/slurm-7.out"), b"404"),
    ],
)
def test_serve_answers_a_status(users: None, request_line: bytes, status: bytes) -> None:
    switch = Switch()
    answer = ask(request_line, drop=switch)
    assert answer.split(b" ", 1)[0] == status and answer.endswith(b"\n") and answer.count(b"\n") == 1
    if status != b"404":
        assert switch.became == []  # refused before it switched users


def test_serve_waits_for_the_request_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read_log, "REQUEST_TIMEOUT_S", 0.05)
    portal, reader = socket.socketpair()
    with portal:
        portal.sendall(b'{"user": ')  # and then nothing
        assert read_log.serve(reader, ME, Switch()) == ExitCode.USAGE
        assert portal.makefile("rb").read().startswith(b"400 no request")


def test_serve_refuses_links_and_fifos(users: None, tmp_path: Path) -> None:
    (tmp_path / "link.out").symlink_to("/etc/passwd")
    os.mkfifo(tmp_path / "fifo.out")
    assert ask(req("bob", tmp_path / "link.out")).startswith(b"403 ")
    assert ask(req("bob", tmp_path / "fifo.out")).startswith(b"403 ")
    assert ask(req("bob", tmp_path)).startswith(b"403 ")


def test_serve_answers_only_the_peer_user(users: None, tmp_path: Path) -> None:
    log = tmp_path / "x.out"
    log.write_text("x\n")
    other = next(p.pw_name for p in pwd.getpwall() if p.pw_uid != os.getuid())
    switch = Switch()
    assert ask(req("bob", log), peer_user=other, drop=switch).startswith(b"403 ")
    assert switch.became == []
    assert ask(req("bob", log), peer_user="no-such-portal-user").startswith(b"500 ")


def test_serve_stops_when_the_switch_fails(users: None, tmp_path: Path) -> None:
    def fails(owner: pwd.struct_passwd) -> None:
        raise read_log.LogError(ExitCode.ERROR, "cannot switch")

    log = tmp_path / "x.out"
    log.write_text("secret\n")
    assert ask(req("bob", log), drop=fails) == b"500 cannot switch\n"


def test_the_switch_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """drop_privileges fails when the ids did not change, or when root can be had back."""
    ids = {"uid": (0, 0, 0), "gid": (0, 0, 0)}
    monkeypatch.setattr(read_log.os, "setgroups", lambda groups: None)
    monkeypatch.setattr(read_log.os, "getgrouplist", lambda name, gid: [gid])
    monkeypatch.setattr(read_log.os, "setresgid", lambda *g: ids.update(gid=g))
    monkeypatch.setattr(read_log.os, "setresuid", lambda *u: None)  # ignored: still root
    monkeypatch.setattr(read_log.os, "getresuid", lambda: ids["uid"])
    monkeypatch.setattr(read_log.os, "getresgid", lambda: ids["gid"])
    monkeypatch.setattr(read_log.os, "setuid", lambda uid: None)
    with pytest.raises(read_log.LogError, match="did not hold"):
        read_log.drop_privileges(account("bob", 2001))
    monkeypatch.setattr(read_log.os, "setresuid", lambda *u: ids.update(uid=u))
    with pytest.raises(read_log.LogError, match="root could be regained"):
        read_log.drop_privileges(account("bob", 2001))

    def denied(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(read_log.os, "setuid", denied)
    read_log.drop_privileges(account("bob", 2001))
    monkeypatch.setattr(read_log.os, "setresgid", denied)
    with pytest.raises(read_log.LogError, match="cannot switch"):
        read_log.drop_privileges(account("bob", 2001))


def _test_user() -> pwd.struct_passwd | None:
    return next((p for p in pwd.getpwall() if read_log.MIN_UID <= p.pw_uid < read_log.NOBODY_UID), None)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory everyone may enter (pytest's own tmp_path is root's only)."""
    path = Path(tempfile.mkdtemp(prefix="carme-read-log-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def _serve_in_child(request: bytes) -> bytes:
    """serve() with the real privilege drop, in a forked child (the switch is for good)."""
    portal, reader = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        portal.close()
        os._exit(read_log.serve(reader, ME))
    reader.close()
    with portal:
        portal.sendall(request)
        answer = portal.makefile("rb").read()
    os.waitpid(pid, 0)
    return answer


@pytest.mark.skipif(os.geteuid() != 0 or _test_user() is None, reason="needs root and a user with uid >= 1000")
def test_serve_really_reads_as_the_owner(shared_dir: Path) -> None:
    """As root, with a real user: the owner's 0600 file is read, root's 0600 file is refused."""
    user = _test_user()
    assert user is not None
    mine = shared_dir / "mine.out"
    mine.write_text("owner's log\n")
    os.chown(mine, user.pw_uid, user.pw_gid)
    mine.chmod(0o600)
    roots = shared_dir / "root.out"
    roots.write_text("root's secret\n")
    roots.chmod(0o600)
    assert _serve_in_child(req(user.pw_name, mine)) == b"200 OK\nowner's log\n"
    assert _serve_in_child(req(user.pw_name, roots)).startswith(b"403 ")
    assert _serve_in_child(req("root", roots)).startswith(b"403 ")


def test_serve_is_a_console_mode() -> None:
    """``--serve`` needs ``--peer-user`` and takes no path."""
    for argv in (["--serve"], ["--serve", "--peer-user", "p", "/tmp/x"], []):
        with pytest.raises(SystemExit) as exc:
            read_log.main(argv)
        assert exc.value.code == 2
