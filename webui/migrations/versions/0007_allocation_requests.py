# SPDX-License-Identifier: GPL-3.0-or-later
"""Allocation requests of the portal's projects (issue 31).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "allocation_request",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=64), nullable=False),
        sa.Column("gpu_hours", sa.Integer(), nullable=False),
        sa.Column("purpose", sa.String(length=500), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("decided_by", sa.String(length=64), nullable=True),
        sa.Column("decided_at", sa.DateTime(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("allocation_request", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_allocation_request_project"), ["project"], unique=False)
        batch_op.create_index(batch_op.f("ix_allocation_request_status"), ["status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("allocation_request", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_allocation_request_status"))
        batch_op.drop_index(batch_op.f("ix_allocation_request_project"))
    op.drop_table("allocation_request")
