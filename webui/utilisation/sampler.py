# SPDX-License-Identifier: GPL-3.0-or-later
"""Sampling, downsampling and pruning, run by the timer (``flask carme-tick``), never by a page.

Each run reads Slurm afresh (``max_age=0``) and records one raw sample; then it rolls every complete hour that has raw
samples and no rollup yet into one hourly row (averages, and the maxima of GPUs in use and of the queue), and deletes
raw samples older than :data:`RAW_KEEP` and rollups older than :data:`HOURLY_KEEP`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

from sqlalchemy import delete
from sqlalchemy import func
from sqlalchemy import select

from webui.extensions import db
from webui.models import utcnow
from webui.slurm.scheduler import current_scheduler
from webui.slurm.state import ClusterState
from webui.utilisation.models import HOUR
from webui.utilisation.models import MINUTE
from webui.utilisation.models import UtilisationSample

log = logging.getLogger(__name__)

#: raw (minute) samples are kept this long, hourly rollups this long: more than a year
RAW_KEEP = dt.timedelta(days=2)
HOURLY_KEEP = dt.timedelta(days=400)


def sample_of(state: ClusterState, now: dt.datetime) -> UtilisationSample:
    """One raw sample of the snapshot: GPUs in use (on any node), idle (free on a usable node), down (free on a down
    or drained node), pending jobs and the GPUs they ask for, and GPUs in use by each account."""
    used = sum(n.gpus_used for n in state.nodes)
    idle = sum(max(0, n.gpus_total - n.gpus_used) for n in state.nodes if n.usable)
    down = sum(max(0, n.gpus_total - n.gpus_used) for n in state.nodes if not n.usable)
    pending = [j for j in state.jobs if j.state == "PENDING"]
    accounts: dict[str, list[float]] = {}
    for job in state.jobs:
        if job.state == "RUNNING" and job.gpus and job.account:
            entry = accounts.setdefault(job.account, [0.0, 0.0])
            entry[0] += job.gpus
            entry[1] += job.gpus
    return UtilisationSample(
        time=now,
        period=MINUTE,
        gpus_total=sum(n.gpus_total for n in state.nodes),
        gpus_used=float(used),
        gpus_used_max=used,
        gpus_idle=float(idle),
        gpus_down=float(down),
        jobs_pending=float(len(pending)),
        jobs_pending_max=len(pending),
        gpus_pending=float(sum(j.gpus for j in pending)),
        accounts=accounts,
    )


def record(now: dt.datetime) -> UtilisationSample | None:
    """Read Slurm afresh and add its sample to the session; None (logged) when Slurm cannot be read: no sample is
    better than a stale one."""
    state = current_scheduler().state(max_age=0)
    if state.error:
        log.warning("utilisation: no sample at %s: %s", now.isoformat(), state.error)
        return None
    row = sample_of(state, now)
    db.session.add(row)
    return row


def _hour_of(when: dt.datetime) -> dt.datetime:
    return when.replace(minute=0, second=0, microsecond=0)


def rollup_of(hour: dt.datetime, rows: Sequence[UtilisationSample]) -> UtilisationSample:
    """The hourly row of the raw samples ``rows`` taken in the hour starting at ``hour``."""
    n = len(rows)

    def mean(values: Sequence[float]) -> float:
        return sum(values) / n

    accounts: dict[str, list[float]] = {}
    for name in sorted({a for r in rows for a in r.accounts}):
        values = [float(r.accounts[name][0]) if name in r.accounts else 0.0 for r in rows]
        accounts[name] = [mean(values), max(float(r.accounts[name][1]) for r in rows if name in r.accounts)]
    return UtilisationSample(
        time=hour,
        period=HOUR,
        gpus_total=max(r.gpus_total for r in rows),
        gpus_used=mean([r.gpus_used for r in rows]),
        gpus_used_max=max(r.gpus_used_max for r in rows),
        gpus_idle=mean([r.gpus_idle for r in rows]),
        gpus_down=mean([r.gpus_down for r in rows]),
        jobs_pending=mean([r.jobs_pending for r in rows]),
        jobs_pending_max=max(r.jobs_pending_max for r in rows),
        gpus_pending=mean([r.gpus_pending for r in rows]),
        accounts=accounts,
    )


def roll_up(now: dt.datetime) -> int:
    """Add the hourly rows of the complete hours before ``now`` not rolled up yet; returns how many were added."""
    last = db.session.execute(select(func.max(UtilisationSample.time)).where(UtilisationSample.period == HOUR)).scalar()
    query = select(UtilisationSample).where(UtilisationSample.period == MINUTE, UtilisationSample.time < _hour_of(now))
    if last is not None:
        query = query.where(UtilisationSample.time >= last.replace(tzinfo=dt.UTC) + dt.timedelta(hours=1))
    by_hour: dict[dt.datetime, list[UtilisationSample]] = {}
    for row in db.session.execute(query.order_by(UtilisationSample.time)).scalars():
        by_hour.setdefault(_hour_of(row.time), []).append(row)
    db.session.add_all(rollup_of(hour, rows) for hour, rows in by_hour.items())
    return len(by_hour)


def prune(now: dt.datetime) -> int:
    """Delete raw samples older than :data:`RAW_KEEP` and rollups older than :data:`HOURLY_KEEP`; returns how many."""
    deleted = 0
    for period, keep in ((MINUTE, RAW_KEEP), (HOUR, HOURLY_KEEP)):
        result = db.session.execute(
            delete(UtilisationSample).where(UtilisationSample.period == period, UtilisationSample.time < now - keep)
        )
        deleted += int(getattr(result, "rowcount", 0) or 0)
    return deleted


def tick(now: dt.datetime | None = None) -> dict[str, int]:
    """One timer run: sample, roll up, prune, in one transaction (needs an app context)."""
    now = now or utcnow()
    sampled = record(now) is not None
    db.session.flush()
    hours = roll_up(now)
    pruned = prune(now)
    db.session.commit()
    return {"sampled": int(sampled), "hours": hours, "pruned": pruned}
