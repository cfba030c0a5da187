# SPDX-License-Identifier: GPL-3.0-or-later
"""A user's quota policy: their own row, else the default row, else the settings (``QUOTA_DEFAULT_*``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from flask import current_app
from sqlalchemy import bindparam
from sqlalchemy import select

from webui.caches import cached_view
from webui.extensions import db
from webui.models import QuotaPolicy
from webui.models import utcnow


@dataclass(frozen=True)
class Policy:
    gpu_hours_per_month: float
    max_gpus_per_session: int
    max_sessions: int
    max_time_minutes: int
    source: str


# Built once, bound per call: the user's own policy row and the default row (columns, no ORM objects).
_POLICY_ROWS = select(
    QuotaPolicy.username,
    QuotaPolicy.gpu_hours_per_month,
    QuotaPolicy.max_gpus_per_session,
    QuotaPolicy.max_sessions,
    QuotaPolicy.max_time_minutes,
).where((QuotaPolicy.username == bindparam("username")) | (QuotaPolicy.username.is_(None)))


def effective_policy(username: str, *, cached: bool = False) -> Policy:
    """The user's quota policy (their own row, else the default row, else the settings).

    ``cached``: for display only, may be ``QUOTA_CACHE_SECONDS`` old (see :func:`webui.caches.view_cache`).
    """
    if cached:
        ttl = float(current_app.config["QUOTA_CACHE_SECONDS"])
        return cached_view(("policy", username), lambda: effective_policy(username), ttl)
    rows = db.session.execute(_POLICY_ROWS, {"username": username})
    by_name = {r.username: r for r in rows}
    row = by_name.get(username) or by_name.get(None)
    if row is not None:
        return Policy(
            row.gpu_hours_per_month,
            row.max_gpus_per_session,
            row.max_sessions,
            row.max_time_minutes,
            "user" if row.username else "default",
        )
    cfg = current_app.config
    return Policy(
        float(cfg["QUOTA_DEFAULT_GPU_HOURS_PER_MONTH"]),
        int(cfg["QUOTA_DEFAULT_MAX_GPUS_PER_SESSION"]),
        int(cfg["QUOTA_DEFAULT_MAX_SESSIONS"]),
        int(cfg["QUOTA_DEFAULT_MAX_TIME_MINUTES"]),
        "built-in",
    )


def month_start(now: dt.datetime | None = None) -> dt.datetime:
    now = now or utcnow()
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
