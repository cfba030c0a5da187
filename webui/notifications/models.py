# SPDX-License-Identifier: GPL-3.0-or-later
"""One notification of one user. ``event`` names the event (e.g. ``session_ready:1234``,
``budget:vision:2026-11:80``): unique per user, so a check that sees the same event again records nothing."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Integer
from sqlalchemy import String
from sqlalchemy import Text
from sqlalchemy import UniqueConstraint
from sqlalchemy.orm import Mapped
from sqlalchemy.orm import mapped_column

from webui.models import Base
from webui.models import UTCDateTime
from webui.models import utcnow

#: mail states: "pending" (to send; a failed try stays pending for the next check), "sent", "none" (no relay was
#: configured when it was recorded), "no_address" (the user has no mail address), "given_up" (too old to send now)
MAIL_STATES = ("pending", "sent", "none", "no_address", "given_up")


class Notification(Base):
    __tablename__ = "notification"
    __table_args__ = (UniqueConstraint("username", "event", name="uq_notification_user_event"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    event: Mapped[str] = mapped_column(String(160), nullable=False)
    title: Mapped[str] = mapped_column(String(200), nullable=False)
    body: Mapped[str] = mapped_column(Text, default="", nullable=False)
    link: Mapped[str | None] = mapped_column(String(255))  # a portal path, e.g. /projects/vision
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)
    read_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    mail_state: Mapped[str] = mapped_column(String(16), nullable=False, index=True)
    mail_tries: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    mail_error: Mapped[str] = mapped_column(Text, default="", nullable=False)
