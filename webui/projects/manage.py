# SPDX-License-Identifier: GPL-3.0-or-later
"""Changing projects from the portal (issue 31): an administrator creates a project, its managers (and
administrators) add and remove its members. Only projects the portal owns (:mod:`webui.projects.accounting`); each
change is audited and reaches Slurm at once (read back with a fresh look)."""

from __future__ import annotations

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
from webui.projects.service import may_report
from webui.slurm.records import SlurmProject
from webui.slurm.scheduler import current_scheduler

MAX_GPU_HOURS = 1_000_000


def backend() -> accounting.Accounting:
    """``ACCOUNTING`` (tests) or ``sacctmgr`` run as the portal's user (``SLURM_SACCTMGR``, ``SLURM_CONF_FILE``)."""
    cfg = current_app.config
    given = cfg.get("ACCOUNTING")
    if given is not None:
        return given  # type: ignore[no-any-return]
    return accounting.Sacctmgr(tuple(cfg.get("SLURM_SACCTMGR", ("sacctmgr",))), cfg.get("SLURM_CONF_FILE") or None)


def _user_name(form: Mapping[str, Any], field: str) -> str:
    name = forms.text(form, field, max_len=32).strip()
    if not (valid_username(name) and accounting.NAME.fullmatch(name)):
        raise forms.FieldError(field, "is not a user name")
    return name


def create_project(form: Mapping[str, Any]) -> str:
    """An administrator's new project: ``name``, ``description``, ``gpu_hours`` a month, ``manager``."""
    name = forms.text(form, "name", max_len=32).strip()
    if not accounting.NAME.fullmatch(name):
        raise forms.FieldError("name", "must be lower-case letters, digits, '_' or '-', starting with a letter")
    description = forms.text(form, "description", max_len=100, required=False).strip()
    if not accounting.DESCRIPTION.fullmatch(description):
        raise forms.FieldError("description", "has characters that are not allowed here")
    gpu_hours = forms.integer(form, "gpu_hours", lo=0, hi=MAX_GPU_HOURS)
    manager = _user_name(form, "manager")
    if any(p.name == name for p in current_scheduler().projects(max_age=0)):
        raise forms.FieldError("name", "is a Slurm account already")
    qos = {"normal", str(current_app.config.get("SESSION_QOS") or "normal")}
    run = backend().sacctmgr
    run(accounting.create_argv(name, description or name, gpu_hours * 60, sorted(qos)))
    run(accounting.member_argv(name, manager, add=True))
    run(accounting.coordinator_argv(name, manager))
    audit("project.create", name, gpu_hours=gpu_hours, manager=manager)
    db.session.commit()
    current_scheduler().projects(max_age=0)
    return name


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
