# SPDX-License-Identifier: GPL-3.0-or-later
"""The terms of a project the portal made (issue 31): its owner (PI) and end date, keyed by the Slurm account's
name. Slurm's account record has no field for either (Organization marks the portal's accounts, Description is the
title). The inventory's projects declare theirs in the inventory (``PROJECT_TERMS``, :mod:`webui.projects.terms`)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Date
from sqlalchemy import String
from sqlalchemy.orm import Mapped
from sqlalchemy.orm import mapped_column

from webui.models import Base
from webui.models import UTCDateTime


class ProjectTerms(Base):
    __tablename__ = "project_terms"

    account: Mapped[str] = mapped_column(String(32), primary_key=True)
    pi: Mapped[str] = mapped_column(String(32), nullable=False)
    #: the project's last day (UTC); None: open-ended
    end_date: Mapped[dt.date | None] = mapped_column(Date)
    #: when the tick set the ended account's GrpSubmitJobs=0; None: not yet (or not ended)
    ended_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
