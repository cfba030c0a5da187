# SPDX-License-Identifier: GPL-3.0-or-later
"""slurmrestd v0.0.38 records (jobs, nodes, partitions) to :mod:`webui.slurm.state` objects, and slurmdbd's job
records to :class:`AccountJob`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from carme_runtime.hostlist import expand_hostlist
from carme_runtime.slurm_formats import count_gpus
from webui.slurm.state import Job
from webui.slurm.state import Node
from webui.slurm.state import Partition


def int_field(value: Any, default: int = 0) -> int:
    """An integer field of a record (plain, or v0.0.39+ ``{"set": true, "number": n}``); ``default`` if unset."""
    if isinstance(value, dict):  # v0.0.39+ style {"set": true, "number": n}
        value = value.get("number", default)
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def parse_job(raw: Mapping[str, Any]) -> Job:
    state = raw.get("job_state") or ""
    if isinstance(state, list):
        state = state[0] if state else ""
    state = str(state).upper()
    tres = str(raw.get("tres_alloc_str") or "") if state != "PENDING" else ""
    gpus = (
        count_gpus(tres)
        or count_gpus(str(raw.get("tres_per_node") or ""))
        or count_gpus(str(raw.get("tres_req_str") or ""))
    )
    return Job(
        job_id=int_field(raw.get("job_id")),
        user=str(raw.get("user_name") or ""),
        name=str(raw.get("name") or ""),
        state=state,
        partition=str(raw.get("partition") or ""),
        gpus=gpus,
        nodes=tuple(expand_hostlist(str(raw.get("nodes") or ""))),
        start_time=int_field(raw.get("start_time")),
        end_time=int_field(raw.get("end_time")),
        time_limit_minutes=int_field(raw.get("time_limit")),
        comment=str(raw.get("comment") or ""),
        reason=str(raw.get("state_reason") or ""),
    )


def parse_node(raw: Mapping[str, Any]) -> Node:
    state = raw.get("state") or ""
    flags = raw.get("state_flags") or []
    state_text = "+".join([str(state), *map(str, flags)]) if flags else str(state)
    return Node(
        name=str(raw.get("name") or ""),
        state=state_text.lower(),
        gpus_total=count_gpus(str(raw.get("gres") or "")),
        gpus_used=count_gpus(str(raw.get("gres_used") or "")),
        partitions=tuple(str(p) for p in raw.get("partitions") or []),
        address=str(raw.get("address") or ""),
        hostname=str(raw.get("hostname") or ""),
    )


def parse_partition(raw: Mapping[str, Any]) -> Partition:
    max_time = raw.get("max_time_limit", raw.get("maximum_time"))
    limit = int_field(max_time, -1)
    flags = [str(f).upper() for f in raw.get("flags") or []]
    return Partition(
        name=str(raw.get("name") or ""),
        nodes=tuple(expand_hostlist(str(raw.get("nodes") or ""))),
        # INFINITE is 0xffffffff in 22.05; treat anything huge or negative as "no limit".
        max_time_minutes=limit if 0 < limit < 0xFFFFFFFE else None,
        state=str(raw.get("state") or "").lower(),
        is_default="DEFAULT" in flags,
    )


@dataclass(frozen=True)
class AccountJob:
    """One job of Slurm's accounting (slurmdbd): what the history page shows of it."""

    job_id: int
    user: str
    name: str
    state: str
    start_time: int  # epoch; 0 = never started
    end_time: int
    elapsed: int  # seconds
    gpu_hours: float
    comment: str  # the job's comment (the launcher's ``carme:v1;...``)
    workdir: str
    std_out: str  # as recorded (with %j etc.), "" when this Slurm does not record it


def parse_account_job(raw: Mapping[str, Any], gpu_hours: float) -> AccountJob:
    """A slurmdb v0.0.38 job record (``std_out`` is recorded by newer Slurm only)."""
    state = raw.get("state") or {}
    current = state.get("current") if isinstance(state, Mapping) else state
    times = raw.get("time") or {}
    comment = raw.get("comment") or {}
    return AccountJob(
        job_id=int_field(raw.get("job_id")),
        user=str(raw.get("user") or ""),
        name=str(raw.get("name") or ""),
        state=str(current or "").upper(),
        start_time=int_field(times.get("start")),
        end_time=int_field(times.get("end")),
        elapsed=int_field(times.get("elapsed")),
        gpu_hours=gpu_hours,
        comment=str((comment.get("job") if isinstance(comment, Mapping) else comment) or ""),
        workdir=str(raw.get("working_directory") or ""),
        std_out=str(raw.get("std_out") or ""),
    )
