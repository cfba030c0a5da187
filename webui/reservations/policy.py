# SPDX-License-Identifier: GPL-3.0-or-later
"""What the portal allows a user to reserve (issue 16). Pure: no Flask, no database, no Slurm.

A request names GPUs, nodes and a time window. :func:`decide` says whether it is refused outright (a 400 naming the
form field: too many GPUs or nodes, too short or long, too far ahead, in the past, overlapping the user's own), sent
to an administrator (over the user's monthly budget), or approved at once (within it, when auto-approval is on).

Budget: the GPU-hours a user has used this month (Slurm's accounting) plus the GPU-hours of their reservations this
month (reserved, used or not) plus the new request's, against ``gpu_hours_per_month``; and the reserved GPU-hours
alone against ``max_reserved_gpu_hours_per_month``. A window across a month's end counts in each month for its part.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

APPROVE = "approve"
PENDING = "pending"


@dataclass(frozen=True)
class ReservationPolicy:
    max_gpus: int = 2  # per request, all nodes together
    max_nodes: int = 1
    max_reserved_gpu_hours_per_month: float = 48.0
    max_days_ahead: int = 30
    min_minutes: int = 30
    max_minutes: int = 8 * 60
    auto_approve: bool = True
    # A start this far in the past still counts as "now" (the form's clock and the server's differ a little).
    start_grace_minutes: int = 5


@dataclass(frozen=True)
class Window:
    """A time window with GPUs: a request, or a reservation already held. Times are aware datetimes."""

    start: dt.datetime
    end: dt.datetime
    gpus: int

    @property
    def hours(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds() / 3600.0)

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.hours

    def overlaps(self, other: Window) -> bool:
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True)
class Refusal:
    field: str
    message: str


@dataclass(frozen=True)
class Decision:
    """``outcome`` is ``approve`` or ``pending``; ``reason`` says why (shown to the user, kept in the audit log)."""

    outcome: str
    reason: str


class PolicyRefused(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def month_bounds(when: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The start of ``when``'s month and of the next one (same time zone as ``when``)."""
    start = when.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start, nxt


def gpu_hours_in(window: Window, start: dt.datetime, end: dt.datetime) -> float:
    """GPU-hours of ``window`` that fall between ``start`` and ``end``."""
    lo, hi = max(window.start, start), min(window.end, end)
    if hi <= lo:
        return 0.0
    return window.gpus * (hi - lo).total_seconds() / 3600.0


def reserved_gpu_hours(windows: Iterable[Window], month_of: dt.datetime) -> float:
    """GPU-hours of ``windows`` inside the month of ``month_of``."""
    start, end = month_bounds(month_of)
    return sum(gpu_hours_in(w, start, end) for w in windows)


def check(policy: ReservationPolicy, request: Window, nodes: int, now: dt.datetime, own: Iterable[Window]) -> None:
    """Raise :class:`PolicyRefused` naming the field when the request breaks a hard limit."""
    if not 1 <= nodes <= policy.max_nodes:
        raise PolicyRefused("nodes", f"must be between 1 and {policy.max_nodes}")
    if not 1 <= request.gpus <= policy.max_gpus:
        raise PolicyRefused("gpus", f"must be between 1 and {policy.max_gpus}")
    if request.gpus < nodes:
        raise PolicyRefused("gpus", "must be at least one per node")
    if request.start < now - dt.timedelta(minutes=policy.start_grace_minutes):
        raise PolicyRefused("start", "lies in the past")
    if request.start > now + dt.timedelta(days=policy.max_days_ahead):
        raise PolicyRefused("start", f"may be at most {policy.max_days_ahead} days ahead")
    minutes = (request.end - request.start).total_seconds() / 60.0
    if minutes < policy.min_minutes:
        raise PolicyRefused("end", f"the reservation must last at least {policy.min_minutes} minutes")
    if minutes > policy.max_minutes:
        raise PolicyRefused("end", f"the reservation may last at most {policy.max_minutes} minutes")
    for other in own:
        if request.overlaps(other):
            raise PolicyRefused(
                "start",
                f"overlaps your own reservation or request from {other.start:%Y-%m-%d %H:%M} "
                f"to {other.end:%Y-%m-%d %H:%M} UTC",
            )


def decide(
    policy: ReservationPolicy,
    request: Window,
    nodes: int,
    now: dt.datetime,
    *,
    own: Iterable[Window],
    used_gpu_hours: float | None,
    budget_gpu_hours: float,
) -> Decision:
    """Check the hard limits (:class:`PolicyRefused`), then approve within the budget or leave it to an admin.

    ``own``: the user's reservations and open requests (for overlaps and the reserved GPU-hours);
    ``used_gpu_hours``: used this month per Slurm's accounting, ``None`` when unknown (never read as "nothing").
    """
    own = list(own)
    check(policy, request, nodes, now, own)
    if not policy.auto_approve:
        return Decision(PENDING, "every reservation is approved by an administrator on this cluster")
    # Each month the request touches is checked on its own.
    month = month_bounds(request.start)[0]
    while month < request.end:
        start, end = month_bounds(month)
        new = gpu_hours_in(request, start, end)
        reserved = sum(gpu_hours_in(w, start, end) for w in own)
        if reserved + new > policy.max_reserved_gpu_hours_per_month:
            return Decision(
                PENDING,
                f"{reserved + new:.1f} reserved GPU-hours in {month:%B %Y} exceed the "
                f"{policy.max_reserved_gpu_hours_per_month:g} approved without an administrator",
            )
        if start <= now < end:  # usage is known for the current month only
            if used_gpu_hours is None:
                return Decision(PENDING, "your GPU-hours used this month cannot be read from Slurm right now")
            spent = used_gpu_hours
        else:
            spent = 0.0
        if spent + reserved + new > budget_gpu_hours:
            return Decision(
                PENDING,
                f"{spent + reserved + new:.1f} GPU-hours (used and reserved) in {month:%B %Y} exceed your "
                f"monthly budget of {budget_gpu_hours:g}",
            )
        month = end
    return Decision(APPROVE, "within your monthly budget")
