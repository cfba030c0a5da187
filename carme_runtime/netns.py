# SPDX-License-Identifier: GPL-3.0-or-later
"""A private network namespace for apps without authentication (``isolation = "netns"``).

``carme-launch`` runs ``unshare --user --map-root-user --net -- python -I -c <this module's main> ...`` (util-linux;
unprivileged user namespaces, no root, no setuid helper). Inside, this module:

1. brings up ``lo`` (``SIOCSIFFLAGS``; as the namespace's root it holds ``CAP_NET_ADMIN`` there), so the app's
   ``127.0.0.1:<port>`` exists only in this namespace: on the node nothing listens at that port;
2. listens on a Unix socket in the 0700 directory that the launcher created (owned by the user, so no other
   user can open it) and relays each connection to ``127.0.0.1:<port>``: the session front, outside, reaches
   the app only that way;
3. starts the app through a nested ``unshare --map-user=<uid> --map-group=<gid>`` (same network namespace), so
   the app runs under the user's own uid, not as the namespace's root; forwards SIGTERM/SIGINT to it and exits
   with its exit code.

Everything stays in the job's cgroup: Slurm still ends it with the job. Stdlib only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import signal
import socket
import struct
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from carme_runtime.command_runner import RC_TIMEOUT
from carme_runtime.command_runner import SubprocessRunner
from carme_runtime.command_runner import spawn
from carme_runtime.exit_codes import ExitCode
from carme_runtime.front import pump

if TYPE_CHECKING:
    import subprocess

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
_IFREQ = "16sh22x"  # struct ifreq: ifr_name[IFNAMSIZ], then the ifr_flags member of the 24-byte union
APP_HOST = "127.0.0.1"
SOCKET_NAME = "app.sock"
#: the directory that holds this ``carme_runtime`` package
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def userns_argv(unshare: str, command: Sequence[str]) -> list[str]:
    """``command`` in a new user namespace (the user mapped to its root) with a new, empty network namespace."""
    return [unshare, "--user", "--map-root-user", "--net", "--", *command]


def namespace_argv(
    app_argv: Sequence[str], *, socket_path: str, port: int, uid: int, gid: int, unshare: str, python: str
) -> list[str]:
    """The argv ``carme-launch`` starts for an ``isolation = "netns"`` app.

    The bridge runs with ``python -I`` and imports this very copy of ``carme_runtime`` by path: the app's
    environment (``PYTHONPATH``...), which the bridge passes on to the app, cannot change what the bridge runs.
    """
    bridge = [
        python,
        "-I",
        "-c",
        f"import sys; sys.path.insert(0, {PACKAGE_PARENT!r}); from carme_runtime.netns import main; sys.exit(main())",
        f"--socket={socket_path}",
        f"--port={port}",
        f"--uid={uid}",
        f"--gid={gid}",
        f"--unshare={unshare}",
        "--",
        *app_argv,
    ]
    return userns_argv(unshare, bridge)


def check_userns(unshare: str, env: dict[str, str], timeout: float = 10.0) -> str | None:
    """``None`` when ``unshare`` can make a user and network namespace here, else why not (one line)."""
    try:
        rc, out, err = SubprocessRunner(timeout=timeout)(userns_argv(unshare, ["true"]), env=env)
    except OSError as exc:
        return f"cannot run {unshare}: {exc}"
    if rc == RC_TIMEOUT:
        return f"{unshare} did not finish within {timeout:g} s"
    if rc != 0:
        detail = (err or out).strip().splitlines()
        return f"{unshare} exited {rc}: {detail[-1][:200] if detail else 'no message'}"
    return None


def loopback_up() -> None:
    """Set IFF_UP on ``lo`` of the current network namespace (what ``ip link set lo up`` does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        req = fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0))
        flags = struct.unpack(_IFREQ, req)[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | IFF_UP))


def bind_unix(path: str) -> socket.socket:
    """A listening Unix socket at ``path``, mode 0600 from the start (umask 077 while binding)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)
    try:
        sock.bind(path)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    sock.listen(128)
    return sock


async def _relay(port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        app_reader, app_writer = await asyncio.wait_for(asyncio.open_connection(APP_HOST, port), 10)
    except (TimeoutError, OSError):
        writer.close()
        return
    try:
        upload = asyncio.ensure_future(pump(reader, app_writer))
        try:
            await pump(app_reader, writer)
        finally:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await upload
    finally:
        app_writer.close()
        writer.close()


async def serve(listener: socket.socket, port: int, child: subprocess.Popen[bytes]) -> int:
    """Relay ``listener`` to ``127.0.0.1:port`` until ``child`` exits; its exit status."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _forward, child, signum)
    server = await asyncio.start_unix_server(lambda r, w: _relay(port, r, w), sock=listener)
    try:
        return await loop.run_in_executor(None, child.wait)
    finally:
        server.close()


def _forward(child: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="carme_runtime.netns", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--uid", type=int, required=True)
    parser.add_argument("--gid", type=int, required=True)
    parser.add_argument("--unshare", default="unshare")
    parser.add_argument("app", nargs="+")
    args = parser.parse_args(argv)

    def say(msg: str) -> None:
        print(f"carme-netns: {msg}", file=sys.stderr, flush=True)

    try:
        loopback_up()
        listener = bind_unix(args.socket)
    except OSError as exc:
        say(f"cannot set up the session's network namespace: {exc}")
        return ExitCode.NETNS_UNAVAILABLE
    app = [args.unshare, f"--map-user={args.uid}", f"--map-group={args.gid}", "--", *args.app]
    try:
        try:
            child = spawn(app)
        except OSError as exc:
            say(f"cannot start {args.app[0]}: {exc}")
            return ExitCode.APP_START_FAILED
        rc = asyncio.run(serve(listener, args.port, child))
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(args.socket)
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
