# SPDX-License-Identifier: GPL-3.0-or-later
"""The rows of the history page: the user's portal sessions (newest first, paged) and their other jobs from Slurm's
accounting (the last :data:`HISTORY_DAYS` days), each with its state in words, start, elapsed time and GPU-hours."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from dataclasses import field

from sqlalchemy import func
from sqlalchemy import select

from carme_runtime.slurm_formats import ENDED_STATES
from webui.extensions import db
from webui.history.archives import user_archives
from webui.history.reasons import reason_words
from webui.models import PortalSession
from webui.models import utcnow
from webui.sessions.catalog import app_spec
from webui.sessions.records import end_reason
from webui.slurm.errors import SlurmError
from webui.slurm.records import AccountJob
from webui.slurm.scheduler import current_scheduler

PAGE_SIZE = 25
#: how far back the history asks Slurm's accounting
HISTORY_DAYS = 30

_ACTIVE_WORDS = {"RUNNING": "Running", "PENDING": "Waiting for resources", "REQUEUED": "Waiting for resources"}


@dataclass(frozen=True)
class Entry:
    job_id: int
    title: str  # the app's title, or the job's name
    state: str  # in words
    started: dt.datetime | None
    elapsed: int | None  # seconds
    gpu_hours: float | None


@dataclass(frozen=True)
class History:
    sessions: list[Entry]
    jobs: list[Entry]  # the user's jobs that are no portal session
    page: int
    pages: int
    error: str | None  # Slurm's accounting could not be read
    archives: list[tuple[str, list[Entry]]] = field(default_factory=list)  # (label, the user's jobs) before an upgrade
    archive_errors: list[str] = field(default_factory=list)  # an archive that cannot be read


def since() -> dt.datetime:
    return utcnow() - dt.timedelta(days=HISTORY_DAYS)


def accounting(username: str) -> tuple[list[AccountJob], str | None]:
    """The user's jobs of the last :data:`HISTORY_DAYS` days, and Slurm's error when it could not say."""
    try:
        return current_scheduler().job_history(username, since()), None
    except SlurmError as exc:
        return [], str(exc)


def history(username: str, page: int) -> History:
    total = db.session.execute(select(func.count()).where(PortalSession.owner == username)).scalar_one()
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(max(1, page), pages)
    stmt = (
        select(PortalSession)
        .where(PortalSession.owner == username)
        .order_by(PortalSession.created_at.desc(), PortalSession.job_id.desc())
        .limit(PAGE_SIZE)
        .offset((page - 1) * PAGE_SIZE)
    )
    records = list(db.session.execute(stmt).scalars())
    jobs, error = accounting(username)
    by_id = {j.job_id: j for j in jobs}
    _learn_end_reasons(records, by_id)
    portal_ids = _portal_job_ids(username, list(by_id))
    archived, archive_errors = user_archives(username)
    return History(
        sessions=[_session_entry(ps, by_id.get(ps.job_id)) for ps in records],
        jobs=[_job_entry(j) for j in jobs if j.job_id not in portal_ids],
        page=page,
        pages=pages,
        error=error,
        archives=[(a.label, [_job_entry(j) for j in a.jobs]) for a in archived],
        archive_errors=archive_errors,
    )


def _portal_job_ids(username: str, job_ids: list[int]) -> set[int]:
    if not job_ids:
        return set()
    stmt = select(PortalSession.job_id).where(PortalSession.owner == username, PortalSession.job_id.in_(job_ids))
    return set(db.session.execute(stmt).scalars())


def _learn_end_reasons(records: list[PortalSession], by_id: dict[int, AccountJob]) -> None:
    """Sessions that ended while Slurm had already forgotten their job ("unknown") learn why from the accounting."""
    changed = False
    for ps in records:
        job = by_id.get(ps.job_id)
        unknown = ps.ended_at is not None and ps.end_reason in (None, "unknown")
        if unknown and job is not None and job.state in ENDED_STATES:
            ps.end_reason = end_reason(job.state, job.comment)
            changed = True
    if changed:
        db.session.commit()


def _session_entry(ps: PortalSession, job: AccountJob | None) -> Entry:
    spec = app_spec(ps.app)
    if ps.ended_at is None:
        state = _ACTIVE_WORDS.get(job.state, "Active") if job is not None else "Active"
    else:
        state = reason_words(ps.end_reason, ps.stopped_by, ps.stop_note)
    started = _when(job.start_time) if job is not None and job.start_time else ps.created_at
    if job is not None:
        elapsed: int | None = job.elapsed
    else:
        elapsed = int(((ps.ended_at or utcnow()) - ps.created_at).total_seconds())
    return Entry(
        job_id=ps.job_id,
        title=spec.title if spec is not None else ps.app,
        state=state,
        started=started,
        elapsed=elapsed,
        gpu_hours=job.gpu_hours if job is not None else None,
    )


def _job_entry(job: AccountJob) -> Entry:
    if job.state in ENDED_STATES:
        reason = end_reason(job.state, job.comment)
        state = "Failed" if reason == "failed" else reason_words(reason)  # a batch job's failure is not its start's
    else:
        state = _ACTIVE_WORDS.get(job.state, job.state.capitalize())
    return Entry(
        job_id=job.job_id,
        title=job.name,
        state=state,
        started=_when(job.start_time) if job.start_time else None,
        elapsed=job.elapsed,
        gpu_hours=job.gpu_hours,
    )


def _when(epoch: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)
