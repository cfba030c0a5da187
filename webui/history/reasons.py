# SPDX-License-Identifier: GPL-3.0-or-later
"""The words the history page and the notices use for why a session or job ended (``PortalSession.end_reason``, from
Slurm's state and the launcher's comment: webui.sessions.records.end_reason)."""

from __future__ import annotations

#: the reasons a session's owner is told about on the dashboard (the owner did not end it, nor did it just finish)
NOTICE_REASONS = ("admin", "node_failure", "time_limit", "image_refused")

_WORDS = {
    "user": "Stopped by you",
    "time_limit": "Reached its time limit",
    "node_failure": "Node failure",
    "failed": "Failed to start",
    "image_refused": "Image refused",
    "completed": "Completed",
    "cancelled": "Cancelled in Slurm",
    "preempted": "Preempted by another job",
    "out_of_memory": "Ran out of memory",
}


def reason_words(reason: str | None, stopped_by: str | None = None, note: str = "") -> str:
    """The end reason in words, with the administrator and their note when an administrator stopped it."""
    if reason == "admin":
        text = f"Stopped by an administrator ({stopped_by})" if stopped_by else "Stopped by an administrator"
        return f"{text}: {note}" if note else text
    return _WORDS.get(reason or "", "Ended")
