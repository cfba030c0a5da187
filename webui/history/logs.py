# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a session's or job's output file is, and reading it as its owner.

The portal runs as its own system user and cannot read users' homes. It reads a log by running ``carme-read-log``
(carme_runtime/read_log.py) as the job's owner through sudo (``sudo -n -u OWNER carme-read-log``; the only command
the portal may run so, roles/carme_webui ``log_reader.yml``): a log is read with exactly its owner's rights.
Tests plug in their own reader (``LOG_READER``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Protocol

from flask import current_app

from carme_runtime.exit_codes import ExitCode
from webui.slurm.records import AccountJob

#: Slurm's filename patterns the portal fills in (sbatch(1) "filename pattern"); a path with any other is not guessed
_PATTERN = re.compile(r"%(.)")


class LogMissing(Exception):
    """There is no such file."""


class LogRefused(Exception):
    """The reader will not read it: not a regular file, a link, unreadable by its owner, or an owner it refuses."""


class LogUnavailable(Exception):
    """The reader could not be run (sudo or the rule missing, a timeout)."""


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


class SudoLogReader:
    """``sudo -n -u OWNER COMMAND --tail-bytes N -- PATH``."""

    def __init__(self, command: str, *, sudo: str = "/usr/bin/sudo", timeout: float = 10.0) -> None:
        self.command = command
        self.sudo = sudo
        self.timeout = timeout

    def read(self, owner: str, path: str, max_bytes: int) -> bytes:
        if not owner or owner.startswith(("-", "#")) or owner == "root":
            raise LogRefused(owner)
        argv = [self.sudo, "-n", "-u", owner, self.command, "--tail-bytes", str(max_bytes), "--", path]
        try:
            proc = subprocess.run(
                argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=self.timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LogUnavailable(str(exc)) from exc
        if proc.returncode == ExitCode.OK:
            return proc.stdout
        if proc.returncode == ExitCode.LOG_MISSING:
            raise LogMissing(path)
        if proc.returncode == ExitCode.LOG_REFUSED:
            raise LogRefused(path)
        raise LogUnavailable(proc.stderr.decode("utf-8", "replace").strip() or f"exit status {proc.returncode}")


def default_command() -> str:
    """``carme-read-log`` next to the portal's Python (the portal's virtualenv, where its wheel put the script)."""
    return os.path.join(os.path.dirname(sys.executable), "carme-read-log")


def current_log_reader() -> LogReader:
    """``LOG_READER`` (tests), else :class:`SudoLogReader` of ``LOG_READER_COMMAND`` (or :func:`default_command`)."""
    reader: LogReader | None = current_app.config.get("LOG_READER")
    if reader is not None:
        return reader
    return SudoLogReader(str(current_app.config.get("LOG_READER_COMMAND") or default_command()))
