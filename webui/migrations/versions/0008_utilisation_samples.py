# SPDX-License-Identifier: GPL-3.0-or-later
"""Utilisation samples (issue 31): raw minute samples and hourly rollups of GPUs in use, idle, down and the queue.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "utilisation_sample",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("time", sa.DateTime(), nullable=False),
        sa.Column("period", sa.Integer(), nullable=False),
        sa.Column("gpus_total", sa.Integer(), nullable=False),
        sa.Column("gpus_used", sa.Float(), nullable=False),
        sa.Column("gpus_used_max", sa.Integer(), nullable=False),
        sa.Column("gpus_idle", sa.Float(), nullable=False),
        sa.Column("gpus_down", sa.Float(), nullable=False),
        sa.Column("jobs_pending", sa.Float(), nullable=False),
        sa.Column("jobs_pending_max", sa.Integer(), nullable=False),
        sa.Column("gpus_pending", sa.Float(), nullable=False),
        sa.Column("accounts", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("utilisation_sample", schema=None) as batch_op:
        batch_op.create_index("ix_utilisation_sample_period_time", ["period", "time"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("utilisation_sample", schema=None) as batch_op:
        batch_op.drop_index("ix_utilisation_sample_period_time")
    op.drop_table("utilisation_sample")
