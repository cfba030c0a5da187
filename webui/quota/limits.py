# SPDX-License-Identifier: GPL-3.0-or-later
"""What a user may ask for, as Slurm enforces it (issue 31: one source of truth for limits).

Read from Slurm's association and QOS records (:mod:`webui.slurm.limits`, cached by the scheduler), in Slurm's own
order: the session's QOS (``SESSION_QOS``, else the association's default QOS) first, then the user's association,
then the accounts above it; the first one that sets a limit gives it. The portal keeps no limits of its own: a limit
Slurm does not set is "no limit" here (Slurm still enforces what it has), and every figure names where it comes from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace

from flask import current_app

from webui.caches import view_cache
from webui.quota.carryover import declared_gpu_minutes
from webui.slurm.errors import SlurmError
from webui.slurm.limits import AssocLimits
from webui.slurm.limits import QosLimits
from webui.slurm.limits import chain_of
from webui.slurm.scheduler import current_scheduler

#: a failed read of the limits is shown (and asked again) after this long at most
FAILURE_CACHE_SECONDS = 10.0


@dataclass(frozen=True)
class Limit:
    """One limit: its value (``None``: Slurm sets none) and the record it comes from, as Slurm names it."""

    value: int | None = None
    source: str = ""

    @property
    def slurm(self) -> str:
        """Where Slurm holds it, with Slurm's own figure: ``QOS interactive MaxTRESPerUser=gres/gpu=1``."""
        return f"{self.source}={self.value}" if self.value is not None else "no limit in Slurm"


@dataclass(frozen=True)
class UserLimits:
    account: str | None = None  # the association a session is charged to (the user's default)
    qos: str | None = None  # the QOS a session runs in
    gpus_per_session: Limit = field(default_factory=Limit)
    sessions: Limit = field(default_factory=Limit)  # running jobs at a time
    gpu_minutes: Limit = field(default_factory=Limit)  # GPU-minutes per month (GrpTRESMins, reset monthly)
    time_minutes: Limit = field(default_factory=Limit)
    error: str | None = None  # Slurm could not say: nothing is known (Slurm enforces its limits anyway)

    @property
    def gpu_hours_per_month(self) -> float | None:
        return None if self.gpu_minutes.value is None else self.gpu_minutes.value / 60.0


def user_limits(username: str, *, cached: bool = False) -> UserLimits:
    """The user's limits from Slurm (:class:`UserLimits`; ``error`` set when Slurm cannot say).

    ``cached``: for display, may be ``QUOTA_CACHE_SECONDS`` old (a failed read ``FAILURE_CACHE_SECONDS``).
    """
    if cached:
        hit, value = view_cache().get(("limits", username))
        if hit:
            return value  # type: ignore[no-any-return]
    found = _read(username)
    if cached:
        ttl = FAILURE_CACHE_SECONDS if found.error else float(current_app.config["QUOTA_CACHE_SECONDS"])
        view_cache().put(("limits", username), found, ttl)
    return found


def _read(username: str) -> UserLimits:
    sched = current_scheduler()
    try:
        assocs, qos = sched.associations_of(username), sched.qos_limits()
    except SlurmError as exc:
        return UserLimits(error=str(exc) or "Slurm's accounting cannot be read")
    return with_carryover(limits_of(username, assocs, qos, current_app.config.get("SESSION_QOS")), username)


def with_carryover(limits: UserLimits, username: str) -> UserLimits:
    """The GPU budget as declared where Slurm holds it lowered by the minutes carried over the upgrade this month
    (:mod:`webui.quota.carryover`); named with Slurm's own figure and the carried minutes."""
    value, name = limits.gpu_minutes.value, f"{username}@{limits.account}"
    declared = declared_gpu_minutes(name, value)
    if value is None or declared == value or declared is None:
        return limits
    source = (f"association {name} GrpTRESMins=gres/gpu={value} this month (lowered by the GPU-minutes carried over "
              "the upgrade): declared gres/gpu")  # fmt: skip
    return replace(limits, gpu_minutes=Limit(declared, source))


def limits_of(
    username: str, assocs: Sequence[AssocLimits], qos: dict[str, QosLimits], session_qos: str | None
) -> UserLimits:
    """The limits a session of ``username`` meets in its default association (see the module's docstring)."""
    mine = [a for a in assocs if a.user == username]
    if not mine:
        return UserLimits()
    own = next((a for a in mine if a.is_default), mine[0])
    chain = chain_of(assocs, own)
    q = qos.get(session_qos or own.default_qos)
    gpu_caps = [
        _first(q, chain, "gpus_per_job", "MaxTRESPerJob=gres/gpu"),
        Limit(q.gpus_per_user, f"QOS {q.name} MaxTRESPerUser=gres/gpu")
        if q and q.gpus_per_user is not None
        else Limit(),
        *(Limit(a.gpus_total, f"association {a.name} GrpTRES=gres/gpu") for a in chain if a.gpus_total is not None),
    ]
    return UserLimits(
        account=own.account,
        qos=q.name if q else None,
        gpus_per_session=min((c for c in gpu_caps if c.value is not None), key=_value, default=Limit()),
        sessions=_first(q, chain, "max_jobs", "MaxJobs", qos_attr="max_jobs_per_user", qos_name="MaxJobsPerUser"),
        gpu_minutes=Limit(own.gpu_minutes, f"association {own.name} GrpTRESMins=gres/gpu")
        if own.gpu_minutes is not None
        else Limit(),
        time_minutes=_first(q, chain, "max_wall_minutes", "MaxWallDurationPerJob", qos_name="MaxWall"),
    )


def _value(limit: Limit) -> int:
    assert limit.value is not None
    return limit.value


def _first(
    q: QosLimits | None,
    chain: Sequence[AssocLimits],
    attr: str,
    name: str,
    *,
    qos_attr: str | None = None,
    qos_name: str | None = None,
) -> Limit:
    """The QOS's limit, else the first association's in ``chain`` that sets it."""
    if q is not None and getattr(q, qos_attr or attr) is not None:
        return Limit(getattr(q, qos_attr or attr), f"QOS {q.name} {qos_name or name}")
    for a in chain:
        if getattr(a, attr) is not None:
            return Limit(getattr(a, attr), f"association {a.name} {name}")
    return Limit()
