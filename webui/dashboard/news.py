# SPDX-License-Identifier: GPL-3.0-or-later
"""The news on the dashboard (administrators write them: ``/admin/news``)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Row
from sqlalchemy import select

from webui.caches import cached_view
from webui.extensions import db
from webui.models import News

# Built once: the columns the dashboard shows, no ORM objects.
_LATEST_NEWS = (
    select(News.title, News.body, News.author, News.created_at)
    .where(News.published.is_(True))
    .order_by(News.created_at.desc())
    .limit(5)
)


def latest_news() -> list[Row[tuple[str, str, str, dt.datetime]]]:
    """The five newest published items, for display (may be ``SCHEDULER_CACHE_SECONDS`` old)."""
    return cached_view(("news",), lambda: list(db.session.execute(_LATEST_NEWS)))
