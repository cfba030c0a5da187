# SPDX-License-Identifier: GPL-3.0-or-later
"""Alembic environment for the portal schema.

Run through ``flask --app webui db-upgrade`` (the app hands over its
connection) or plain ``alembic -x url=mysql+pymysql://...`` for repairs.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

import webui.notifications.models
import webui.projects.models
import webui.utilisation.models  # noqa: F401 - the feature packages' tables join Base.metadata
from webui.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("give the database with -x url=... or run `flask --app webui db-upgrade`")
    engine = create_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
