# SPDX-License-Identifier: GPL-3.0-or-later
"""Session submission with ``sbatch`` for the tests: the runtime builds the argv and the job environment
(:func:`carme_runtime.sessions.build_sbatch_argv`, :func:`~carme_runtime.sessions.build_job_environment`); this
runs them the way a submitter must (the constant script on stdin, the secret only in sbatch's environment).

The portal submits through slurmrestd (:func:`carme_runtime.sessions.build_rest_payload`); the host tests use this
sbatch path as a user, so it lives here rather than in the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from carme_runtime.sessions import JOB_SCRIPT
from carme_runtime.sessions import SessionLimits
from carme_runtime.sessions import SessionRequest
from carme_runtime.sessions import build_job_environment
from carme_runtime.sessions import build_sbatch_argv

if TYPE_CHECKING:
    from carme_runtime.apps import AppSpec
    from carme_runtime.command_runner import Runner


def parse_sbatch_parsable(stdout: str) -> int:
    """``sbatch --parsable`` prints ``<jobid>`` or ``<jobid>;<cluster>``."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    job_id = first.split(";")[0]
    if not job_id.isdigit():
        raise ValueError(f"unexpected sbatch output: {stdout[:80]!r}")
    return int(job_id)


def submit_with_sbatch(
    req: SessionRequest,
    app: AppSpec,
    runtime: str,
    secret: str,
    runner: Runner,
    limits: SessionLimits | None = None,
) -> int:
    """Validate, then run sbatch (argv, script on stdin, environment with the secret); return the job id."""
    req.validate(limits)
    argv = build_sbatch_argv(req, app, runtime)
    env = build_job_environment(req, app, runtime, secret)
    rc, out, err = runner(argv, input_text=JOB_SCRIPT, env=env)
    if rc != 0:
        raise RuntimeError(f"sbatch failed (rc={rc}): {err.strip()[:200]}")
    return parse_sbatch_parsable(out)
