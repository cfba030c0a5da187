# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``projects`` blueprint: ``/projects`` (the user's projects) and ``/projects/<name>/report`` (HTML or CSV, for
the project's managers and administrators)."""

from __future__ import annotations

from flask import Blueprint
from flask import Response
from flask import abort
from flask import flash
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for
from werkzeug.wrappers import Response as BaseResponse

from webui.auth.access import admin_required
from webui.auth.access import login_required
from webui.auth.logins import logged_in
from webui.models import ROW_ID
from webui.projects import allocations
from webui.projects import manage
from webui.projects import service
from webui.projects.terms import terms_of
from webui.slurm.errors import SlurmError
from webui.slurm.errors import flash_outcome

bp = Blueprint("projects", __name__, url_prefix="/projects")


@bp.route("/")
@login_required
def index() -> str:
    try:
        projects, error = service.visible_projects(logged_in()), ""
    except SlurmError as exc:
        projects, error = [], str(exc)
    waiting = allocations.pending_requests() if logged_in().is_admin else []
    month = service.this_month()
    return render_template("projects/index.html", projects=projects, error=error, month=month, waiting=waiting)


@bp.route("/<name>/report")
@bp.route("/<name>/report.csv", endpoint="report_csv", defaults={"as_csv": True})
@login_required
def report(name: str, as_csv: bool = False) -> Response | str:
    month = service.parse_month(request.args.get("month"))
    try:
        project = service.find_project(name)
        if project is None:
            abort(404)
        if not service.may_report(logged_in(), project):
            abort(403, description="Only the project's managers and administrators see its report.")
        found = service.project_report(project, month)
    except SlurmError as exc:
        abort(503, description=f"Slurm's accounting cannot be read right now: {exc}")
    if as_csv:
        resp = Response(service.report_csv(found), mimetype="text/csv")
        resp.headers["Content-Disposition"] = f'attachment; filename="{project.name}-{month}.csv"'
        resp.headers["Cache-Control"] = "no-store"
        return resp
    return render_template(
        "projects/report.html",
        report=found,
        utc=service.utc_text,
        requests=allocations.requests_of(project.name),
        terms=terms_of(project),
    )


@bp.route("/new", methods=["POST"])
@admin_required
def create() -> BaseResponse:
    flash_outcome(
        lambda: manage.create_project(request.form),
        lambda name: f"Project {name} created: its manager can add members on its report page.",
        "Slurm refused the project",
    )
    return redirect(url_for("projects.index"))


@bp.route("/<name>/members", methods=["POST"])
@bp.route("/<name>/members/remove", methods=["POST"], endpoint="remove_member", defaults={"add": False})
@login_required
def add_member(name: str, add: bool = True) -> BaseResponse:
    flash_outcome(
        lambda: manage.change_member(logged_in(), name, request.form, add=add),
        lambda member: f"{member} {'added to' if add else 'removed from'} project {name}.",
        "Slurm refused",
    )
    return redirect(url_for("projects.report", name=name))


@bp.route("/<name>/allocation", methods=["POST"])
@login_required
def request_allocation(name: str) -> BaseResponse:
    row = allocations.request_allocation(logged_in(), name, request.form)
    flash(f"Request {row.id} for {row.gpu_hours} GPU-hours a month waits for an administrator.")
    return redirect(url_for("projects.report", name=name))


@bp.route(f"/allocations/<{ROW_ID}:request_id>/decide", methods=["POST"])
@admin_required
def decide_allocation(request_id: int) -> BaseResponse:
    row = allocations.decide(logged_in(), request_id, request.form)
    if row.status == allocations.FAILED:
        flash(f"Slurm refused request {row.id}: {row.reason}")
    else:
        flash(f"Request {row.id} for project {row.project}: {row.status}.")
    return redirect(url_for("projects.index"))
