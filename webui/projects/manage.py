# SPDX-License-Identifier: GPL-3.0-or-later
"""Changing projects from the portal (issue 31): an administrator creates a project, its managers (and
administrators) add and remove its members. Only projects the portal owns (:mod:`webui.projects.accounting`); each
change is audited and reaches Slurm at once (read back with a fresh look)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from flask import abort
from flask import current_app

from webui import forms
from webui.auth.audit import audit
from webui.auth.logins import CurrentUser
from webui.auth.logins import valid_username
from webui.extensions import db
from webui.projects import accounting
from webui.projects import terms
from webui.projects.accounting import backend
from webui.projects.service import may_report
from webui.slurm.records import SlurmProject
from webui.slurm.scheduler import current_scheduler

MAX_GPU_HOURS = 1_000_000
DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")


def _user_name(form: Mapping[str, Any], field: str) -> str:
    name = forms.text(form, field, max_len=32).strip()
    if not (valid_username(name) and accounting.NAME.fullmatch(name)):
        raise forms.FieldError(field, "is not a user name")
    return name


def create_project(form: Mapping[str, Any]) -> str:
    """An administrator's new project: ``name``, ``description``, ``gpu_hours`` a month, ``manager``, ``pi`` (its
    owner, a user Slurm knows; default: the manager) and ``end_date`` (its last day, YYYY-MM-DD; none: open-ended)."""
    name = forms.text(form, "name", max_len=32).strip()
    if not accounting.NAME.fullmatch(name):
        raise forms.FieldError("name", "must be lower-case letters, digits, '_' or '-', starting with a letter")
    description = forms.text(form, "description", max_len=100, required=False).strip()
    if not accounting.DESCRIPTION.fullmatch(description):
        raise forms.FieldError("description", "has characters that are not allowed here")
    gpu_hours = forms.integer(form, "gpu_hours", lo=0, hi=MAX_GPU_HOURS)
    manager = _user_name(form, "manager")
    end_date = _end_date(form)
    projects = current_scheduler().projects(max_age=0)
    if any(p.name == name for p in projects):
        raise forms.FieldError("name", "is a Slurm account already")
    pi = _user_name(form, "pi") if str(form.get("pi") or "").strip() else manager
    if pi != manager and not any(pi in p.members for p in projects):
        raise forms.FieldError("pi", "is not a user Slurm knows (a member of a project)")
    qos = {"normal", str(current_app.config.get("SESSION_QOS") or "normal")}
    run = backend().sacctmgr
    run(accounting.create_argv(name, description or name, gpu_hours * 60, sorted(qos)))
    run(accounting.member_argv(name, manager, add=True))
    run(accounting.coordinator_argv(name, manager))
    terms.store(name, pi, end_date)
    end = end_date.isoformat() if end_date else None
    audit("project.create", name, gpu_hours=gpu_hours, manager=manager, pi=pi, end_date=end)
    db.session.commit()
    current_scheduler().projects(max_age=0)
    return name


def _end_date(form: Mapping[str, Any]) -> dt.date | None:
    raw = forms.text(form, "end_date", max_len=10, required=False).strip()
    if not raw:
        return None
    try:
        if not DATE.fullmatch(raw):
            raise ValueError(raw)
        end = dt.date.fromisoformat(raw)
    except ValueError:
        raise forms.FieldError("end_date", "must be a date as YYYY-MM-DD") from None
    if end < terms.today():
        raise forms.FieldError("end_date", "must not be in the past (it is the project's last day, UTC)")
    return end


def managed_project(user: CurrentUser, name: str) -> SlurmProject:
    """The project ``name`` if ``user`` may change its members: 404 unknown, 403 not a manager, 409 the inventory's."""
    project = next((p for p in current_scheduler().projects(max_age=0) if p.name == name), None)
    if project is None:
        abort(404)
    if not may_report(user, project):
        abort(403, description="Only the project's managers and administrators change its members.")
    if project.source != "portal":
        abort(409, description=f"Project {name} is declared in the inventory: change its members there.")
    return project


def change_member(user: CurrentUser, name: str, form: Mapping[str, Any], *, add: bool) -> str:
    project = managed_project(user, name)
    member = _user_name(form, "user")
    if add and member in project.members:
        raise forms.FieldError("user", f"is a member of {name} already")
    if not add and member not in project.members:
        raise forms.FieldError("user", f"is not a member of {name}")
    backend().sacctmgr(accounting.member_argv(name, member, add=add))
    audit("project.member_add" if add else "project.member_remove", name, user=member)
    db.session.commit()
    current_scheduler().projects(max_age=0)
    return member
