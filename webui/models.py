# SPDX-License-Identifier: GPL-3.0-or-later
"""Database models. The schema is owned by Alembic (``webui/migrations``).

Slurm is the source of truth for job state; ``PortalSession`` only records who
started a job through the portal and the secret the proxy injects.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON
from sqlalchemy import BigInteger
from sqlalchemy import Boolean
from sqlalchemy import DateTime
from sqlalchemy import Index
from sqlalchemy import Integer
from sqlalchemy import String
from sqlalchemy import Text
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.orm import Mapped
from sqlalchemy.orm import mapped_column
from sqlalchemy.types import TypeDecorator


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


#: The URL converter for a row's id (``<{ROW_ID}:news_id>``): Werkzeug's ``int`` takes any number of digits, SQLite's
#: INTEGER 64 bits only; a longer id was an OverflowError (a 500) where there is simply no such row (a 404).
ROW_ID = f"int(max={2**63 - 1})"


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Stores naive UTC (MariaDB has no time zones) and returns aware UTC datetimes."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(dt.UTC).replace(tzinfo=None)

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        return None if value is None else value.replace(tzinfo=dt.UTC)


class Base(DeclarativeBase):
    pass


class User(Base):
    """A login name seen by the portal.

    Rows exist for every syntactically valid name that was tried, so failed
    attempts and lockouts are counted for unknown users too (no enumeration).
    """

    __tablename__ = "portal_user"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    totp_secret: Mapped[str | None] = mapped_column(String(64))
    totp_confirmed: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    totp_last_step: Mapped[int] = mapped_column(BigInteger, default=0, nullable=False)
    failed_logins: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    last_failure_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    locked_until: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    last_login_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    # Bumped on TOTP reset: every login made before is void.
    session_version: Mapped[int] = mapped_column(Integer, default=1, nullable=False)
    # The start form's last choice (profile name and advanced fields), so Start session -> Start repeats it (issue 30).
    last_start: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Login(Base):
    """One logged-in browser (password and TOTP passed). The cookie carries only a random token; its SHA-256 is
    the key here. Deleting the row (logout) ends the login at once, for every copy of the cookie."""

    __tablename__ = "portal_login"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256(token) in hex
    username: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    session_version: Mapped[int] = mapped_column(Integer, nullable=False)  # the user's at login
    # The LDAP admin-group membership, re-read every LOGIN_RECHECK_SECONDS (then also expires_at slides).
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    checked_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False, index=True)
    source: Mapped[str] = mapped_column(String(64), nullable=False, default="")


class AppTicket(Base):
    """A one-time pass from the portal's Connect link to the apps' origin (``webui.sessions.app_origin``): the key is
    the SHA-256 of the random ticket, the row is deleted when the ticket is used, and it is void after
    APP_TICKET_SECONDS."""

    __tablename__ = "app_ticket"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    login_id: Mapped[str] = mapped_column(String(64), nullable=False)  # Login.id of the login that asked for it
    job_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False, index=True)


class LoginAttempt(Base):
    """A failed password or TOTP attempt (``ok`` False) or the latest full login (``ok`` True) of a user from one
    client address. Failures are counted per (user, address) and per user; see ``webui.auth.lockout``."""

    __tablename__ = "login_attempt"
    __table_args__ = (Index("ix_login_attempt_user_time", "username", "time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), nullable=False)
    source: Mapped[str] = mapped_column(String(64), nullable=False)
    ok: Mapped[bool] = mapped_column(Boolean, nullable=False)
    time: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)


class PortalSession(Base):
    """An interactive session started through the portal (one Slurm job)."""

    __tablename__ = "portal_session"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(BigInteger, unique=True, nullable=False)
    owner: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    app: Mapped[str] = mapped_column(String(64), nullable=False)
    image: Mapped[str] = mapped_column(String(255), nullable=False)
    gpus: Mapped[int] = mapped_column(Integer, nullable=False)
    partition: Mapped[str | None] = mapped_column(String(64))
    time_minutes: Mapped[int] = mapped_column(Integer, nullable=False)
    secret: Mapped[str] = mapped_column(String(128), nullable=False)  # "" once the session ended
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)
    ended_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    reservation: Mapped[str | None] = mapped_column(String(100))  # the Slurm reservation it runs in, if any
    # Issue 30: what the session was started with and how it ended, for the history page and the dashboard's notices.
    profile: Mapped[str | None] = mapped_column(String(64))  # the session profile's name, if started from one
    cpus: Mapped[int | None] = mapped_column(Integer)
    mem_mb: Mapped[int | None] = mapped_column(Integer)
    log_path: Mapped[str | None] = mapped_column(String(512))  # the job's standard output file on the shared storage
    # why it ended: "user" (stopped by its owner), "admin" (stopped by an admin), "time_limit", "node_failure",
    # "failed", "image_refused", "completed", "cancelled" (in Slurm, by someone else), "unknown"
    end_reason: Mapped[str | None] = mapped_column(String(32))
    stopped_by: Mapped[str | None] = mapped_column(String(64))  # the admin's user name when end_reason is "admin"
    stop_note: Mapped[str] = mapped_column(Text, default="", nullable=False)  # the admin's note to the owner
    end_seen: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)  # the owner dismissed the notice


class SessionStart(Base):
    """A session start in flight (security issue #27): recorded with the count of the user's sessions under their
    lock (``webui.sessions.limit``), deleted in the transaction that records the ``PortalSession``, or when the
    submission failed. It counts against the session limit meanwhile, so concurrent starts cannot all pass the same
    count; one older than ``limit.CLAIM_SECONDS`` (its worker died) counts no more."""

    __tablename__ = "session_start"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)


class News(Base):
    __tablename__ = "news"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    title: Mapped[str] = mapped_column(String(200), nullable=False)
    body: Mapped[str] = mapped_column(Text, nullable=False)
    author: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)
    published: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)
    #: a notice posted by ``carme-portal news-post KEY``: a second post with the same key replaces it (NULL: the form's)
    notice_key: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True, unique=True)


class ImageCatalog(Base):
    """A named software environment users may pick for a session."""

    __tablename__ = "image_catalog"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    # Container image path/reference, or an environment name (kind says which).
    image: Mapped[str] = mapped_column(String(255), nullable=False)
    kind: Mapped[str] = mapped_column(String(16), default="image", nullable=False)
    description: Mapped[str] = mapped_column(Text, default="", nullable=False)
    # Names of apps (carme_runtime AppSpec keys) allowed with this image.
    allowed_apps: Mapped[list[str]] = mapped_column(JSON, default=list, nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)


class SessionProfile(Base):
    """A named start-form preset an admin defines (issue 30): app + image + resources + description. The profile
    with the lowest ``position`` is the start form's default for a user with no last choice."""

    __tablename__ = "session_profile"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    title: Mapped[str] = mapped_column(String(200), nullable=False)  # e.g. "JupyterLab · PyTorch 2.6 · 1 GPU"
    description: Mapped[str] = mapped_column(Text, default="", nullable=False)
    app: Mapped[str] = mapped_column(String(64), nullable=False)
    image: Mapped[str] = mapped_column(String(64), nullable=False)  # an ImageCatalog name
    gpus: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    cpus: Mapped[int | None] = mapped_column(Integer)  # None: the portal's default
    mem_mb: Mapped[int | None] = mapped_column(Integer)
    time_minutes: Mapped[int] = mapped_column(Integer, nullable=False, default=60)
    position: Mapped[int] = mapped_column(Integer, nullable=False, default=100)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)
    # "inventory" (synced by the role; the inventory owns it) or "portal" (made on the admin page)
    source: Mapped[str] = mapped_column(String(16), nullable=False, default="portal")


