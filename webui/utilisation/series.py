# SPDX-License-Identifier: GPL-3.0-or-later
"""What the charts draw: the samples of a time range, grouped into at most :data:`MAX_POINTS` buckets.

A range up to :data:`sampler.RAW_KEEP` long is drawn from the raw samples; a longer one from the hourly rollups, and the
raw samples after the last rollup. Averages are weighted by each row's period; maxima are the rows' maxima.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func
from sqlalchemy import select

from webui.extensions import db
from webui.utilisation.models import HOUR
from webui.utilisation.models import MINUTE
from webui.utilisation.models import UtilisationSample
from webui.utilisation.sampler import RAW_KEEP

MAX_POINTS = 360

#: the ranges a chart offers: name, label, length
RANGES = {
    "6h": ("6 hours", dt.timedelta(hours=6)),
    "24h": ("24 hours", dt.timedelta(hours=24)),
    "7d": ("7 days", dt.timedelta(days=7)),
    "30d": ("30 days", dt.timedelta(days=30)),
    "365d": ("a year", dt.timedelta(days=365)),
}
DEFAULT_RANGE = "24h"


@dataclass(frozen=True)
class Point:
    """One bucket: it starts at ``time``; averages and maxima of the samples in it."""

    time: dt.datetime
    total: int
    used: float
    used_max: float
    idle: float
    down: float
    pending: float
    pending_max: float


def rows_in(since: dt.datetime, until: dt.datetime) -> list[UtilisationSample]:
    """The samples that describe ``[since, until)``, oldest first."""
    raw = select(UtilisationSample).where(UtilisationSample.period == MINUTE, UtilisationSample.time < until)
    if until - since <= RAW_KEEP:
        query = raw.where(UtilisationSample.time >= since)
        return list(db.session.execute(query.order_by(UtilisationSample.time)).scalars())
    hourly = select(UtilisationSample).where(
        UtilisationSample.period == HOUR, UtilisationSample.time >= since, UtilisationSample.time < until
    )
    rows = list(db.session.execute(hourly.order_by(UtilisationSample.time)).scalars())
    last = db.session.execute(select(func.max(UtilisationSample.time)).where(UtilisationSample.period == HOUR)).scalar()
    after = since if last is None else max(since, last.replace(tzinfo=dt.UTC) + dt.timedelta(hours=1))
    query = raw.where(UtilisationSample.time >= after)
    return rows + list(db.session.execute(query.order_by(UtilisationSample.time)).scalars())


def _account_values(row: UtilisationSample, account: str | None) -> tuple[float, float]:
    if account is None:
        return row.gpus_used, float(row.gpus_used_max)
    avg, peak = row.accounts.get(account, (0.0, 0.0))
    return float(avg), float(peak)


def _point(time: dt.datetime, group: Sequence[UtilisationSample], account: str | None) -> Point:
    weights = [float(r.period) for r in group]
    total_weight = sum(weights)

    def avg(values: Sequence[float]) -> float:
        return sum(v * w for v, w in zip(values, weights, strict=True)) / total_weight

    used = [_account_values(r, account) for r in group]
    return Point(
        time=time,
        total=max(r.gpus_total for r in group),
        used=avg([u[0] for u in used]),
        used_max=max(u[1] for u in used),
        idle=avg([r.gpus_idle for r in group]),
        down=avg([r.gpus_down for r in group]),
        pending=avg([r.jobs_pending for r in group]),
        pending_max=float(max(r.jobs_pending_max for r in group)),
    )


def bucket(
    rows: Sequence[UtilisationSample], since: dt.datetime, until: dt.datetime, account: str | None = None
) -> list[Point]:
    """The rows grouped into buckets of equal length (at least a minute) from ``since``; ``account``: GPUs in use are
    that account's."""
    width = max(60.0, (until - since).total_seconds() / MAX_POINTS)
    groups: dict[int, list[UtilisationSample]] = {}
    for row in rows:
        groups.setdefault(int((row.time - since).total_seconds() // width), []).append(row)
    return [_point(since + dt.timedelta(seconds=i * width), g, account) for i, g in sorted(groups.items())]


def series(until: dt.datetime, range_name: str, account: str | None = None) -> list[Point]:
    """The points of the range ``range_name`` (:data:`RANGES`) ending at ``until``."""
    since = until - RANGES[range_name][1]
    return bucket(rows_in(since, until), since, until, account)


def largest_step(range_name: str) -> float:
    """Seconds: points of the range further apart than this have samples missing between them (the portal or Slurm
    was down) and are drawn as separate lines."""
    length = RANGES[range_name][1]
    sample = float(MINUTE if length <= RAW_KEEP else HOUR)
    return 2.5 * max(sample, length.total_seconds() / MAX_POINTS)


@dataclass(frozen=True)
class AccountUse:
    """A project's (Slurm account's) GPUs in use over the range: the peak, and the average over every sample."""

    name: str
    peak: float
    average: float


def account_use(rows: Sequence[UtilisationSample]) -> list[AccountUse]:
    """The accounts that had GPUs in use in ``rows``, the busiest (by average) first."""
    weight = float(sum(r.period for r in rows)) or 1.0
    totals: dict[str, tuple[float, float]] = {}
    for row in rows:
        for name, (average, peak) in row.accounts.items():
            total, highest = totals.get(name, (0.0, 0.0))
            totals[name] = (total + float(average) * row.period, max(highest, float(peak)))
    found = [AccountUse(name, peak, total / weight) for name, (total, peak) in totals.items()]
    return sorted(found, key=lambda a: (-a.average, a.name))
