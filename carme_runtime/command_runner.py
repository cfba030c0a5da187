# SPDX-License-Identifier: GPL-3.0-or-later
"""The one place where external commands run.

Every Slurm command (``scontrol``, ``squeue``, ``sacct``, ``sacctmgr``), ``nvidia-smi``, ``beeond`` and the
``unshare`` check goes through a :class:`Runner`: a callable taking an argv list (never a shell string) and
returning ``(returncode, stdout, stderr)``. Decision code receives a runner as a parameter, so unit tests pass a
fake one and integration tests pass :class:`SubprocessRunner`. The one long-lived child, a session's app (started by
``carme-launch`` and by the network-namespace bridge), is started by :func:`spawn`.
"""

from __future__ import annotations

# No runtime import of ``typing`` or ``subprocess`` here: the prolog imports this module on every job
# (about 11 ms saved); ``subprocess`` is imported only by :func:`spawn`.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping
    from collections.abc import Sequence
    from typing import Protocol

    class Runner(Protocol):
        """Callable taking argv (a list, never a shell string); returns ``(rc, stdout, stderr)``."""

        def __call__(
            self, argv: Sequence[str], *, input_text: str | None = None, env: Mapping[str, str] | None = None
        ) -> tuple[int, str, str]: ...


#: returned as the return code when the program does not exist (like a shell's 127)
RC_NOT_FOUND = 127
#: returned when the program ran past its timeout (like timeout(1))
RC_TIMEOUT = 124
#: SIGPIPE and SIGXFSZ (Linux's numbers; ``signal`` imports ``enum``): Python ignores them, a program gets them back
#: at their default, as ``subprocess``'s ``restore_signals`` does (else ``yes | head`` in a script prints errors)
_DEFAULT_SIGNALS = (13, 25)


class SubprocessRunner:
    """Run argv (no shell) with a timeout, capturing its output as text; never raises for a failing command.

    Built on :func:`os.posix_spawn` and :mod:`select` rather than :mod:`subprocess`, whose import (``locale``, ``re``,
    ``threading``, ``selectors``) cost the epilog about 8 ms whenever it had to ask ``squeue``. It keeps
    ``subprocess.run(..., capture_output=True, text=True)``'s meaning: the program is looked up on the ``PATH`` of
    ``env`` (of this process without one), stdin is inherited unless ``input_text`` is given, SIGPIPE and SIGXFSZ are
    at their default in the program, a program killed by a signal returns ``-signal``, output is decoded as UTF-8
    with universal newlines (undecodable bytes replaced)."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout

    def __call__(
        self, argv: Sequence[str], *, input_text: str | None = None, env: Mapping[str, str] | None = None
    ) -> tuple[int, str, str]:
        if not argv:
            raise ValueError("empty argv")
        import os

        environ = os.environ if env is None else env
        path = _find_program(argv[0], environ)
        if path is None or not os.path.exists(path):
            return RC_NOT_FOUND, "", f"{argv[0]}: No such file or directory"
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if input_text is not None else (-1, -1)
        actions: list[tuple[int, ...]] = [(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
        if in_r >= 0:
            actions.append((os.POSIX_SPAWN_DUP2, in_r, 0))
        # no descriptor of this process past stderr reaches the program (subprocess's close_fds): Python's own are
        # not inheritable; those this process inherited as inheritable are closed in the child
        closefrom = getattr(os, "POSIX_SPAWN_CLOSEFROM", None)  # Python 3.13
        if closefrom is not None:
            actions.append((closefrom, 3))
        else:
            actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds()]
        try:
            pid = os.posix_spawn(path, list(argv), dict(environ), file_actions=actions, setsigdef=_DEFAULT_SIGNALS)
        except OSError as exc:
            for fd in (out_r, err_r, in_w):
                if fd >= 0:
                    os.close(fd)
            if isinstance(exc, FileNotFoundError):  # gone since the lookup, or its #! interpreter is missing
                return RC_NOT_FOUND, "", f"{argv[0]}: {exc.strerror}"
            raise
        finally:
            for fd in (out_w, err_w, in_r):
                if fd >= 0:
                    os.close(fd)
        data = (input_text or "").encode() if in_w >= 0 else b""
        out, err, timed_out = _exchange(out_r, err_r, in_w, data, self.timeout)
        if timed_out:
            os.kill(pid, 9)  # SIGKILL, as subprocess.run does on its timeout (no import of signal for a constant)
        _pid, status = os.waitpid(pid, 0)
        if timed_out:
            return RC_TIMEOUT, "", f"{argv[0]}: timed out after {self.timeout:g} s"
        return os.waitstatus_to_exitcode(status), _text(out), _text(err)


def _inheritable_fds() -> list[int]:
    """This process's inheritable descriptors past stderr (from ``/proc/self/fd``; none where it cannot be read)."""
    import os

    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    fds = []
    for name in names:
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                fds.append(fd)
        except OSError:  # the descriptor of the listing itself, closed by now
            continue
    return fds


def _find_program(name: str, environ: Mapping[str, str]) -> str | None:
    """``name`` itself when it holds a ``/``, else the first executable file of that name on ``environ``'s PATH."""
    import os

    if "/" in name:
        return name
    for directory in os.get_exec_path(environ):
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _exchange(out_r: int, err_r: int, in_w: int, data: bytes, timeout: float) -> tuple[bytes, bytes, bool]:
    """Write ``data`` to ``in_w`` (then close it) while reading ``out_r`` and ``err_r`` to their end, until
    ``timeout`` seconds have passed. Closes the three descriptors; returns stdout, stderr and whether time ran out."""
    import os
    import select
    import time

    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    poller = select.poll()
    for fd in chunks:
        poller.register(fd, select.POLLIN)
    if in_w >= 0:
        if data:
            poller.register(in_w, select.POLLOUT)
        else:
            os.close(in_w)
            in_w = -1
    open_fds = len(chunks) + (in_w >= 0)
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for fd, _event in poller.poll(left * 1000):
                if fd == in_w:
                    try:
                        data = data[os.write(in_w, data[:65536]) :]
                    except BrokenPipeError:
                        data = b""
                    if not data:
                        poller.unregister(in_w)
                        os.close(in_w)
                        in_w, open_fds = -1, open_fds - 1
                    continue
                block = os.read(fd, 65536)
                if block:
                    chunks[fd].append(block)
                else:
                    poller.unregister(fd)
                    open_fds -= 1
    finally:
        for fd in (out_r, err_r, in_w):
            if fd >= 0:
                os.close(fd)
    return b"".join(chunks[out_r]), b"".join(chunks[err_r]), timed_out


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def spawn(argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Start a long-lived child (a session's app) and return at once: argv, never a shell; ``env`` is its whole
    environment (default: this process's)."""
    if not argv:
        raise ValueError("empty argv")
    import subprocess

    return subprocess.Popen(list(argv), env=dict(env) if env is not None else None, cwd=cwd)
