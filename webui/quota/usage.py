# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU-hours used this month (Slurm's accounting, through the scheduler), for decisions and for display."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from flask import current_app

from webui.caches import Shown
from webui.caches import StaleWhileRefresh
from webui.models import utcnow
from webui.quota.carryover import carried_gpu_hours
from webui.quota.limits import user_limits
from webui.slurm.scheduler import current_scheduler

#: After a failed GPU-hour read (slurmdbd or slurmrestd down) the dashboard asks Slurm again no sooner than this.
USAGE_FAILURE_CACHE_SECONDS = 10.0
#: A key's very first dashboard look waits at most this long for its GPU-hours (then shows them as unknown).
USAGE_FIRST_WAIT_SECONDS = 2.0


def month_start(now: dt.datetime | None = None) -> dt.datetime:
    now = now or utcnow()
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def usage_display() -> StaleWhileRefresh:
    """The per-worker GPU-hours the dashboard shows (:class:`webui.caches.StaleWhileRefresh`), made on first use
    in the worker (its refresh threads too: nothing of it exists in a preloading gunicorn master)."""
    shown: StaleWhileRefresh | None = current_app.extensions.get("carme_usage_display")
    if shown is None:
        ttl = float(current_app.config["QUOTA_CACHE_SECONDS"])
        made = StaleWhileRefresh(
            ttl,
            failure=min(ttl, USAGE_FAILURE_CACHE_SECONDS),
            max_stale=5 * ttl,
            first_wait=USAGE_FIRST_WAIT_SECONDS,
        )
        shown = current_app.extensions.setdefault("carme_usage_display", made)
    return shown


def gpu_hours_used(username: str, *, cached: bool = False) -> float | None:
    """GPU-hours this month from Slurm's accounting; ``None`` when Slurm cannot say right now.

    Not ``cached`` (decisions: the start's budget check, reservations): the scheduler's value, at most
    ``QUOTA_CACHE_SECONDS`` old, read now when older. ``cached`` (display): see :func:`gpu_hours_shown`.
    Both add what the user used this month before the upgrade (:func:`webui.quota.carryover.carried_gpu_hours`).
    """
    if not cached:
        return _with_carried(username, current_scheduler().gpu_hours_used(username, month_start()))
    return gpu_hours_shown(username).value


def _with_carried(username: str, used: float | None) -> float | None:
    return None if used is None else used + carried_gpu_hours(username)


def gpu_hours_shown(username: str) -> Shown:
    """For display only: the last known value and when it was read, at once; older than ``QUOTA_CACHE_SECONDS`` it is
    refreshed in the background (one refresh per user per worker), a failure is retried after
    ``USAGE_FAILURE_CACHE_SECONDS`` (the last value stays shown up to ``5 * QUOTA_CACHE_SECONDS``). Only a user's
    first look in a worker waits, at most ``USAGE_FIRST_WAIT_SECONDS``."""
    since = month_start()
    sched = current_scheduler()  # the refresh runs outside the request: it takes the object, not the app context
    shown = usage_display().get((username, since.isoformat()), lambda: sched.gpu_hours_used(username, since))
    return Shown(_with_carried(username, shown.value), shown.as_of)


def quota_view(username: str, *, cached: bool = False) -> dict[str, Any]:
    """The user's limits from Slurm (:func:`webui.quota.limits.user_limits`) and GPU-hours used this month (rounded;
    ``None``: Slurm cannot say), ``percent`` of the budget (``None``: none, or unknown). ``cached``: for display
    (:func:`gpu_hours_shown`, the limits from the view cache)."""
    limits = user_limits(username, cached=cached)
    if cached:
        shown = gpu_hours_shown(username)
        used, as_of = shown.value, shown.as_of
    else:
        used, as_of = gpu_hours_used(username), time.time()
    budget = limits.gpu_hours_per_month
    return {
        "used_gpu_hours": None if used is None else round(used, 2),
        "used_as_of": None if used is None or as_of is None else dt.datetime.fromtimestamp(as_of, dt.UTC),
        "limit_gpu_hours": None if budget is None else round(budget, 2),
        "left_gpu_hours": None if used is None or budget is None else round(max(0.0, budget - used), 2),
        "percent": None if used is None or not budget else min(100, round(100 * used / budget)),
        "limits": limits,
    }
