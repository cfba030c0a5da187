# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's own quota policy goes (issue 31, one source of truth for limits): limits are read from Slurm's
association and QOS records (webui.quota.limits), which the inventory sets.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table("quota_policy")


def downgrade() -> None:
    """The table comes back empty: the limits stay Slurm's until an administrator writes rows again."""
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
