# SPDX-License-Identifier: GPL-3.0-or-later
"""Extend a running session's time limit, within the user's own limit (the dashboard's "Extend").

The owner only; the new total time limit must stay within what the start form allows the user in the session's
partition (:func:`webui.sessions.catalog.form_limits`). Slurm lets no user raise their own job's limit: the portal
asks as its Slurm admin identity (``SLURM_ADMIN_USER``, :mod:`webui.slurm.job_update`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import abort
from flask import current_app

from webui.auth.audit import audit
from webui.auth.logins import CurrentUser
from webui.extensions import db
from webui.forms import FieldError
from webui.forms import integer
from webui.models import PortalSession
from webui.sessions.catalog import form_limits
from webui.sessions.records import get_portal_session
from webui.sessions.records import job_of
from webui.sessions.service import FRESH_STATE_SECONDS
from webui.slurm import job_update
from webui.slurm.scheduler import current_scheduler

#: the most one "Extend" adds, in minutes
MAX_EXTEND_MINUTES = 240
FIELD = "Extend by"


def extend_session(user: CurrentUser, job_id: int, form: Mapping[str, Any]) -> tuple[PortalSession, int]:
    """Raise the session's time limit by the form's ``minutes``; returns the record and the new limit (minutes).

    404/403 for someone else's session; :class:`FieldError` (naming "Extend by") when it does not run or the new
    limit would pass the user's maximum."""
    record = get_portal_session(job_id)
    if record is None:
        abort(404, description="No such session.")
    if record.owner != user.username:
        abort(403, description="Only the owner may extend this session.")
    try:
        minutes = integer(form, "minutes", lo=1, hi=MAX_EXTEND_MINUTES)
    except FieldError:
        raise FieldError(FIELD, f"choose between 1 and {MAX_EXTEND_MINUTES} minutes") from None
    state = current_scheduler().state(max_age=FRESH_STATE_SECONDS)
    job = job_of(state, job_id, record.owner)
    if record.ended_at is not None or job is None or job.state != "RUNNING":
        raise FieldError(FIELD, "only a running session can be extended")
    if record.reservation:
        raise FieldError(FIELD, f"this session ends with its reservation {record.reservation}")
    current = job.time_limit_minutes or record.time_minutes
    new_limit = current + minutes
    allowed = int(form_limits(user.username, state, record.partition)["max_time_minutes"])
    if new_limit > allowed:
        raise FieldError(
            FIELD,
            f"{minutes} more minutes would make the session {new_limit} minutes long; your limit is {allowed} minutes"
            f" (at most {max(0, allowed - current)} more)",
        )
    job_update.extend(current_scheduler(), job_id, new_limit, as_user=str(current_app.config["SLURM_ADMIN_USER"]))
    record.time_minutes = new_limit
    audit("session.extend", str(job_id), minutes=minutes, time_limit_minutes=new_limit)
    db.session.commit()
    return record, new_limit
