# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's picture of the cluster: jobs, nodes, partitions and one shared snapshot of them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from carme_runtime.slurm_formats import ENDED_STATES
from carme_runtime.slurm_formats import UNFINISHED_STATES
from carme_runtime.slurm_formats import parse_comment
from webui.slurm.dns import resolve_addresses


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    state: str


@dataclass(frozen=True)
class Job:
    job_id: int
    user: str
    name: str
    state: str
    partition: str
    gpus: int
    nodes: tuple[str, ...] = ()
    start_time: int = 0
    end_time: int = 0
    time_limit_minutes: int = 0
    comment: str = ""
    reason: str = ""
    account: str = ""  # the Slurm account (project) it runs in

    @property
    def active(self) -> bool:
        """Pending or running (or about to: configuring, completing, requeued)."""
        return self.state in UNFINISHED_STATES

    @property
    def ended(self) -> bool:
        """Over for good (:data:`ENDED_STATES`)."""
        return self.state in ENDED_STATES

    def endpoint(self) -> Endpoint | None:
        """Parse ``carme:v1;app=..;host=..;port=..;state=..`` published by ``carme-launch``."""
        fields = parse_comment(self.comment or "")
        if fields is None:
            return None
        host, port, state = fields.get("host", ""), fields.get("port", ""), fields.get("state", "")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}", host) or not port.isdigit():
            return None
        port_no = int(port)
        if not 1024 <= port_no <= 65535:
            return None
        return Endpoint(host=host, port=port_no, state=state)

    def seconds_left(self, now: float) -> int | None:
        if self.state != "RUNNING" or not self.time_limit_minutes or not self.start_time:
            return None
        return max(0, int(self.start_time + self.time_limit_minutes * 60 - now))


@dataclass(frozen=True)
class Node:
    name: str
    state: str
    gpus_total: int
    gpus_used: int
    partitions: tuple[str, ...] = ()
    address: str = ""
    hostname: str = ""

    @property
    def usable(self) -> bool:
        bad = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "MAINT", "INVAL")
        return not any(b in self.state.upper() for b in bad)


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: tuple[str, ...]
    max_time_minutes: int | None
    state: str
    is_default: bool = False


@dataclass(frozen=True)
class ClusterState:
    """One snapshot of the scheduler, shared by every request until the next refresh.

    Views derived from it (jobs by id and by user, GPU usage) are computed once per snapshot, on first use,
    and kept on it: a refresh makes a new snapshot, so they never outlive the data they were computed from.
    They are shared by all requests (and threads) and must not be modified.
    """

    jobs: tuple[Job, ...] = ()
    nodes: tuple[Node, ...] = ()
    partitions: tuple[Partition, ...] = ()
    fetched_at: float = 0.0
    error: str | None = None  # set when the last refresh failed; data is then the last good copy

    @cached_property
    def _jobs_by_id(self) -> dict[int, Job]:
        by_id: dict[int, Job] = {}
        for j in self.jobs:
            by_id.setdefault(j.job_id, j)
        return by_id

    @cached_property
    def _jobs_by_user(self) -> dict[str, tuple[Job, ...]]:
        by_user: dict[str, list[Job]] = {}
        for j in self.jobs:
            by_user.setdefault(j.user, []).append(j)
        return {user: tuple(jobs) for user, jobs in by_user.items()}

    def jobs_of(self, user: str) -> list[Job]:
        return list(self._jobs_by_user.get(user, ()))

    def job(self, job_id: int) -> Job | None:
        return self._jobs_by_id.get(job_id)

    def node_names_for(self, names: Sequence[str]) -> set[str]:
        """Names, addresses and hostnames of the given nodes (what a job may publish as host).

        Slurm's NodeAddr is often the node's name; the launcher publishes the address it bound to, so the
        names are also resolved (the resolver's answer for a name Slurm gave, never for the published host).
        """
        wanted = set(names)
        out = set(wanted)
        for n in self.nodes:
            if n.name in wanted:
                out.update(x for x in (n.address, n.hostname) if x)
        for name in list(out):
            out.update(resolve_addresses(name))
        return out

    def max_gpus_per_node(self, partition: str | None) -> int:
        nodes = self.nodes
        if partition:
            part = next((p for p in self.partitions if p.name == partition), None)
            members = set(part.nodes) if part else set()
            nodes = tuple(n for n in nodes if n.name in members or partition in n.partitions)
        return max((n.gpus_total for n in nodes if n.usable), default=0)

    def gpu_usage(self) -> dict[str, list[dict[str, Any]]]:
        """Free/used/queued GPUs per node and per partition (computed once per snapshot; do not modify)."""
        return self._gpu_usage

    @cached_property
    def _gpu_usage(self) -> dict[str, list[dict[str, Any]]]:
        queued: dict[str, int] = {}
        for j in self.jobs:
            if j.state == "PENDING":
                for part in j.partition.split(","):
                    queued[part] = queued.get(part, 0) + j.gpus
        per_node = [
            {
                "name": n.name,
                "state": n.state,
                "total": n.gpus_total,
                "used": n.gpus_used,
                "free": max(0, n.gpus_total - n.gpus_used) if n.usable else 0,
            }
            for n in self.nodes
        ]
        per_part = []
        for p in self.partitions:
            members = [n for n in self.nodes if n.name in p.nodes]
            per_part.append(
                {
                    "name": p.name,
                    "state": p.state,
                    "total": sum(n.gpus_total for n in members),
                    "used": sum(n.gpus_used for n in members),
                    "free": sum(max(0, n.gpus_total - n.gpus_used) for n in members if n.usable),
                    "queued": queued.get(p.name, 0),
                }
            )
        return {"nodes": per_node, "partitions": per_part}
