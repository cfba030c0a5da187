# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme-read-log PATH [--tail-bytes N]``: print the end of a job's output file, as its owner.

The portal cannot read users' homes; it runs this command as the job's owner through one sudo rule
(``roles/carme_webui``: ``(ALL,!root) NOPASSWD`` on this script only), so a log is read with exactly the owner's
rights. It refuses to run as root or a system user (uid below :data:`MIN_UID`), opens the file without following a
link (``O_NOFOLLOW``) nor blocking on a FIFO, reads regular files only, and prints at most ``N`` bytes, the file's
last ones.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys

from carme_runtime.exit_codes import ExitCode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import BinaryIO

#: the lowest uid the reader runs as: root and the system users (daemons) are refused
MIN_UID = 1000
#: the most bytes one call prints
MAX_TAIL_BYTES = 16 * 1024 * 1024
DEFAULT_TAIL_BYTES = 256 * 1024
_CHUNK = 64 * 1024


class LogError(Exception):
    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="carme-read-log", description="Print the end of a job's output file.")
    parser.add_argument("path", help="absolute path of the file")
    parser.add_argument("--tail-bytes", type=int, default=DEFAULT_TAIL_BYTES, metavar="N", help="print at most N bytes")
    return parser


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
    args = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        if os.geteuid() < MIN_UID:
            raise LogError(ExitCode.LOG_REFUSED, "refuses to run as root or a system user")
        if not 0 < args.tail_bytes <= MAX_TAIL_BYTES:
            raise LogError(ExitCode.USAGE, f"--tail-bytes must be between 1 and {MAX_TAIL_BYTES}")
        fd = open_log(args.path)
        try:
            copy_tail(fd, args.tail_bytes, out or sys.stdout.buffer)
        finally:
            os.close(fd)
    except LogError as exc:
        sys.stderr.write(f"carme-read-log: {args.path}: {exc}\n")
        return int(exc.code)
    return int(ExitCode.OK)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
