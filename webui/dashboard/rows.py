# SPDX-License-Identifier: GPL-3.0-or-later
"""What a row of the dashboard's session table shows, for the page and for its live updates
(``webui/static/dashboard.js`` reads the same fields from ``/api/sessions``): the state, whether the session
failed (its button says "Dismiss"), whether it nears its time limit (a warning and "Extend"), and the time left."""

from __future__ import annotations

from typing import Any

from carme_runtime.slurm_formats import ENDED_STATES
from webui.sessions.status import FAILURE_REASONS

#: a running session with at most this much time left shows a warning and can be extended
NEARING_END_SECONDS = 15 * 60
#: the "Extend by" choices, in minutes
EXTEND_CHOICES = (15, 30, 60)

_FAILED_REASONS = frozenset({*FAILURE_REASONS.values(), "the app did not start (see the job's output file)"})


def duration_text(seconds: int | None) -> str:
    """The dashboard's time left: ``H:MM h``, or ``-`` when Slurm gives none (as the ``duration`` filter)."""
    if seconds is None:
        return "-"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}:{rest // 60:02d} h"


def failed(view: dict[str, Any]) -> bool:
    """The session's launch failed, or its job ended by a failure the dashboard still explains."""
    if "failed" in view:  # webui.sessions.status may say so itself
        return bool(view["failed"])
    return view["state"] == "NODE_FAIL" or view.get("reason") in _FAILED_REASONS or view["state"] in ENDED_STATES


def row_fields(view: dict[str, Any]) -> dict[str, Any]:
    """The words and flags of a session's row, added to its view."""
    is_failed = failed(view)
    left = view.get("seconds_left")
    running = view["state"] == "RUNNING" and not is_failed
    return {
        "failed": is_failed,
        # Slurm's own word (PENDING, RUNNING: what squeue and the docs say), "Failed" for a failed session
        "state_text": "Failed" if is_failed else view["state"],
        "time_left_text": duration_text(left),
        "nearing_end": running and left is not None and left <= NEARING_END_SECONDS,
        "can_extend": running and left is not None and left <= NEARING_END_SECONDS and not view.get("reservation"),
    }


def with_row_fields(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**v, **row_fields(v)} for v in views]


def plural(count: int | None, one: str, many: str | None = None) -> str:
    """``1 GPU``, ``2 GPUs``."""
    n = 0 if count is None else count
    return f"{n} {one if n == 1 else (many or one + 's')}"
