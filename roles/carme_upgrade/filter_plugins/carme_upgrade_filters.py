# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the carme_upgrade role: which Slurm nodes to drain or resume (``sinfo --Node --format=%N|%T|%E``) and
what to do with each job (``scontrol show job --oneliner``). Pure functions (tests/roles/test_upgrade_role.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: a portal session's job comment starts with this (carme_runtime.job.COMMENT_PREFIX; the roles cannot import it)
SESSION_COMMENT = "carme:v1"


def _nodes(sinfo_output: str) -> dict[str, tuple[str, str]]:
    """Node -> (state, reason), once per node (sinfo lists a node once per partition)."""
    nodes: dict[str, tuple[str, str]] = {}
    for line in sinfo_output.splitlines():
        name, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        if name:
            nodes[name] = (state.strip().lower(), reason.strip())
    return nodes


def _ours(state: str, reason: str, prefix: str) -> bool:
    """Drained (or draining) with a reason starting with ``prefix``: the upgrade's own drain."""
    return state.startswith("drain") and reason.startswith(prefix)


def carme_upgrade_nodes_to_drain(sinfo_output: str, prefix: str) -> list[str]:
    """The nodes not yet drained for the upgrade, sorted."""
    return sorted(name for name, (state, reason) in _nodes(sinfo_output).items() if not _ours(state, reason, prefix))


def carme_upgrade_nodes_drained(sinfo_output: str, prefix: str) -> list[str]:
    """The nodes drained for the upgrade (to resume), sorted."""
    return sorted(name for name, (state, reason) in _nodes(sinfo_output).items() if _ours(state, reason, prefix))


def carme_upgrade_jobs(scontrol_output: str) -> list[dict[str, Any]]:
    """Each job as ``{id, state, running, pending, session, requeue}``: ``session`` when its comment marks a portal
    session, ``requeue`` when Slurm can requeue it (a batch job with Requeue=1) and it is no session."""
    jobs: list[dict[str, Any]] = []
    for line in scontrol_output.splitlines():
        fields = dict(token.split("=", 1) for token in line.split() if "=" in token)
        if not fields.get("JobId"):
            continue  # "No jobs in the system"
        state = fields.get("JobState", "").upper()
        session = fields.get("Comment", "").split(";", 1)[0] == SESSION_COMMENT
        jobs.append({
            "id": fields["JobId"], "state": state, "session": session,
            "running": state in ("RUNNING", "SUSPENDED", "CONFIGURING"),
            "pending": state in ("PENDING", "REQUEUED"),
            "requeue": fields.get("Requeue") == "1" and fields.get("BatchFlag") == "1" and not session,
        })  # fmt: skip
    return jobs


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "carme_upgrade_nodes_to_drain": carme_upgrade_nodes_to_drain,
            "carme_upgrade_nodes_drained": carme_upgrade_nodes_drained,
            "carme_upgrade_jobs": carme_upgrade_jobs,
        }
