# SPDX-License-Identifier: GPL-3.0-or-later
"""One-time tickets from the portal's Connect link to the apps' own origin.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "app_ticket",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("login_id", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("app_ticket", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_app_ticket_expires_at"), ["expires_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("app_ticket", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_app_ticket_expires_at"))
    op.drop_table("app_ticket")
