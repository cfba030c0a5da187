# SPDX-License-Identifier: GPL-3.0-or-later
"""What ``carme-launch`` tells others about a session: the connection file for its user
(``~/.carme/sessions/<jobid>.json``, 0600 in a 0700 directory, never the session secret) and the job comment for the
portal (``scontrol update ... Comment=carme:v1;app=..;host=..;port=..;state=ready``; every user sees it in
``squeue``, so it holds no secret either)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from typing import TYPE_CHECKING

from carme_runtime.exit_codes import ExitCode
from carme_runtime.launch_plan import LaunchError
from carme_runtime.slurm_formats import format_comment

if TYPE_CHECKING:
    from carme_runtime.apps import AppSpec


def connection_info(
    app: AppSpec, job_id: int, host: str, port: int, app_key: str, app_port: int | None = None, app_socket: str = ""
) -> dict[str, object]:
    """What the connection file holds: where the session is, and the app secret ``app_key`` (the user's token or
    code-server password); never the session secret, from which the front key is derived."""
    return {
        "app_socket": app_socket,
        "isolation": app.isolation,
        "job_id": job_id,
        "app": app.name,
        "host": host,
        "port": port,
        # a socket app has no TCP port at all
        "app_port": None if app.isolation == "socket" else (app_port if app_port is not None else port),
        "base_url": app.base_url(job_id),
        "app_secret": app_key,
        "secret_mode": app.secret_mode,
    }


def write_connection_file(home: str, job_id: int, info: Mapping[str, object]) -> str:
    """Write ``<home>/.carme/sessions/<jobid>.json`` with mode 0600, directories 0700; return the path.

    Written to a temporary file then renamed, with ``O_NOFOLLOW``/``O_EXCL`` so a planted symlink cannot
    redirect it; modes are set explicitly (the umask does not matter).
    """
    base = os.path.join(home, ".carme")
    sessions = os.path.join(base, "sessions")
    for directory in (base, sessions):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.lstat(directory)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise LaunchError(ExitCode.ERROR, f"{directory} is not a real directory")
        os.chmod(directory, 0o700)
    path = os.path.join(sessions, f"{job_id}.json")
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (json.dumps(dict(info), indent=2, sort_keys=True) + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def published_comment(app: AppSpec, host: str, port: int, state: str, reason: str = "") -> str:
    if reason:
        return format_comment(app=app.name, host=host, port=port, state=state, reason=reason)
    return format_comment(app=app.name, host=host, port=port, state=state)


def publish_argv(job_id: int, comment: str) -> list[str]:
    """The job comment the portal reads, and requeue off: a session on a lost node ends (NODE_FAIL) rather than
    start again later, elsewhere, behind its user's back. The submission asks for that too (``requeue: false``,
    ``--no-requeue``), but slurmrestd 22.05 ignores the key (measured on the demo: Requeue=1 whatever its value);
    a job's owner may set it on the running job, in the same call."""
    return ["scontrol", "update", f"JobId={job_id}", "Requeue=0", f"Comment={comment}"]
