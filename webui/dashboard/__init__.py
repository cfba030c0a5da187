"""The landing page: my sessions, cluster GPU usage, my quota, news."""

from __future__ import annotations

from typing import Any

from flask import Blueprint
from flask import render_template
from sqlalchemy import select

from webui import service
from webui.extensions import db
from webui.models import News
from webui.security import current_user
from webui.security import login_required

bp = Blueprint("dashboard", __name__)


@bp.route("/")
@login_required
def index() -> Any:
    user = current_user()
    assert user is not None
    state = service.scheduler().state()
    sessions = service.session_views(state, service.my_portal_sessions(user.username))
    portal_jobs = {s["job_id"] for s in sessions}
    other_jobs = [j for j in state.jobs_of(user.username) if j.job_id not in portal_jobs and j.active]
    news = db.session.execute(
        select(News).where(News.published.is_(True)).order_by(News.created_at.desc()).limit(5)
    ).scalars()
    return render_template(
        "dashboard/index.html",
        state=state,
        sessions=sessions,
        other_jobs=other_jobs,
        usage=state.gpu_usage(),
        quota=service.quota_view(user.username),
        news=list(news),
    )
