# SPDX-License-Identifier: GPL-3.0-or-later
"""The utilisation samples: one row a minute (``period`` 60, kept :data:`RAW_KEEP`), rolled up into one row an hour
(``period`` 3600, averages and maxima, kept :data:`HOURLY_KEEP`) by the same timer run that samples."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON
from sqlalchemy import Float
from sqlalchemy import Index
from sqlalchemy import Integer
from sqlalchemy.orm import Mapped
from sqlalchemy.orm import mapped_column

from webui.models import Base
from webui.models import UTCDateTime

MINUTE = 60
HOUR = 3600


class UtilisationSample(Base):
    """The cluster at ``time`` (a raw sample), or the hour starting at ``time`` (a rollup: ``*_max`` its maxima).

    ``accounts``: GPUs in use by each Slurm account (project), ``{account: [average, maximum]}``.
    """

    __tablename__ = "utilisation_sample"
    __table_args__ = (Index("ix_utilisation_sample_period_time", "period", "time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    time: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    period: Mapped[int] = mapped_column(Integer, nullable=False)  # MINUTE (raw) or HOUR (rollup)
    gpus_total: Mapped[int] = mapped_column(Integer, nullable=False)
    gpus_used: Mapped[float] = mapped_column(Float, nullable=False)
    gpus_used_max: Mapped[int] = mapped_column(Integer, nullable=False)
    gpus_idle: Mapped[float] = mapped_column(Float, nullable=False)
    gpus_down: Mapped[float] = mapped_column(Float, nullable=False)
    jobs_pending: Mapped[float] = mapped_column(Float, nullable=False)
    jobs_pending_max: Mapped[int] = mapped_column(Integer, nullable=False)
    gpus_pending: Mapped[float] = mapped_column(Float, nullable=False)
    accounts: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, nullable=False)


__all__ = ["HOUR", "MINUTE", "UtilisationSample"]
