# SPDX-License-Identifier: GPL-3.0-or-later
"""Session profiles on the admin pages (``/admin/profiles``, issue 30): admins add, change, disable and delete the
profiles made here (source ``portal``); the inventory's (``carme_webui_session_profiles``, source ``inventory``) are
shown read-only, since the next run of the role would undo any change. Routes on the ``admin`` blueprint, so its
admin guard applies; every change writes an AuditLog row in the same transaction."""

from __future__ import annotations

from typing import Any

from flask import flash
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for
from sqlalchemy import select
from werkzeug.wrappers import Response

from webui import forms
from webui.admin.views import bp
from webui.auth.audit import audit
from webui.extensions import db
from webui.models import ROW_ID
from webui.models import SessionProfile
from webui.sessions.catalog import catalog
from webui.sessions.catalog import installed_apps
from webui.sessions.profiles import NAME
from webui.sessions.profiles import ProfileInvalid
from webui.sessions.profiles import all_profiles
from webui.sessions.profiles import check_entry
from webui.sessions.profiles import unavailable_reason

#: the admin form's label of each field, named in its errors
LABELS = {
    "name": "Name",
    "title": "Title",
    "description": "Description",
    "app": "App",
    "image": "Image",
    "gpus": "GPUs",
    "cpus": "CPUs",
    "mem_mb": "Memory (MB)",
    "time_minutes": "Time (minutes)",
    "position": "Position",
}


def _optional(name: str, hi: int) -> int | None:
    if request.form.get(name, "") == "":
        return None
    return forms.integer(request.form, name, lo=1, hi=hi)


def _form_entry() -> tuple[dict[str, Any], int]:
    """The posted profile, checked, and its position."""
    entry = {
        "name": forms.text(request.form, "name", max_len=64, pattern=NAME),
        "title": forms.text(request.form, "title", max_len=200),
        "description": forms.text(request.form, "description", max_len=2000, required=False, multiline=True),
        "app": forms.choice(request.form, "app", sorted(installed_apps())),
        "image": forms.choice(request.form, "image", [i.name for i in catalog()]),
        "gpus": forms.integer(request.form, "gpus", lo=0, hi=64),
        "cpus": _optional("cpus", 1024),
        "mem_mb": _optional("mem_mb", 64 * 1024 * 1024),
        "time_minutes": forms.integer(request.form, "time_minutes", lo=1, hi=60 * 24 * 30),
    }
    position = forms.integer(request.form, "position", lo=0, hi=10_000, default=100)
    try:
        return check_entry(entry, "profile"), position
    except ProfileInvalid as exc:
        raise forms.FieldError("name", str(exc)) from exc


def _labelled(exc: forms.FieldError) -> str:
    message = str(exc.description).removeprefix(f"{exc.field}: ")
    return f"{LABELS.get(exc.field, exc.field)}: {message}"


def _page(**extra: Any) -> str:
    images = catalog()
    installed = set(installed_apps())
    rows = [(p, unavailable_reason(p, images, installed)) for p in all_profiles()]
    context = {"rows": rows, "images": images, "apps": sorted(installed), "form": request.form, **extra}
    return render_template("admin/profiles.html", **context)


@bp.route("/profiles", methods=["GET", "POST"])
def profiles() -> Any:
    if request.method == "GET":
        return _page(form={})
    try:
        entry, position = _form_entry()
    except forms.FieldError as exc:
        return _page(error=_labelled(exc)), 400
    row = db.session.execute(select(SessionProfile).where(SessionProfile.name == entry["name"])).scalar_one_or_none()
    if row is not None and row.source != "portal":
        return _page(error=f"Name: {entry['name']} comes from the inventory; change it there"), 400
    row = row or SessionProfile(name=entry["name"], source="portal")
    for key, value in {**entry, "position": position, "enabled": True}.items():
        setattr(row, key, value)
    db.session.add(row)
    audit("admin.profile.save", entry["name"], **{k: v for k, v in entry.items() if k != "name"}, position=position)
    db.session.commit()
    flash(f"Profile {entry['name']} saved.")
    return redirect(url_for("admin.profiles"))


def _portal_row(row_id: int) -> SessionProfile:
    row = db.get_or_404(SessionProfile, row_id)
    if row.source != "portal":
        raise forms.FieldError("profile", "comes from the inventory: change it there")
    return row


@bp.route(f"/profiles/<{ROW_ID}:row_id>/toggle", methods=["POST"])
def profile_toggle(row_id: int) -> Response:
    row = _portal_row(row_id)
    row.enabled = not row.enabled
    audit("admin.profile.enable" if row.enabled else "admin.profile.disable", row.name)
    db.session.commit()
    return redirect(url_for("admin.profiles"))


@bp.route(f"/profiles/<{ROW_ID}:row_id>/delete", methods=["POST"])
def profile_delete(row_id: int) -> Response:
    row = _portal_row(row_id)
    audit("admin.profile.delete", row.name)
    db.session.delete(row)
    db.session.commit()
    flash(f"Profile {row.name} deleted.")
    return redirect(url_for("admin.profiles"))
