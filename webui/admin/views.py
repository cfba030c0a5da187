# SPDX-License-Identifier: GPL-3.0-or-later
"""Administration: all sessions, node health, news, image catalogue, users, audit log. The ``admin`` blueprint
(``/admin``). Limits are Slurm's, set by the inventory (:mod:`webui.quota.limits`): there is nothing to edit here.

Every state change writes an AuditLog row in the same transaction.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint
from flask import abort
from flask import current_app
from flask import flash
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for
from sqlalchemy import select
from werkzeug.wrappers import Response

from carme_runtime.images import split_reference
from webui import forms
from webui.auth.access import admin_required
from webui.auth.audit import audit
from webui.auth.lockout import unlock as unlock_user
from webui.auth.logins import current_user
from webui.auth.logins import valid_username
from webui.auth.totp import reset_totp
from webui.caches import view_cache
from webui.dashboard.news import news_fields
from webui.extensions import db
from webui.models import ROW_ID
from webui.models import AuditLog
from webui.models import ImageCatalog
from webui.models import News
from webui.models import User
from webui.models import utcnow
from webui.monitoring import view as health_view
from webui.monitoring.health import node_health
from webui.quota.usage import quota_view
from webui.sessions.records import open_sessions
from webui.sessions.records import parse_job_id
from webui.sessions.service import stop_session as stop_user_session
from webui.sessions.status import session_views
from webui.slurm.errors import SlurmError
from webui.slurm.scheduler import current_scheduler

bp = Blueprint("admin", __name__, url_prefix="/admin")
# times as "3 min ago" with the absolute UTC time for a title (the health page, the monitoring banner everywhere)
bp.add_app_template_filter(health_view.ago, "ago")
bp.add_app_template_filter(health_view.utc_text, "utc_text")
bp.add_app_template_filter(health_view.utc_iso, "utc_iso")

NAME = r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}"
APP = r"[a-z0-9][a-z0-9_-]{0,63}"
NOTE_MAX = 500
#: the image form's label of the ``image`` field (admin/images.html), named in its errors
IMAGE_LABEL = "Image path or environment"


@bp.before_request
@admin_required
def _guard() -> None:
    """All admin views need an admin (403 for other users)."""
    return None


@bp.route("/")
def index() -> Any:
    state = current_scheduler().state()
    sessions = session_views(state, open_sessions(), probe=False)
    return render_template("admin/index.html", state=state, sessions=sessions, usage=state.gpu_usage())


@bp.route("/health")
def health() -> Any:
    """Per-node health from Zabbix: latest values and open problems (one shared snapshot: webui.monitoring.health),
    in words and units, each node with the items of its role (compute nodes: those Slurm lists)."""
    snapshot = node_health()
    slurm_nodes = {n.name for n in current_scheduler().state().nodes}
    nodes = [health_view.node_view(host, slurm_nodes) for host in snapshot.hosts.values()]
    return render_template("admin/health.html", health=snapshot, nodes=nodes)


@bp.route("/sessions/<job_id>/stop", methods=["POST"])
def stop_session(job_id: str) -> Response:
    """Stop anyone's session, with an optional note to its owner (their dashboard and history show it)."""
    user = current_user()
    assert user is not None
    jid = parse_job_id(job_id)
    note = _note(request.form)
    try:
        stop_user_session(user, jid, note=note)
    except SlurmError as exc:
        flash(f"Could not stop session {jid}: {exc}")
    else:
        flash(f"Session {jid} is stopping." + (" Its owner sees your note." if note else ""))
    back = request.form.get("next")
    return redirect(url_for("admin.users") if back == "users" else url_for("admin.index"))


def _note(form: Any) -> str:
    """The stop form's optional note to the owner; bad input is a 400 naming the field as the form labels it."""
    try:
        return forms.text(form, "note", max_len=NOTE_MAX, required=False, multiline=True).strip()
    except forms.FieldError as exc:
        raise forms.FieldError("Note", str(exc.description).partition(": ")[2]) from None


# --- news ------------------------------------------------------------------------


@bp.route("/news", methods=["GET", "POST"])
def news() -> Any:
    if request.method == "POST":
        user = current_user()
        assert user is not None
        title, body = news_fields(request.form)
        item = News(title=title, body=body, author=user.username, created_at=utcnow(), published=True)
        db.session.add(item)
        db.session.flush()
        audit("admin.news.create", str(item.id), title=title)
        db.session.commit()
        view_cache().clear()
        flash("News published.")
        return redirect(url_for("admin.news"))
    items = db.session.execute(select(News).order_by(News.created_at.desc())).scalars()
    return render_template("admin/news.html", items=list(items))


