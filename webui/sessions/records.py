# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's rows of its sessions (``PortalSession``: owner, app, secret) and what they count."""

from __future__ import annotations

import datetime as dt
import os
import re

from flask import current_app
from sqlalchemy import bindparam
from sqlalchemy import select
from werkzeug.exceptions import BadRequest

from carme_runtime.slurm_formats import parse_comment
from webui.extensions import db
from webui.models import PortalSession
from webui.models import utcnow
from webui.slurm.state import ClusterState
from webui.slurm.state import Job

#: a session whose launcher gave up stays on its owner's dashboard this long after it ended (with the reason), while
#: Slurm still lists its job (MinJobAge); other ended sessions leave at once
FAILED_SHOWN_SECONDS = 600

#: MariaDB's DATETIME keeps whole seconds: a ``created_at`` read back is up to 1 s off the moment it was taken (the
#: concurrent-start bench lost 2 of 6 sessions to this: a snapshot begun before their submission, but after the
#: truncated ``created_at``, did not list their jobs, and the sessions were ended while Slurm ran them)
CREATED_AT_PRECISION_S = 1.0

#: a Slurm job id as the portal's URLs carry it: ASCII digits only (str.isdigit() also takes "²", which int() refuses,
#: and other scripts' digits, which int() reads)
JOB_ID = re.compile(r"[0-9]{1,12}")

_OPEN_SESSIONS_OF = (
    select(PortalSession)
    .where(
        PortalSession.owner == bindparam("owner"),
        PortalSession.ended_at.is_(None) | (PortalSession.ended_at >= bindparam("since")),
    )
    .order_by(PortalSession.created_at.desc())
)

#: Slurm's final job state -> end reason (a state not listed here: "unknown")
_BY_STATE = {
    "COMPLETED": "completed",
    "TIMEOUT": "time_limit",
    "DEADLINE": "time_limit",
    "NODE_FAIL": "node_failure",
    "BOOT_FAIL": "node_failure",
    "FAILED": "failed",
    "OUT_OF_MEMORY": "out_of_memory",
    "CANCELLED": "cancelled",
    "PREEMPTED": "preempted",
}


def parse_job_id(raw: str) -> int:
    if not JOB_ID.fullmatch(raw):
        raise BadRequest("job_id: must be a number")
    return int(raw)


def proxy_path(job_id: int) -> str:
    return f"/proxy/{job_id}/"


def get_portal_session(job_id: int) -> PortalSession | None:
    return db.session.execute(select(PortalSession).where(PortalSession.job_id == job_id)).scalar_one_or_none()


def open_sessions() -> list[PortalSession]:
    """Every session not ended yet, newest first (the admin's overview)."""
    stmt = select(PortalSession).where(PortalSession.ended_at.is_(None)).order_by(PortalSession.created_at.desc())
    return list(db.session.execute(stmt).scalars())


def my_portal_sessions(username: str) -> list[PortalSession]:
    """The user's open sessions, and those ended in the last ``FAILED_SHOWN_SECONDS`` (shown only if they failed)."""
    since = utcnow() - dt.timedelta(seconds=FAILED_SHOWN_SECONDS)
    return list(db.session.execute(_OPEN_SESSIONS_OF, {"owner": username, "since": since}).scalars())


def job_of(state: ClusterState, job_id: int, owner: str) -> Job | None:
    """Job ``job_id`` in ``state`` if it is still the session's (``owner``'s): a recycled job id is not."""
    job = state.job(job_id)
    return job if job is not None and job.user == owner else None


def not_yet_listed(ps: PortalSession, state: ClusterState) -> bool:
    """``state`` was asked for before the session was recorded: its job is not missing from it, just not in it yet
    (ending the session then wiped its secret while Slurm ran it, seen under concurrent starts)."""
    return state.fetched_at < ps.created_at.timestamp() + CREATED_AT_PRECISION_S


def active_sessions(username: str, state: ClusterState) -> list[PortalSession]:
    """The user's sessions whose jobs are active in ``state``, and those recorded too late to be in it (another
    worker's start that finished meanwhile: :func:`not_yet_listed`)."""

    def counts(ps: PortalSession) -> bool:
        job = state.job(ps.job_id)
        if job is not None:
            return job.active
        return ps.ended_at is None and not_yet_listed(ps, state)

    return [ps for ps in my_portal_sessions(username) if counts(ps)]


def end_reason(state: str, comment: str) -> str:
    """The end reason of a job that ended in ``state``: a launcher that gave up (``state=failed`` in its comment:
    ``reason=image`` is an image it refused, carme_runtime.launch) first, else Slurm's state."""
    fields = parse_comment(comment or "") or {}
    if fields.get("state") == "failed":
        return "image_refused" if fields.get("reason") == "image" else "failed"
    return _BY_STATE.get(state.upper(), "unknown")


def session_log_path(record: PortalSession) -> str:
    """The session's standard output: as carme_runtime.sessions.output_path names it (``workdir/carme-<app>-%j.out``,
    the workdir from ``SESSION_WORKDIR_TEMPLATE``), unless one is recorded."""
    if record.log_path:
        return record.log_path
    workdir = str(current_app.config["SESSION_WORKDIR_TEMPLATE"]).format(user=record.owner)
    return os.path.join(workdir, f"carme-{record.app}-{record.job_id}.out")
