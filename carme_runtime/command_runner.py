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
# (about 11 ms saved); ``subprocess`` is imported when a command actually runs.
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


class SubprocessRunner:
    """Run argv with :func:`subprocess.run`, no shell, with a timeout; never raises for a failing command."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout

    def __call__(
        self, argv: Sequence[str], *, input_text: str | None = None, env: Mapping[str, str] | None = None
    ) -> tuple[int, str, str]:
        if not argv:
            raise ValueError("empty argv")
        import subprocess

        try:
            proc = subprocess.run(
                list(argv),
                input=input_text,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env=dict(env) if env is not None else None,
                check=False,
            )
        except FileNotFoundError as exc:
            return RC_NOT_FOUND, "", f"{argv[0]}: {exc.strerror}"
        except subprocess.TimeoutExpired:
            return RC_TIMEOUT, "", f"{argv[0]}: timed out after {self.timeout:g} s"
        return proc.returncode, proc.stdout, proc.stderr


def spawn(argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Start a long-lived child (a session's app) and return at once: argv, never a shell; ``env`` is its whole
    environment (default: this process's)."""
    if not argv:
        raise ValueError("empty argv")
    import subprocess

    return subprocess.Popen(list(argv), env=dict(env) if env is not None else None, cwd=cwd)