@bp.route(f"/news/<{ROW_ID}:news_id>/delete", methods=["POST"])
def news_delete(news_id: int) -> Response:
    item = db.get_or_404(News, news_id)
    audit("admin.news.delete", str(news_id), title=item.title)
    db.session.delete(item)
    db.session.commit()
    view_cache().clear()
    flash("News deleted.")
    return redirect(url_for("admin.news"))


# --- image catalogue -----------------------------------------------------------


@bp.route("/images", methods=["GET", "POST"])
def images() -> Any:
    if request.method == "POST":
        name = forms.text(request.form, "name", max_len=64, pattern=NAME)
        image = forms.text(request.form, "image", max_len=255)
        forms.absolute_path(split_reference(image)[0], "image", IMAGE_LABEL)  # the digest of PATH@sha256:HEX aside
        kind = forms.choice(request.form, "kind", ["container", "image", "environment"])
        description = forms.text(request.form, "description", max_len=2000, required=False, multiline=True)
        apps_raw = forms.text(request.form, "allowed_apps", max_len=500)
        apps = sorted({a.strip() for a in apps_raw.replace(",", " ").split() if a.strip()})
        for app in apps:
            if not re.fullmatch(APP, app):
                raise forms.FieldError("allowed_apps", f"{app!r} is not a valid app name")
        existing = db.session.execute(select(ImageCatalog).where(ImageCatalog.name == name)).scalar_one_or_none()
        entry = existing or ImageCatalog(name=name)
        entry.image, entry.kind, entry.description, entry.allowed_apps, entry.enabled = (
            image,
            kind,
            description,
            apps,
            True,
        )
        db.session.add(entry)
        audit("admin.image.save", name, image=image, kind=kind, allowed_apps=apps, created=existing is None)
        db.session.commit()
        flash(f"Image {name} saved.")
        return redirect(url_for("admin.images"))
    entries = db.session.execute(select(ImageCatalog).order_by(ImageCatalog.name)).scalars()
    return render_template("admin/images.html", entries=list(entries))


@bp.route(f"/images/<{ROW_ID}:entry_id>/toggle", methods=["POST"])
def image_toggle(entry_id: int) -> Response:
    entry = db.get_or_404(ImageCatalog, entry_id)
    entry.enabled = not entry.enabled
    audit("admin.image.enable" if entry.enabled else "admin.image.disable", entry.name)
    db.session.commit()
    return redirect(url_for("admin.images"))


# --- users ---------------------------------------------------------------------


def _user_or_404(username: str) -> User:
    if not valid_username(username):
        abort(404)
    user = db.session.execute(select(User).where(User.username == username)).scalar_one_or_none()
    if user is None:
        abort(404)
    return user


@bp.route("/users")
def users() -> Any:
    """Every user the portal knows (logged in once, locked, or with an open session): TOTP, lock, open sessions,
    GPU-hours this month (the dashboard's cached figure: no Slurm call per row) and the actions."""
    sessions = session_views(current_scheduler().state(), open_sessions(), probe=False)
    by_owner: dict[str, list[dict[str, Any]]] = {}
    for view in sessions:
        by_owner.setdefault(view["owner"], []).append(view)
    known = db.session.execute(
        select(User).where(
            User.last_login_at.is_not(None) | User.locked_until.is_not(None) | User.username.in_(list(by_owner))
        )
    ).scalars()
    accounts = {u.username: u for u in known}
    rows = [
        {
            "name": name,
            "user": accounts.get(name),
            "sessions": by_owner.get(name, []),
            "quota": quota_view(name, cached=True),
        }
        for name in sorted(set(accounts) | set(by_owner))
    ]
    return render_template("admin/users.html", rows=rows, now=utcnow())


@bp.route("/users/<username>/totp-reset", methods=["POST"])
def totp_reset(username: str) -> Response:
    user = _user_or_404(username)
    reset_totp(user)
    audit("admin.totp.reset", username)
    db.session.commit()
    current_app.logger.info("TOTP reset for %s", username)
    flash(f"TOTP reset for {username}; they enrol again at their next login.")
    return redirect(url_for("admin.users"))


@bp.route("/users/<username>/unlock", methods=["POST"])
def unlock(username: str) -> Response:
    user = _user_or_404(username)
    unlock_user(user)
    audit("admin.user.unlock", username)
    db.session.commit()
    flash(f"{username} unlocked.")
    return redirect(url_for("admin.users"))


@bp.route("/audit")
def audit_log() -> Any:
    rows = db.session.execute(select(AuditLog).order_by(AuditLog.time.desc(), AuditLog.id.desc()).limit(200)).scalars()
    return render_template("admin/audit.html", rows=list(rows))
