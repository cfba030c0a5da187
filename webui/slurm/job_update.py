# SPDX-License-Identifier: GPL-3.0-or-later
"""Change a job's time limit in Slurm (slurmrestd ``POST /slurm/<version>/job/<id>``, body: the job properties to
change, :meth:`SlurmClient.update_job`). Only an Operator or Administrator of Slurm may raise a time limit, never the
job's own user, so the portal asks as its Slurm admin identity (``SLURM_ADMIN_USER``), after checking the owner and
the user's limit itself (:mod:`webui.sessions.extend`)."""

from __future__ import annotations

from typing import Any

from webui.slurm.client import SlurmClient


def update_time_limit(client: SlurmClient, job_id: int, new_limit_minutes: int, *, as_user: str) -> None:
    """Set job ``job_id``'s time limit to ``new_limit_minutes`` (the whole limit, not an addition)."""
    client.update_job(as_user, job_id, {"time_limit": int(new_limit_minutes)})


def extend(scheduler: Any, job_id: int, new_limit_minutes: int, *, as_user: str) -> None:
    """The scheduler's ``extend`` where it has one (a test's fake, or the wired ``SlurmScheduler.extend``), else
    slurmrestd through the scheduler's client; the cached state is dropped so the dashboard shows the new limit."""
    method = getattr(scheduler, "extend", None)
    if callable(method):
        method(job_id, new_limit_minutes)
        return
    update_time_limit(scheduler.client, job_id, new_limit_minutes, as_user=as_user)
    scheduler.cache.invalidate()
