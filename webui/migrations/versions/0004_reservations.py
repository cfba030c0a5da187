# SPDX-License-Identifier: GPL-3.0-or-later
"""Reservation requests and decisions, iCalendar feed tokens, the reservation a session runs in (issue 16).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservation_request",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("start_at", sa.DateTime(), nullable=False),
        sa.Column("end_at", sa.DateTime(), nullable=False),
        sa.Column("purpose", sa.String(length=200), nullable=False),
        sa.Column("public", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("decided_by", sa.String(length=64), nullable=True),
        sa.Column("decided_at", sa.DateTime(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("reservation_request", schema=None) as batch_op:
        batch_op.create_index("ix_reservation_request_user_start", ["username", "start_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_reservation_request_status"), ["status"], unique=False)
    op.create_table(
        "calendar_token",
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("username"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("portal_session", schema=None) as batch_op:
        batch_op.add_column(sa.Column("reservation", sa.String(length=100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("portal_session", schema=None) as batch_op:
        batch_op.drop_column("reservation")
    op.drop_table("calendar_token")
    with op.batch_alter_table("reservation_request", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reservation_request_status"))
        batch_op.drop_index("ix_reservation_request_user_start")
    op.drop_table("reservation_request")
