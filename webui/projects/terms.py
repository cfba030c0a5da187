# SPDX-License-Identifier: GPL-3.0-or-later
"""A project's terms (issue 31): its owner (PI) and its end date, the last day (UTC) it takes jobs; none: open-ended.

A project the portal made keeps them in the portal's table (:class:`webui.projects.models.ProjectTerms`); one the
inventory declares has them in the inventory (``carme_webui_project_terms``, config.py's ``PROJECT_TERMS``:
``{"account": {"pi": "alice", "end_date": "2027-06-30"}}``). After the end date Slurm takes no new job in the account
(``GrpSubmitJobs=0``): for a portal project the tick sets it (:func:`expire`, once, audited; the notifications' check
then tells its managers); for an inventory project the slurm role's accounting does at the next deploy. The start form
refuses a session in an ended project either way (:func:`webui.projects.service.session_account`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flask import current_app
from sqlalchemy import select

from webui.auth.audit import audit
from webui.extensions import db
from webui.models import utcnow
from webui.projects import accounting
from webui.projects.models import ProjectTerms
from webui.slurm.errors import SlurmError
from webui.slurm.records import SlurmProject
from webui.slurm.scheduler import current_scheduler

log = logging.getLogger(__name__)


def today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


@dataclass(frozen=True)
class Terms:
    pi: str
    end_date: dt.date | None  # the last day (UTC) the project takes jobs; None: open-ended

    def ended(self, on: dt.date | None = None) -> bool:
        return self.end_date is not None and (on or today()) > self.end_date

    @property
    def end_text(self) -> str:
        return self.end_date.isoformat() if self.end_date else "open-ended"


def terms_of(project: SlurmProject) -> Terms | None:
    """The project's terms from whichever source owns it; None where it has none (made before terms existed)."""
    if project.source == "portal":
        row = db.session.get(ProjectTerms, project.name)
        return None if row is None else Terms(row.pi, row.end_date)
    return inventory_terms(current_app.config.get("PROJECT_TERMS") or {}).get(project.name)


def inventory_terms(raw: Mapping[str, Any]) -> dict[str, Terms]:
    """``PROJECT_TERMS`` read leniently: an entry with a bad end date is logged and left out."""
    out = {}
    for name, entry in raw.items():
        try:
            end = str(entry.get("end_date") or "")
            out[str(name)] = Terms(str(entry.get("pi") or ""), dt.date.fromisoformat(end) if end else None)
        except (AttributeError, ValueError):
            log.warning("PROJECT_TERMS: ignoring the entry of %s: %r", name, entry)
    return out


def store(name: str, pi: str, end_date: dt.date | None) -> None:
    """A new portal project's terms (uncommitted: committed with its audit record)."""
    db.session.merge(ProjectTerms(account=name, pi=pi, end_date=end_date, ended_at=None))


def expire(on: dt.date | None = None) -> int:
    """The tick's task: each portal project past its end date gets ``GrpSubmitJobs=0`` once (audited); how many
    were ended now. A project whose account is gone or not the portal's is left alone; one that Slurm refuses is
    tried again at the next tick (and the task fails, after the others)."""
    day = on or today()
    due = select(ProjectTerms).where(ProjectTerms.end_date < day, ProjectTerms.ended_at.is_(None))
    rows = list(db.session.scalars(due))
    if not rows:
        return 0
    projects = {p.name: p for p in current_scheduler().projects(max_age=0) if p.source == "portal"}
    ended, refused = 0, []
    for row in rows:
        project = projects.get(row.account)
        if project is None:
            continue
        try:
            _end(project, row)
            ended += 1
        except SlurmError as exc:
            db.session.rollback()
            refused.append(f"{row.account}: {exc}")
    if refused:
        raise SlurmError(f"ended {ended}; Slurm refused " + "; ".join(refused))
    return ended


def _end(project: SlurmProject, row: ProjectTerms) -> None:
    accounting.backend().sacctmgr(accounting.submit_argv(project.name, 0))
    row.ended_at = utcnow()
    end = row.end_date.isoformat() if row.end_date else ""
    audit("project.end", project.name, end_date=end)
    db.session.commit()


def ended_accounts() -> dict[str, str]:
    """The portal's projects the tick has ended, with their end dates (the notifications' check tells managers)."""
    rows = db.session.scalars(select(ProjectTerms).where(ProjectTerms.ended_at.is_not(None)))
    return {row.account: row.end_date.isoformat() if row.end_date else "" for row in rows}
