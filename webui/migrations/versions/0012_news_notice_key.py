# SPDX-License-Identifier: GPL-3.0-or-later
"""A news item's notice key (issue 34): ``carme-portal news-post KEY`` replaces the notice with that key.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("news", schema=None) as batch_op:
        batch_op.add_column(sa.Column("notice_key", sa.String(length=64), nullable=True))
        batch_op.create_index(batch_op.f("ix_news_notice_key"), ["notice_key"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("news", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_news_notice_key"))
        batch_op.drop_column("notice_key")
