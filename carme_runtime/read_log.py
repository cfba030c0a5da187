# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme-read-log``: the end of a job's output file, read with exactly its owner's rights.

``carme-read-log PATH [--tail-bytes N]`` prints it for the user who runs it. It refuses to run as root or a system
user (uid below :data:`MIN_UID`), opens the file without following a link (``O_NOFOLLOW``) nor blocking on a FIFO,
reads regular files only, and prints at most ``N`` bytes, the file's last ones.

``carme-read-log --serve --peer-user carme-portal`` is the portal's reader (roles/carme_webui:
``carme-log-reader.socket``, ``Accept=yes``: systemd starts it as root, hardened, per connection, the connection on
fd 0). The portal cannot read users' homes and may not gain privileges (``NoNewPrivileges=yes``); it sends one JSON
line ``{"user": OWNER, "path": PATH, "tail_bytes": N}``. The reader checks that the peer is the portal's user
(``SO_PEERCRED``), refuses root, system users and unknown users, switches to the owner for good (groups, gid, uid;
it checks it cannot switch back) and only then opens the file as above. It answers one status line
(``200 OK``, ``404 ...`` no such file, ``403 ...`` refused, ``400 ...`` a bad request, ``500 ...``), then the bytes.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import pwd
import socket
import stat
import struct
import sys

from carme_runtime.exit_codes import ExitCode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from collections.abc import Sequence
    from typing import BinaryIO

#: the lowest uid the reader runs as: root and the system users (daemons) are refused
MIN_UID = 1000
#: the most bytes one call prints
MAX_TAIL_BYTES = 16 * 1024 * 1024
DEFAULT_TAIL_BYTES = 256 * 1024
_CHUNK = 64 * 1024
#: ``--serve``: owners never read as (``nobody``), the longest request line, and how long the peer has to send it
NOBODY_UID = 65534
MAX_REQUEST_BYTES = 4096
REQUEST_TIMEOUT_S = 5.0
#: ``--serve``: the status line's code for each outcome (anything else: 500)
STATUS = {ExitCode.OK: "200", ExitCode.LOG_MISSING: "404", ExitCode.LOG_REFUSED: "403", ExitCode.USAGE: "400"}


class LogError(Exception):
    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="carme-read-log", description="Print the end of a job's output file.")
    parser.add_argument("path", nargs="?", help="absolute path of the file")
    parser.add_argument("--tail-bytes", type=int, default=DEFAULT_TAIL_BYTES, metavar="N", help="print at most N bytes")
    parser.add_argument("--serve", action="store_true", help="answer one request on the socket at fd 0 (as root)")
    parser.add_argument("--peer-user", metavar="USER", help="--serve: the only user who may ask (the portal's)")
    return parser


def check_tail_bytes(tail_bytes: object) -> int:
    if type(tail_bytes) is not int or not 0 < tail_bytes <= MAX_TAIL_BYTES:
        raise LogError(ExitCode.USAGE, f"tail bytes must be between 1 and {MAX_TAIL_BYTES}")
    return tail_bytes


def open_log(path: str) -> int:
    """A read-only descriptor of the regular file ``path`` (never through a link at its last component)."""
    if not os.path.isabs(path) or "\0" in path:
        raise LogError(ExitCode.USAGE, "the path must be absolute")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise LogError(ExitCode.LOG_MISSING, "no such file") from exc
        raise LogError(ExitCode.LOG_REFUSED, f"cannot open it ({os.strerror(exc.errno or 0)})") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LogError(ExitCode.LOG_REFUSED, "not a regular file")
    return fd


def copy_tail(fd: int, limit: int, out: BinaryIO) -> int:
    """Write the last ``limit`` bytes of ``fd`` (as it is now) to ``out``; the number written."""
    size = os.fstat(fd).st_size
    os.lseek(fd, max(0, size - limit), os.SEEK_SET)
    left = min(limit, size)
    while left > 0:
        chunk = os.read(fd, min(_CHUNK, left))
        if not chunk:
            break
        out.write(chunk)
        left -= len(chunk)
    out.flush()
    return min(limit, size) - left


