# SPDX-License-Identifier: GPL-3.0-or-later
"""The limits Slurm holds for a user (issue 31, one source of truth): their associations and the QOS, as slurmdbd
reports them (``GET /slurmdb/.../associations`` and ``.../qos``), read as the service user and cached.

The inventory declares them (the slurm role's ``slurm_qos``, ``slurm_accounts`` and ``slurm_users``, applied by its
``slurm_accounting`` module); the portal only reads them (:mod:`webui.quota.limits` turns them into what a user may
ask for). ``None`` in a field: Slurm sets no such limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from typing import Protocol

from carme_runtime import slurmrest
from webui.caches import SingleFlight

#: slurmdbd's "not set" values (NO_VAL, INFINITE) and anything above
_UNSET = 0xFFFFFFFE


def limit_value(value: int | None) -> int | None:
    """A limit as Slurm reports it, ``None`` where unset or infinite."""
    return None if value is None or value < 0 or value >= _UNSET else value


def _gpus(tres: Mapping[str, int]) -> int | None:
    return limit_value(tres.get("gres/gpu"))


@dataclass(frozen=True)
class AssocLimits:
    """One association's own limits (``user`` "" for the account's own association)."""

    account: str
    user: str
    parent_account: str = ""
    is_default: bool = False
    default_qos: str = ""
    gpu_minutes: int | None = None  # GrpTRESMins=gres/gpu
    gpus_total: int | None = None  # GrpTRES=gres/gpu
    gpus_per_job: int | None = None  # MaxTRESPerJob=gres/gpu
    max_jobs: int | None = None  # MaxJobs
    max_wall_minutes: int | None = None  # MaxWallDurationPerJob

    @property
    def name(self) -> str:
        return f"{self.user}@{self.account}" if self.user else self.account


@dataclass(frozen=True)
class QosLimits:
    name: str
    max_wall_minutes: int | None = None  # MaxWall
    gpus_per_job: int | None = None  # MaxTRESPerJob=gres/gpu
    gpus_per_user: int | None = None  # MaxTRESPerUser=gres/gpu
    max_jobs_per_user: int | None = None  # MaxJobsPerUser


def parse_association(raw: Mapping[str, Any]) -> AssocLimits:
    a = slurmrest.association_record(raw)
    return AssocLimits(
        account=a["account"],
        user=a["user"],
        parent_account=a["parent_account"],
        is_default=a["is_default"],
        default_qos=a["default_qos"],
        gpu_minutes=_gpus(a["grp_tres_minutes"]),
        gpus_total=_gpus(a["grp_tres"]),
        gpus_per_job=_gpus(a["max_tres_per_job"]),
        max_jobs=limit_value(a["max_jobs"]),
        max_wall_minutes=limit_value(a["max_wall"]),
    )


def parse_qos(raw: Mapping[str, Any]) -> QosLimits:
    q = slurmrest.qos_record(raw)
    return QosLimits(
        name=q["name"],
        max_wall_minutes=limit_value(q["max_wall"]),
        gpus_per_job=_gpus(q["max_tres_per_job"]),
        gpus_per_user=_gpus(q["max_tres_per_user"]),
        max_jobs_per_user=limit_value(q["max_jobs_per_user"]),
    )


class LimitSource(Protocol):
    """What :class:`LimitReader` asks Slurm (:class:`webui.slurm.client.SlurmClient`)."""

    def associations(self, user: str, *, of_user: str | None = None) -> list[dict[str, Any]]: ...

    def qos(self, user: str) -> list[dict[str, Any]]: ...


class LimitReader:
    """Associations and QOS, each read at most once per ``ttl`` seconds per process (single-flight). A user missing
    from the service user's view (``PrivateData=users`` without Operator) has their own associations asked with their
    own token."""

    def __init__(self, client: LimitSource, service_user: str, ttl: float) -> None:
        self.client = client
        self.service_user = service_user
        self._all: SingleFlight[tuple[list[dict[str, Any]], list[AssocLimits]]] = SingleFlight(ttl)
        self._own: SingleFlight[list[AssocLimits]] = SingleFlight(ttl)
        self._qos: SingleFlight[dict[str, QosLimits]] = SingleFlight(ttl)

    def _every(self, max_age: float | None = None) -> tuple[list[dict[str, Any]], list[AssocLimits]]:
        def fetch() -> tuple[list[dict[str, Any]], list[AssocLimits]]:
            raw = self.client.associations(self.service_user)
            return raw, _parsed(raw)

        return self._all.get("all", fetch, max_age=max_age)

    def all_associations(self, max_age: float | None = None) -> list[dict[str, Any]]:
        """Every association as slurmrestd gives it (the projects read their members and budgets from the same)."""
        return self._every(max_age)[0]

    def associations_of(self, user: str) -> list[AssocLimits]:
        """The user's associations and those of the accounts above them (the account's own, ``user`` "")."""
        every = self._every()[1]
        if not any(a.user == user for a in every):
            every = every + self._own.get(user, lambda: _parsed(self.client.associations(user, of_user=user)))
        return relevant(every, user)

    def qos_limits(self) -> dict[str, QosLimits]:
        return self._qos.get("all", lambda: {q.name: q for q in map(parse_qos, self.client.qos(self.service_user))})


def _parsed(raw: Sequence[Mapping[str, Any]]) -> list[AssocLimits]:
    return [parse_association(a) for a in raw]


def relevant(assocs: Sequence[AssocLimits], user: str) -> list[AssocLimits]:
    """``user``'s associations, then the account associations above each (nearest first), each once."""
    mine = [a for a in assocs if a.user == user]
    above: list[AssocLimits] = []
    for a in mine:
        above.extend(p for p in chain_of(assocs, a)[1:] if p not in above)
    return mine + above


def chain_of(assocs: Sequence[AssocLimits], assoc: AssocLimits) -> list[AssocLimits]:
    """``assoc``, then its account's own association and those above it up to (not including) ``root``: the order in
    which Slurm looks for a limit (after the QOS)."""
    by_account = {a.account: a for a in assocs if not a.user}
    out, parent = [assoc], by_account.get(assoc.account)
    while parent is not None and parent.account != "root" and parent not in out:
        out.append(parent)
        parent = by_account.get(parent.parent_account)
    return out
