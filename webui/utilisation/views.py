# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``utilisation`` blueprint: ``/admin/utilisation`` (the cluster, for administrators) and
``/projects/<name>/utilisation`` (a project's GPUs in use, for its managers and administrators).

The pages only read the samples the timer took: a page never asks Slurm and never samples.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from collections.abc import Sequence

from flask import Blueprint
from flask import abort
from flask import render_template
from flask import request

from webui.auth.access import admin_required
from webui.auth.access import login_required
from webui.auth.logins import logged_in
from webui.models import utcnow
from webui.projects import service
from webui.slurm.errors import SlurmError
from webui.utilisation.chart import Chart
from webui.utilisation.chart import line_chart
from webui.utilisation.series import DEFAULT_RANGE
from webui.utilisation.series import RANGES
from webui.utilisation.series import Point
from webui.utilisation.series import account_use
from webui.utilisation.series import bucket
from webui.utilisation.series import largest_step
from webui.utilisation.series import rows_in
from webui.utilisation.series import series

bp = Blueprint("utilisation", __name__)


def _window() -> tuple[str, dt.datetime, dt.datetime]:
    """The asked range (``?range=``, else :data:`DEFAULT_RANGE`) ending at the next whole minute."""
    name = request.args.get("range", DEFAULT_RANGE)
    if name not in RANGES:
        abort(400, description=f"range must be one of {', '.join(RANGES)}")
    until = utcnow().replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    return name, until - RANGES[name][1], until


def _summary(
    what: str, points: Sequence[Point], peak: Callable[[Point], float], value: Callable[[Point], float]
) -> str:
    """One sentence for screen readers and the caption: the peak, the average and the latest value."""
    if not points:
        return f"No samples of {what} in this range yet."
    average = sum(value(p) for p in points) / len(points)
    highest = max(peak(p) for p in points)
    return f"{what}: at most {highest:g}, on average {average:.1f}, latest {value(points[-1]):g}."


def cluster_charts(points: Sequence[Point], since: dt.datetime, until: dt.datetime, range_name: str) -> list[Chart]:
    label, step = RANGES[range_name][0], largest_step(range_name)
    gpus = line_chart(
        f"GPUs in use, idle and down over {label}",
        points,
        [
            ("in use (peak)", "#b03a2e", True, lambda p: p.used_max),
            ("in use (average)", "#1f5fa8", False, lambda p: p.used),
            ("idle", "#2e8540", False, lambda p: p.idle),
            ("down", "#666666", False, lambda p: p.down),
        ],
        since,
        until,
        _summary("GPUs in use", points, lambda p: p.used_max, lambda p: p.used),
        step,
    )
    queue = line_chart(
        f"Pending jobs over {label}",
        points,
        [
            ("pending (peak)", "#b03a2e", True, lambda p: p.pending_max),
            ("pending", "#1f5fa8", False, lambda p: p.pending),
        ],
        since,
        until,
        _summary("Pending jobs", points, lambda p: p.pending_max, lambda p: p.pending),
        step,
    )
    return [gpus, queue]


@bp.route("/admin/utilisation")
@admin_required
def admin() -> str:
    name, since, until = _window()
    rows = rows_in(since, until)
    points = bucket(rows, since, until)
    return render_template(
        "utilisation/page.html",
        heading="Utilisation",
        charts=cluster_charts(points, since, until, name),
        points=points,
        accounts=account_use(rows),
        range_name=name,
        ranges=RANGES,
        project=None,
    )


@bp.route("/projects/<name>/utilisation")
@login_required
def project(name: str) -> str:
    try:
        found = service.find_project(name)
    except SlurmError as exc:
        abort(503, description=f"Slurm's accounts cannot be read right now: {exc}")
    if found is None:
        abort(404)
    if not service.may_report(logged_in(), found):
        abort(403, description="Only the project's managers and administrators see its utilisation.")
    range_name, since, until = _window()
    points = series(until, range_name, account=found.name)
    chart = line_chart(
        f"GPUs in use by project {found.name} over {RANGES[range_name][0]}",
        points,
        [
            ("in use (peak)", "#b03a2e", True, lambda p: p.used_max),
            ("in use (average)", "#1f5fa8", False, lambda p: p.used),
        ],
        since,
        until,
        _summary(f"GPUs in use by {found.name}", points, lambda p: p.used_max, lambda p: p.used),
        largest_step(range_name),
    )
    return render_template(
        "utilisation/page.html",
        heading=f"Utilisation of project {found.name}",
        charts=[chart],
        points=points,
        range_name=range_name,
        ranges=RANGES,
        accounts=[],
        project=found.name,
    )
