# SPDX-License-Identifier: GPL-3.0-or-later
"""The news on the dashboard (administrators write them: ``/admin/news``, or ``carme-portal news-post KEY TEXT``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Row
from sqlalchemy import select

from webui import forms
from webui.caches import cached_view
from webui.caches import view_cache
from webui.extensions import db
from webui.models import News
from webui.models import utcnow

#: the news form's limits (``/admin/news`` and ``news-post``)
TITLE_MAX, BODY_MAX = 200, 10000
#: a notice's key (``news-post KEY``)
NOTICE_KEY = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}"

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


def news_fields(form: Mapping[str, Any]) -> tuple[str, str]:
    """The title and text of a news item, checked as the news form checks them (a :class:`forms.FieldError` names
    the field)."""
    return forms.text(form, "title", max_len=TITLE_MAX), forms.text(form, "body", max_len=BODY_MAX, multiline=True)


def _notice(key: str) -> News | None:
    return db.session.execute(select(News).where(News.notice_key == key)).scalar_one_or_none()


def post_notice(key: str, title: str, body: str, author: str) -> tuple[News, bool]:
    """Publish the notice KEY, replacing the one with that key (a new item, dated now, so it comes first); uncommitted.
    Returns the item and whether one was replaced."""
    old = _notice(key)
    if old is not None:
        db.session.delete(old)
        db.session.flush()
    item = News(title=title, body=body, author=author, created_at=utcnow(), published=True, notice_key=key)
    db.session.add(item)
    db.session.flush()
    view_cache().clear()
    return item, old is not None


def remove_notice(key: str) -> News | None:
    """Delete the notice KEY (uncommitted); the item removed, or ``None`` when there was none."""
    old = _notice(key)
    if old is not None:
        db.session.delete(old)
        db.session.flush()
        view_cache().clear()
    return old
