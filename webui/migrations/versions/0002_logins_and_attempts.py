# SPDX-License-Identifier: GPL-3.0-or-later
"""Server-side logins, login attempts per client address; ended sessions lose their secret.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "portal_login",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("session_version", sa.Integer(), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("checked_at", sa.DateTime(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("portal_login", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_portal_login_username"), ["username"], unique=False)
        batch_op.create_index(batch_op.f("ix_portal_login_expires_at"), ["expires_at"], unique=False)

    op.create_table(
        "login_attempt",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("time", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("login_attempt", schema=None) as batch_op:
        batch_op.create_index("ix_login_attempt_user_time", ["username", "time"], unique=False)

    # Sessions that ended before this revision still hold their secret: nothing needs it any more.
    op.execute(sa.text("UPDATE portal_session SET secret = '' WHERE ended_at IS NOT NULL"))


def downgrade() -> None:
    with op.batch_alter_table("login_attempt", schema=None) as batch_op:
        batch_op.drop_index("ix_login_attempt_user_time")

    op.drop_table("login_attempt")
    with op.batch_alter_table("portal_login", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_portal_login_expires_at"))
        batch_op.drop_index(batch_op.f("ix_portal_login_username"))

    op.drop_table("portal_login")
