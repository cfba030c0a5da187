# SPDX-License-Identifier: GPL-3.0-or-later
"""slurmrestd's records (jobs, nodes, partitions) to :mod:`webui.slurm.state` objects, and slurmdbd's job records to
:class:`AccountJob`. Each is read in Carme's dialect (:mod:`carme_runtime.slurmrest`), whatever the version."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from carme_runtime import slurmrest
from carme_runtime.gpu_hours import job_record as usage_record
from carme_runtime.hostlist import expand_hostlist
from carme_runtime.slurm_formats import count_gpus
from webui.slurm.state import Job
from webui.slurm.state import Node
from webui.slurm.state import Partition


def int_field(value: Any, default: int = 0) -> int:
    """An integer field of a record (plain, or v0.0.40+ ``{"set": true, "number": n}``); ``default`` if unset."""
    return slurmrest.number(value, default)


def parse_job(raw: Mapping[str, Any]) -> Job:
    rec = slurmrest.job_record(raw)
    state = str(rec["job_state"]).upper()
    tres = rec["tres_alloc_str"] if state != "PENDING" else ""
    gpus = count_gpus(tres) or count_gpus(rec["tres_per_node"]) or count_gpus(rec["tres_req_str"])
    return Job(
        job_id=rec["job_id"],
        user=rec["user_name"],
        name=rec["name"],
        state=state,
        partition=rec["partition"],
        gpus=gpus,
        nodes=tuple(expand_hostlist(rec["nodes"])),
        start_time=rec["start_time"],
        end_time=rec["end_time"],
        time_limit_minutes=rec["time_limit"],
        comment=rec["comment"],
        reason=rec["state_reason"],
        account=rec["account"],
    )


def parse_node(raw: Mapping[str, Any]) -> Node:
    rec = slurmrest.node_record(raw)
    state_text = "+".join([rec["state"], *rec["state_flags"]])
    return Node(
        name=rec["name"],
        state=state_text.lower(),
        gpus_total=count_gpus(rec["gres"]),
        gpus_used=count_gpus(rec["gres_used"]),
        partitions=tuple(rec["partitions"]),
        address=rec["address"],
        hostname=rec["hostname"],
    )


def parse_partition(raw: Mapping[str, Any]) -> Partition:
    rec = slurmrest.partition_record(raw)
    limit = rec["max_time_limit"]
    return Partition(
        name=rec["name"],
        nodes=tuple(expand_hostlist(rec["nodes"])),
        # INFINITE is 0xffffffff; treat anything huge or negative as "no limit".
        max_time_minutes=limit if 0 < limit < 0xFFFFFFFE else None,
        state=rec["state"].lower(),
        is_default="DEFAULT" in (f.upper() for f in rec["flags"]),
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
    account: str = ""
    gpus: int = 0


#: the Organization of the accounts the portal creates (webui.projects.accounting)
PORTAL_ORGANIZATION = "carme-portal"


@dataclass(frozen=True)
class SlurmProject:
    """A project is a Slurm account: its coordinators manage it, its users' associations are its members, and the
    GrpTRESMins of its own association (``gres/gpu``) is its GPU budget per period (``None``: none)."""

    name: str
    description: str
    managers: tuple[str, ...]
    members: tuple[str, ...]
    gpu_minutes: int | None
    #: who owns it: "portal" (an account the portal made, Organization carme-portal) or "inventory"
    source: str = "inventory"


def parse_projects(accounts: Sequence[Mapping[str, Any]], assocs: Sequence[Mapping[str, Any]]) -> list[SlurmProject]:
    """The projects (every account but ``root``) from slurmdbd's accounts and associations, by name."""
    members: dict[str, set[str]] = {}
    budget: dict[str, int] = {}
    for raw in assocs:
        a = slurmrest.association_record(raw)
        if a["user"] and a["user"] != "root":  # Slurm's own root association is nobody's membership
            members.setdefault(a["account"], set()).add(a["user"])
        elif "gres/gpu" in a["grp_tres_minutes"] and 0 <= a["grp_tres_minutes"]["gres/gpu"] < slurmrest.INFINITE:
            budget[a["account"]] = a["grp_tres_minutes"]["gres/gpu"]
    out = []
    for raw in accounts:
        acct = slurmrest.account_record(raw)
        if acct["name"] and acct["name"] != "root":
            name = acct["name"]
            out.append(
                SlurmProject(
                    name=name,
                    description=acct["description"],
                    managers=tuple(acct["coordinators"]),
                    members=tuple(sorted(members.get(name, ()))),
                    gpu_minutes=budget.get(name),
                    source="portal" if acct["organization"] == PORTAL_ORGANIZATION else "inventory",
                )
            )
    return sorted(out, key=lambda p: p.name)


def parse_account_job(raw: Mapping[str, Any], gpu_hours: float) -> AccountJob:
    """A slurmdbd job record of any version (``std_out`` is recorded by newer Slurm only)."""
    rec = slurmrest.account_job_record(raw)
    times = rec["time"]
    return AccountJob(
        job_id=rec["job_id"],
        user=rec["user"],
        name=rec["name"],
        state=rec["state"]["current"].upper(),
        start_time=times["start"],
        end_time=times["end"],
        elapsed=times["elapsed"],
        gpu_hours=gpu_hours,
        comment=rec["comment"]["job"],
        workdir=rec["working_directory"],
        std_out=rec["std_out"],
        account=rec["account"],
        gpus=usage_record(raw).gpus,
    )
