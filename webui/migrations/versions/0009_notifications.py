# SPDX-License-Identifier: GPL-3.0-or-later
"""Notifications (issue 31): one row per user and event, with its mail state.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notification",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("event", sa.String(length=160), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("link", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("read_at", sa.DateTime(), nullable=True),
        sa.Column("mail_state", sa.String(length=16), nullable=False),
        sa.Column("mail_tries", sa.Integer(), nullable=False),
        sa.Column("mail_error", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("username", "event", name="uq_notification_user_event"),
    )
    with op.batch_alter_table("notification", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_notification_username"), ["username"], unique=False)
        batch_op.create_index(batch_op.f("ix_notification_mail_state"), ["mail_state"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("notification", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_notification_mail_state"))
        batch_op.drop_index(batch_op.f("ix_notification_username"))
    op.drop_table("notification")