def main(argv: Sequence[str] | None = None, out: BinaryIO | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.serve:
        if not args.peer_user or args.path:
            parser.error("--serve takes --peer-user and no path")
        return serve(socket.socket(fileno=0), args.peer_user)
    if not args.path:
        parser.error("the path is required")
    try:
        if os.geteuid() < MIN_UID:
            raise LogError(ExitCode.LOG_REFUSED, "refuses to run as root or a system user")
        check_tail_bytes(args.tail_bytes)
        fd = open_log(args.path)
        try:
            copy_tail(fd, args.tail_bytes, out or sys.stdout.buffer)
        finally:
            os.close(fd)
    except LogError as exc:
        sys.stderr.write(f"carme-read-log: {args.path}: {exc}\n")
        return int(exc.code)
    return int(ExitCode.OK)


# --- --serve: one request from the portal, on a socket systemd accepted ----------------------------------------------


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a unix socket (``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def read_request(conn: socket.socket) -> tuple[str, str, int]:
    """``(user, path, tail_bytes)`` of the request line ``{"user": ..., "path": ..., "tail_bytes": N}``."""
    conn.settimeout(REQUEST_TIMEOUT_S)
    data = b""
    try:
        while b"\n" not in data and len(data) <= MAX_REQUEST_BYTES:
            chunk = conn.recv(MAX_REQUEST_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise LogError(ExitCode.USAGE, f"no request ({exc})") from exc
    line = data.split(b"\n", 1)[0]
    if len(line) > MAX_REQUEST_BYTES:
        raise LogError(ExitCode.USAGE, "the request is too long")
    try:
        request = json.loads(line)
    except ValueError as exc:
        raise LogError(ExitCode.USAGE, "the request is not JSON") from exc
    user, path = (request.get(key) if isinstance(request, dict) else None for key in ("user", "path"))
    if not isinstance(user, str) or not isinstance(path, str):
        raise LogError(ExitCode.USAGE, "the request needs a user and a path")
    if not os.path.isabs(path) or "\0" in path:
        raise LogError(ExitCode.USAGE, "the path must be absolute")
    return user, path, check_tail_bytes(request.get("tail_bytes"))


def lookup_owner(name: str) -> pwd.struct_passwd:
    """The owner's account; refused: unknown users, root, system users (uid below :data:`MIN_UID`) and nobody."""
    try:
        owner = pwd.getpwnam(name) if name and "\0" not in name else None
    except KeyError:
        owner = None
    if owner is None:
        raise LogError(ExitCode.LOG_REFUSED, "unknown user")
    if owner.pw_uid < MIN_UID or owner.pw_uid == NOBODY_UID:
        raise LogError(ExitCode.LOG_REFUSED, "refuses to read as root or a system user")
    return owner


def drop_privileges(owner: pwd.struct_passwd) -> None:
    """Become ``owner`` for good: its groups, its gid and uid as real, effective and saved ids; checks that root
    cannot be regained."""
    uid, gid = owner.pw_uid, owner.pw_gid
    try:
        os.setgroups(os.getgrouplist(owner.pw_name, gid))
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        raise LogError(ExitCode.ERROR, f"cannot switch to the user ({exc})") from exc
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise LogError(ExitCode.ERROR, "the user switch did not hold")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise LogError(ExitCode.ERROR, "root could be regained")  # nothing is read


def _open_for(conn: socket.socket, peer_user: str, drop: Callable[[pwd.struct_passwd], None]) -> tuple[str, int, int]:
    """Check the peer and the request, become the owner, open the file: ``(description, fd, tail_bytes)``."""
    user, path, tail_bytes = read_request(conn)  # first: a refusal must not leave it unread (a reset, no answer)
    try:
        allowed = pwd.getpwnam(peer_user).pw_uid
    except KeyError as exc:
        raise LogError(ExitCode.ERROR, f"the peer user {peer_user} is unknown") from exc
    uid = peer_uid(conn)
    if uid != allowed:
        raise LogError(ExitCode.LOG_REFUSED, f"uid {uid} may not ask (only {peer_user})")
    drop(lookup_owner(user))
    return f"{path} as {user}", open_log(path), tail_bytes


def serve(conn: socket.socket, peer_user: str, drop: Callable[[pwd.struct_passwd], None] = drop_privileges) -> int:
    """Answer one request on ``conn``: a status line, then on ``200`` at most the bytes asked for."""
    out = conn.makefile("wb")
    try:
        try:
            what, fd, tail_bytes = _open_for(conn, peer_user, drop)
        except LogError as exc:
            sys.stderr.write(f"carme-read-log: refused: {exc}\n")
            out.write(f"{STATUS.get(exc.code, '500')} {exc}\n".encode())
            return int(exc.code)
        try:
            out.write(b"200 OK\n")
            copy_tail(fd, tail_bytes, out)
        finally:
            os.close(fd)
        sys.stderr.write(f"carme-read-log: read {what}\n")
    except OSError as exc:  # the portal went away
        sys.stderr.write(f"carme-read-log: {exc}\n")
        return int(ExitCode.ERROR)
    finally:
        out.close()
        conn.close()
    return int(ExitCode.OK)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
