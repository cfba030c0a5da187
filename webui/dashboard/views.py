# SPDX-License-Identifier: GPL-3.0-or-later
"""The landing page: my sessions, cluster GPU usage, my quota, news. The ``dashboard`` blueprint (``/``)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint
from flask import current_app
from flask import render_template
from markupsafe import Markup

from webui.auth.access import login_required
from webui.auth.logins import current_user
from webui.dashboard.news import latest_news
from webui.dashboard.rows import EXTEND_CHOICES
from webui.dashboard.rows import plural
from webui.dashboard.rows import with_row_fields
from webui.monitoring.health import node_health
from webui.quota.usage import quota_view
from webui.reservations.maintenance import shown as maintenance_shown
from webui.reservations.service import reserved_gpu_hours
from webui.reservations.service import slurm_state
from webui.reservations.slurm import ReservationState
from webui.sessions import storage
from webui.sessions.status import my_session_views
from webui.slurm.state import ClusterState

bp = Blueprint("dashboard", __name__)

#: how often the dashboard's rows ask ``/api/sessions`` while no session starts (``STARTING_POLL_SECONDS`` while one
#: does); the page itself is never reloaded for it
IDLE_POLL_SECONDS = 15


def usage_card(state: ClusterState) -> Markup:
    """The cluster GPU card, the same for every user: rendered once per scheduler snapshot.

    The snapshot is shared until the scheduler cache refreshes, which makes a new one, so the card is rendered
    again (at most once per refresh and worker, however many users load the page).
    """
    cached: tuple[ClusterState, Markup] | None = current_app.extensions.get("carme_usage_card")
    if cached is not None and cached[0] is state:
        return cached[1]
    card = Markup(render_template("dashboard/_usage.html", usage=state.gpu_usage()))  # autoescaped HTML
    current_app.extensions["carme_usage_card"] = (state, card)  # one tuple: a thread sees the old pair or the new
    return card


@bp.route("/")
@login_required
def index() -> Any:
    user = current_user()
    assert user is not None
    state, views = my_session_views(user.username)
    sessions = with_row_fields(views)
    portal_jobs = {s["job_id"] for s in sessions}
    other_jobs = [j for j in state.jobs_of(user.username) if j.job_id not in portal_jobs and j.active]
    # GPU values (Zabbix) of the nodes my running jobs are on
    my_nodes = sorted({n for j in state.jobs_of(user.username) if j.state == "RUNNING" for n in j.nodes})
    health = node_health()
    reservations = slurm_state()  # read once for the page (the quota card and the maintenance windows)
    return render_template(
        "dashboard/index.html",
        state=state,
        sessions=sessions,
        other_jobs=other_jobs,
        usage_card=usage_card(state),
        quota=_quota(user.username, reservations),
        storage_quota=storage.quota_view(user.username),
        news=latest_news(),
        maintenance=maintenance_shown(reservations),
        health=health,
        my_nodes=my_nodes,
        watch=any(s["watch"] for s in sessions),
        poll_ms=int(float(current_app.config.get("STARTING_POLL_SECONDS", 0.5)) * 1000),
        idle_poll_ms=IDLE_POLL_SECONDS * 1000,
        poll_wait_s=f"{float(current_app.config.get('LONG_POLL_WAIT_SECONDS', 3.0)):g}",
        extend_choices=EXTEND_CHOICES,
        plural=plural,
    )


def _quota(username: str, reservations: ReservationState) -> dict[str, Any]:
    """The quota card: the GPU-hours used (as the worker last read them) and reserved this month, and Slurm's limits."""
    reserved = reserved_gpu_hours(username, state=reservations)
    return {**quota_view(username, cached=True), "reserved_gpu_hours": None if reserved is None else round(reserved, 2)}
