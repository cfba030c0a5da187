# SPDX-License-Identifier: GPL-3.0-or-later
"""Allocation requests (issue 31): a manager of a project the portal owns asks for another monthly GPU budget; an
administrator approves it (the budget is set in Slurm at once: the account's GrpTRESMins) or declines it with a
reason. One request per project waits at a time; every step is audited."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from blinker import Namespace
from flask import abort
from sqlalchemy import select

from webui import forms
from webui.auth.audit import audit
from webui.auth.logins import CurrentUser
from webui.extensions import db
from webui.models import AllocationRequest
from webui.models import utcnow
from webui.projects import accounting
from webui.projects.accounting import backend
from webui.projects.manage import MAX_GPU_HOURS
from webui.projects.manage import managed_project
from webui.slurm.errors import SlurmError
from webui.slurm.scheduler import current_scheduler

PENDING, APPROVED, DECLINED, FAILED = "pending", "approved", "declined", "failed"
#: sent with each decided request before the decision is committed (webui.notifications tells the requester)
DECIDED = Namespace().signal("allocation-decided")


def request_allocation(user: CurrentUser, name: str, form: Mapping[str, Any]) -> AllocationRequest:
    managed_project(user, name)  # 404 unknown, 403 not a manager, 409 the inventory's
    gpu_hours = forms.integer(form, "gpu_hours", lo=0, hi=MAX_GPU_HOURS)
    purpose = forms.text(form, "purpose", max_len=500, multiline=True).strip()
    waiting = select(AllocationRequest.id).where(AllocationRequest.project == name, AllocationRequest.status == PENDING)
    if db.session.scalar(waiting) is not None:
        raise forms.FieldError("gpu_hours", f"project {name} has a request waiting for an administrator already")
    row = AllocationRequest(project=name, username=user.username, gpu_hours=gpu_hours, purpose=purpose, status=PENDING)
    db.session.add(row)
    audit("allocation.request", name, gpu_hours=gpu_hours)
    db.session.commit()
    return row


def decide(admin: CurrentUser, request_id: int, form: Mapping[str, Any]) -> AllocationRequest:
    """Approve (the budget is set in Slurm; Slurm's refusal makes the request ``failed`` with its words) or decline
    (a reason is required). 404 unknown, 409 decided already."""
    row = db.session.get(AllocationRequest, request_id)
    if row is None:
        abort(404)
    action, reason = forms.decision(form)
    reason = reason.strip()
    if row.status != PENDING:
        abort(409, description=f"The request is {row.status} already.")
    row.decided_by, row.decided_at = admin.username, utcnow()
    if action == "decline":
        row.status, row.reason = DECLINED, reason
    else:
        try:
            backend().sacctmgr(accounting.budget_argv(row.project, row.gpu_hours * 60))
            row.status, row.reason = APPROVED, reason or "approved by an administrator"
        except SlurmError as exc:
            row.status, row.reason = FAILED, str(exc)
    audit(f"allocation.{row.status}", row.project, request=row.id, gpu_hours=row.gpu_hours)
    DECIDED.send(row)
    db.session.commit()
    current_scheduler().projects(max_age=0)
    return row


def pending_requests() -> list[AllocationRequest]:
    stmt = select(AllocationRequest).where(AllocationRequest.status == PENDING).order_by(AllocationRequest.id)
    return list(db.session.scalars(stmt))


def requests_of(name: str, limit: int = 10) -> list[AllocationRequest]:
    stmt = select(AllocationRequest).where(AllocationRequest.project == name)
    return list(db.session.scalars(stmt.order_by(AllocationRequest.id.desc()).limit(limit)))
