# SPDX-License-Identifier: GPL-3.0-or-later
"""Initial schema: users, sessions, news, image catalogue, quota policy, audit log.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    _audit_catalogue_and_news()
    _sessions_policies_and_users()


def _audit_catalogue_and_news() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("time", sa.DateTime(), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=255), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index("ix_audit_log_time", ["time"], unique=False)

    op.create_table(
        "image_catalog",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("image", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("allowed_apps", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "news",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("author", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("published", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def _sessions_policies_and_users() -> None:
    op.create_table(
        "portal_session",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("app", sa.String(length=64), nullable=False),
        sa.Column("image", sa.String(length=255), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("partition", sa.String(length=64), nullable=True),
        sa.Column("time_minutes", sa.Integer(), nullable=False),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id"),
    )
    with op.batch_alter_table("portal_session", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_portal_session_owner"), ["owner"], unique=False)

    op.create_table(
        "quota_policy",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=True),
        sa.Column("gpu_hours_per_month", sa.Float(), nullable=False),
        sa.Column("max_gpus_per_session", sa.Integer(), nullable=False),
        sa.Column("max_sessions", sa.Integer(), nullable=False),
        sa.Column("max_time_minutes", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("username", name="uq_quota_policy_username"),
    )
    op.create_table(
        "portal_user",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("totp_secret", sa.String(length=64), nullable=True),
        sa.Column("totp_confirmed", sa.Boolean(), nullable=False),
        sa.Column("totp_last_step", sa.BigInteger(), nullable=False),
        sa.Column("failed_logins", sa.Integer(), nullable=False),
        sa.Column("last_failure_at", sa.DateTime(), nullable=True),
        sa.Column("locked_until", sa.DateTime(), nullable=True),
        sa.Column("last_login_at", sa.DateTime(), nullable=True),
        sa.Column("session_version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("username"),
    )


def downgrade() -> None:
    op.drop_table("portal_user")
    op.drop_table("quota_policy")
    with op.batch_alter_table("portal_session", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_portal_session_owner"))

    op.drop_table("portal_session")
    op.drop_table("news")
    op.drop_table("image_catalog")
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_log_time")

    op.drop_table("audit_log")
