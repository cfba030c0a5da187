# SPDX-License-Identifier: GPL-3.0-or-later
"""Session starts in flight, counted against the session limit (security issue #27).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_start",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("session_start", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_session_start_owner"), ["owner"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("session_start", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_session_start_owner"))
    op.drop_table("session_start")
