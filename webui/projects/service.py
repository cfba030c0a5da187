# SPDX-License-Identifier: GPL-3.0-or-later
"""What a member, a manager and an administrator see of the projects (Slurm accounts), and a project's report.

GPU-hours follow the one rule (:func:`carme_runtime.gpu_hours.gpu_hours_within`): a job's GPUs times the seconds
it ran inside the month, as ``carme-quota report`` counts them and as Slurm charges a budget it resets monthly.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from carme_runtime.gpu_hours import month_bounds
from webui.auth.logins import CurrentUser
from webui.extensions import db
from webui.forms import FieldError
from webui.models import PortalSession
from webui.projects.terms import Terms
from webui.projects.terms import terms_of
from webui.slurm.errors import SlurmError
from webui.slurm.records import AccountJob
from webui.slurm.records import SlurmProject
from webui.slurm.scheduler import current_scheduler


@dataclass(frozen=True)
class ProjectView:
    project: SlurmProject
    used_gpu_hours: float | None  # this month, every member; None: Slurm cannot say
    can_report: bool
    terms: Terms | None = None  # its owner (PI) and end date; None: none recorded

    @property
    def budget_gpu_hours(self) -> float | None:
        return None if self.project.gpu_minutes is None else self.project.gpu_minutes / 60.0

    @property
    def spent(self) -> bool:
        """The GPU budget for this month is used up (Slurm holds the project's GPU jobs: AssocGrpGRESMinutes)."""
        budget, used = self.budget_gpu_hours, self.used_gpu_hours
        return budget is not None and used is not None and used >= budget

    @property
    def percent(self) -> int | None:
        budget, used = self.budget_gpu_hours, self.used_gpu_hours
        return None if used is None or not budget else min(100, round(100 * used / budget))


@dataclass(frozen=True)
class MemberUse:
    user: str
    jobs: int
    gpu_hours: float


@dataclass(frozen=True)
class Report:
    project: SlurmProject
    month: str
    jobs: list[AccountJob]
    #: the jobs among them that are the portal's sessions (its own records)
    portal_jobs: frozenset[int] = frozenset()

    def source(self, job: AccountJob) -> str:
        """``portal`` for one of the portal's sessions (its records, else the launcher's comment where the accounting
        keeps comments), else ``sbatch``."""
        return "portal" if job.job_id in self.portal_jobs or job.comment.startswith("carme:") else "sbatch"

    @property
    def by_member(self) -> list[MemberUse]:
        users = sorted({j.user for j in self.jobs} | set(self.project.members))
        return [
            MemberUse(u, sum(1 for j in self.jobs if j.user == u), sum(j.gpu_hours for j in self.jobs if j.user == u))
            for u in users
        ]

    @property
    def total_gpu_hours(self) -> float:
        return sum(j.gpu_hours for j in self.jobs)


def this_month(now: dt.datetime | None = None) -> str:
    return (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m")


def parse_month(value: str | None) -> str:
    """``YYYY-MM`` (default: this month, UTC) or a 400 naming the field."""
    month = (value or "").strip() or this_month()
    try:
        month_bounds(month, dt.UTC)
    except ValueError:
        raise FieldError("month", "must be a month as YYYY-MM") from None
    return month


def may_report(user: CurrentUser, project: SlurmProject) -> bool:
    return user.is_admin or user.username in project.managers


def visible_projects(user: CurrentUser, month: str | None = None) -> list[ProjectView]:
    """The projects ``user`` belongs to or manages (every project for an administrator), with this month's use.
    :class:`webui.slurm.errors.SlurmError` when Slurm cannot say which."""
    month = month or this_month()
    views = []
    for project in current_scheduler().projects():
        if user.is_admin or user.username in project.members or user.username in project.managers:
            views.append(ProjectView(project, _used(project.name, month), may_report(user, project), terms_of(project)))
    return views


def _used(account: str, month: str) -> float | None:
    try:
        return sum(j.gpu_hours for j in _jobs(account, month))
    except SlurmError:
        return None


def _jobs(account: str, month: str) -> list[AccountJob]:
    lo, hi = month_bounds(month, dt.UTC)
    since, until = dt.datetime.fromtimestamp(lo, dt.UTC), dt.datetime.fromtimestamp(hi, dt.UTC)
    return current_scheduler().project_jobs(account, since, until)


#: a project missing from this worker's list is looked for again in one at most this old (made a moment ago)
RECHECK_SECONDS = 2.0


def find_project(name: str) -> SlurmProject | None:
    found = next((p for p in current_scheduler().projects() if p.name == name), None)
    if found is None:
        found = next((p for p in current_scheduler().projects(max_age=RECHECK_SECONDS) if p.name == name), None)
    return found


def project_report(project: SlurmProject, month: str) -> Report:
    jobs = _jobs(project.name, month)
    ids = [j.job_id for j in jobs] or [-1]
    ours: list[int] = list(db.session.scalars(select(PortalSession.job_id).where(PortalSession.job_id.in_(ids))))
    return Report(project, month, jobs, frozenset(ours))


CSV_COLUMNS = ("job_id", "user", "name", "source", "state", "start_utc", "end_utc", "gpus", "gpu_hours")


def utc_text(epoch: int) -> str:
    """An epoch as ``YYYY-MM-DDTHH:MM:SSZ``; "" for 0 (not started, still running)."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if epoch else ""


def report_csv(report: Report) -> str:
    """One row per job (GPU-hours inside the month, 6 decimals); a cell that a spreadsheet would run as a formula is
    prefixed with ``'``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for j in report.jobs:
        when = (utc_text(j.start_time), utc_text(j.end_time))
        row = [j.job_id, j.user, j.name, report.source(j), j.state, *when, j.gpus]
        writer.writerow([*(_cell(v) for v in row), f"{j.gpu_hours:.6f}"])
    return out.getvalue()


def _cell(value: object) -> str:
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def member_projects(username: str) -> list[ProjectView]:
    """The projects a session of ``username`` may be charged to (their associations), with this month's use; [] when
    Slurm cannot say (the start form then offers the default account only)."""
    try:
        return _member_views(username)
    except SlurmError:
        return []


def _member_views(username: str) -> list[ProjectView]:
    mine = [p for p in current_scheduler().projects() if username in p.members]
    month = this_month()
    return [ProjectView(p, _used(p.name, month), False, terms_of(p)) for p in mine]


def session_account(username: str, form: Mapping[str, Any], gpus: int) -> str | None:
    """The account a session is charged to: the form's ``project`` (one of the user's projects, else a 400 naming
    it), or ``None`` (the user's default account). A GPU session in a project whose budget is used up is refused
    with the reason: Slurm would hold it until the month ends."""
    name = str(form.get("project") or "").strip()
    if not name:
        return None
    try:
        views = {v.project.name: v for v in _member_views(username)}
    except SlurmError:
        raise FieldError("project", "cannot be checked with Slurm right now; try again in a minute") from None
    view = views.get(name)
    if view is None:
        raise FieldError("project", "is not one of your projects")
    if view.terms is not None and view.terms.ended():
        raise FieldError("project", f"{name} ended on {view.terms.end_text}: Slurm takes no new job in it")
    if gpus > 0 and view.spent:
        managers = ", ".join(view.project.managers) or "an administrator"
        raise FieldError(
            "project",
            f"{name} has used its GPU budget for this month ({view.used_gpu_hours:.2f} of "
            f"{view.budget_gpu_hours:.2f} GPU-hours): Slurm would hold a GPU session until the budget is raised; "
            f"start a CPU-only session or ask {managers}",
        )
    return name
