# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``history`` blueprint (``/history``): the user's sessions and jobs, their logs (for their owner only: an
administrator reads no other user's log here either), and dismissing a dashboard notice."""

from __future__ import annotations

import os
import re

from flask import Blueprint
from flask import Response
from flask import abort
from flask import current_app
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for
from werkzeug.wrappers import Response as BaseResponse

from webui import forms
from webui.auth.access import login_required
from webui.auth.logins import logged_in
from webui.extensions import db
from webui.history import entries
from webui.history.logs import LogMissing
from webui.history.logs import LogRefused
from webui.history.logs import LogUnavailable
from webui.history.logs import current_log_reader
from webui.history.logs import job_log_path
from webui.history.notices import notices_context
from webui.sessions.records import get_portal_session
from webui.sessions.records import parse_job_id
from webui.sessions.records import session_log_path

bp = Blueprint("history", __name__, url_prefix="/history")
bp.app_context_processor(notices_context)

DEFAULT_LINES = 200
MAX_LINES = 5000
#: what the page's tail reads (the last lines are taken from it)
TAIL_BYTES = 1024 * 1024
#: a download holds the file's last this many bytes
DOWNLOAD_BYTES = 5 * 1024 * 1024


@bp.route("/")
@login_required
def index() -> str:
    page = forms.integer(request.args, "page", lo=1, hi=10**6, default=1)
    return render_template("history/index.html", history=entries.history(logged_in().username, page))


def _log_of(username: str, job_id: int) -> tuple[str, str]:
    """The owner and output file of job ``job_id``, if it is ``username``'s: 403 for another user's session, 404 for a
    job that is neither a session nor in the user's accounting."""
    record = get_portal_session(job_id)
    if record is not None:
        if record.owner != username:
            abort(403, description="This is another user's session; only its owner may read its log.")
        return record.owner, session_log_path(record)
    jobs, _error = entries.accounting(username)
    job = next((j for j in jobs if j.job_id == job_id), None)
    if job is None:
        abort(404, description="No job of yours with this number in the last 30 days.")
    path = job_log_path(job)
    if path is None:
        abort(404, description="Slurm does not say where this job's output went.")
    return username, path


@bp.route("/<job_id>/log")
@login_required
def log(job_id: str) -> BaseResponse:
    """The log's last ``lines`` lines as text; ``download=1``: its last :data:`DOWNLOAD_BYTES` as a file."""
    owner, path = _log_of(logged_in().username, parse_job_id(job_id))
    download = request.args.get("download") == "1"
    lines = forms.integer(request.args, "lines", lo=1, hi=MAX_LINES, default=DEFAULT_LINES)
    try:
        data = current_log_reader().read(owner, path, DOWNLOAD_BYTES if download else TAIL_BYTES)
    except LogMissing:
        abort(404, description="There is no log file for this job (not written yet, or deleted).")
    except LogRefused:
        abort(403, description="The log file cannot be read (it is not a regular file, or not readable by you).")
    except LogUnavailable as exc:
        current_app.logger.error("reading %s as %s: %s", path, owner, exc)
        abort(503, description="Logs cannot be read right now; try again later.")
    if download:
        resp = Response(data, mimetype="application/octet-stream")
        # the name comes from the job's output path (the user's own choice for sbatch jobs): plain characters only
        name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(path)) or "job.log"
        resp.headers["Content-Disposition"] = f'attachment; filename="{name}"'
        return resp
    text = data.decode("utf-8", "replace").splitlines(keepends=True)[-lines:]
    return Response("".join(text), mimetype="text/plain")


@bp.post("/<job_id>/dismiss")
@login_required
def dismiss(job_id: str) -> BaseResponse:
    """Dismiss the dashboard's notice of the user's session ``job_id``."""
    record = get_portal_session(parse_job_id(job_id))
    if record is None or record.owner != logged_in().username:
        abort(404, description="No such session of yours.")
    record.end_seen = True
    db.session.commit()
    return redirect(url_for("dashboard.index"))
