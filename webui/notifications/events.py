# SPDX-License-Identifier: GPL-3.0-or-later
"""What each notification says, and to whom: one function per event, each recording it once (uncommitted)."""

from __future__ import annotations

from typing import Any

from webui.models import AllocationRequest
from webui.models import PortalSession
from webui.notifications.service import record
from webui.projects.service import ProjectView
from webui.sessions.catalog import app_spec
from webui.slurm.records import SlurmProject

#: the budget thresholds, in per cent of a project's monthly GPU budget
BUDGET_THRESHOLDS = (80, 100)


def _what(ps: PortalSession) -> str:
    spec = app_spec(ps.app)
    return f"session {ps.job_id} ({spec.title if spec is not None else ps.app})"


def session_ready(ps: PortalSession) -> int:
    title = f"Your {_what(ps)} is ready"
    return record("session_ready", f"session_ready:{ps.job_id}", [ps.owner], title, "Connect from the dashboard.", "/")


def session_failed(ps: PortalSession, reason: str) -> int:
    title = f"Your {_what(ps)} failed"
    body = f"Why: {reason}." if reason else "See the session's output file on the History page."
    return record("session_failed", f"session_failed:{ps.job_id}", [ps.owner], title, body, "/history/")


def session_ending(ps: PortalSession, view: dict[str, Any]) -> int:
    minutes = max(1, round(int(view["seconds_left"]) / 60))
    title = f"Your {_what(ps)} ends in {minutes} minutes"
    body = f"It reaches its time limit at {view['ends_at']}; save your work." if view.get("ends_at") else ""
    return record("session_ending", f"session_ending:{ps.job_id}", [ps.owner], title, body, "/")


def budget_reached(view: ProjectView, month: str) -> int:
    """The project's managers and members are told once per month at each threshold its use has reached."""
    budget, used = view.budget_gpu_hours, view.used_gpu_hours
    if not budget or used is None:
        return 0
    name = view.project.name
    people = {*view.project.managers, *view.project.members}
    body = f"{used:.2f} of {budget:.2f} GPU-hours used in {month}."
    added = 0
    for threshold in BUDGET_THRESHOLDS:
        if used < budget * threshold / 100:
            continue
        if threshold >= 100:
            title = f"Project {name} has used its GPU budget for {month}"
            text = body + " Slurm holds the project's GPU jobs until the budget is raised or the month ends."
        else:
            title, text = f"Project {name} has used {threshold} % of its GPU budget for {month}", body
        kind = f"budget_{threshold}"
        added += record(kind, f"budget:{name}:{month}:{threshold}", people, title, text, "/projects/")
    return added


def allocation_decided(row: AllocationRequest) -> int:
    """The requester learns the decision on their allocation request."""
    title = f"Your allocation request for {row.project} was {row.status}"
    body = f"{row.gpu_hours} GPU-hours per month. {row.reason}".strip()
    return record("allocation_decided", f"allocation:{row.id}", [row.username], title, body, "/projects/")


def project_ended(project: SlurmProject, end_date: str) -> int:
    """The project's managers learn that it has ended: Slurm takes no new job in it."""
    title = f"Project {project.name} has ended"
    body = f"Its end date was {end_date}: Slurm takes no new job in it."
    return record("project_ended", f"project_ended:{project.name}", project.managers, title, body, "/projects/")