class AllocationRequest(Base):
    """A project manager's request for another monthly GPU budget of a project the portal owns, and the decision
    (issue 31). Approved, the budget is set in Slurm (the account's GrpTRESMins); every decision is also audited."""

    __tablename__ = "allocation_request"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    username: Mapped[str] = mapped_column(String(64), nullable=False)
    gpu_hours: Mapped[int] = mapped_column(Integer, nullable=False)  # the monthly budget asked for
    purpose: Mapped[str] = mapped_column(String(500), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False, index=True)  # pending, approved, declined, failed
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)
    decided_by: Mapped[str | None] = mapped_column(String(64))
    decided_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    reason: Mapped[str] = mapped_column(Text, default="", nullable=False)  # the decision's reason, or Slurm's


class ReservationRequest(Base):
    """A user's request for a GPU reservation and the decision on it (issue 16). The reservation itself lives in
    Slurm (``name``, created when the request is approved); every decision is also in the audit log."""

    __tablename__ = "reservation_request"
    __table_args__ = (Index("ix_reservation_request_user_start", "username", "start_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), nullable=False)
    gpus: Mapped[int] = mapped_column(Integer, nullable=False)
    nodes: Mapped[int] = mapped_column(Integer, nullable=False)
    start_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    end_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    purpose: Mapped[str] = mapped_column(String(200), nullable=False)
    public: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    # pending, approved (the Slurm reservation was created), declined, failed (Slurm refused), cancelled
    status: Mapped[str] = mapped_column(String(16), nullable=False, index=True)
    name: Mapped[str | None] = mapped_column(String(100))  # the Slurm reservation's name once approved
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)
    decided_by: Mapped[str | None] = mapped_column(String(64))  # a user name, or "policy" for auto-approval
    decided_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    reason: Mapped[str] = mapped_column(Text, default="", nullable=False)  # the decision's reason, or Slurm's


class CalendarToken(Base):
    """A user's iCalendar feed token: only its SHA-256 is kept; deleting the row revokes the feed URL."""

    __tablename__ = "calendar_token"

    username: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)


class AuditLog(Base):
    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_time", "time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    time: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, nullable=False)
    actor: Mapped[str] = mapped_column(String(64), nullable=False)
    action: Mapped[str] = mapped_column(String(64), nullable=False)
    target: Mapped[str] = mapped_column(String(255), nullable=False, default="")
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, nullable=False)


__all__ = [
    "AllocationRequest",
    "AppTicket",
    "AuditLog",
    "Base",
    "CalendarToken",
    "ImageCatalog",
    "Login",
    "LoginAttempt",
    "News",
    "PortalSession",
    "ReservationRequest",
    "SessionProfile",
    "SessionStart",
    "User",
]
