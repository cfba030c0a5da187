# SPDX-License-Identifier: GPL-3.0-or-later
"""A portal project's owner (PI) and end date (issue 31), keyed by its Slurm account.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "project_terms",
        sa.Column("account", sa.String(length=32), nullable=False),
        sa.Column("pi", sa.String(length=32), nullable=False),
        sa.Column("end_date", sa.Date(), nullable=True),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("account"),
    )


def downgrade() -> None:
    op.drop_table("project_terms")
