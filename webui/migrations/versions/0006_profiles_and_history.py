# SPDX-License-Identifier: GPL-3.0-or-later
"""Session profiles, the user's last start-form choice, and how each session ended (issue 30).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_profile",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("app", sa.String(length=64), nullable=False),
        sa.Column("image", sa.String(length=64), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("cpus", sa.Integer(), nullable=True),
        sa.Column("mem_mb", sa.Integer(), nullable=True),
        sa.Column("time_minutes", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    with op.batch_alter_table("portal_user", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_start", sa.JSON(), nullable=True))
    with op.batch_alter_table("portal_session", schema=None) as batch_op:
        batch_op.add_column(sa.Column("profile", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("cpus", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("mem_mb", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("log_path", sa.String(length=512), nullable=True))
        batch_op.add_column(sa.Column("end_reason", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("stopped_by", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("stop_note", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("end_seen", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("portal_session", schema=None) as batch_op:
        for column in ("end_seen", "stop_note", "stopped_by", "end_reason", "log_path", "mem_mb", "cpus", "profile"):
            batch_op.drop_column(column)
    with op.batch_alter_table("portal_user", schema=None) as batch_op:
        batch_op.drop_column("last_start")
    op.drop_table("session_profile")
