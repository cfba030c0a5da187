# SPDX-License-Identifier: GPL-3.0-or-later
"""One check-then-write decision per user at a time, across gunicorn's workers (security issue #27).

A limit counted in one transaction and written in another lets concurrent requests all pass the same count: two
identical reservation requests became two rows, three session starts beside one running became four sessions. The
decisions that count something of the user's and then write take :func:`lock_user` first.
"""

from __future__ import annotations

from sqlalchemy import update

from webui.extensions import db
from webui.models import User


def lock_user(username: str) -> None:
    """Begin a fresh transaction that holds ``username``'s lock until it ends (commit or rollback).

    The lock is a write to the user's ``portal_user`` row that changes nothing. MariaDB (InnoDB) locks the row itself
    for the rest of the transaction, as ``SELECT ... FOR UPDATE`` would: the same user's other decisions wait, other
    users' do not. SQLite, which knows no ``FOR UPDATE``, takes its database write lock, as any write does; that the
    write comes first in the transaction lets the waiters wait (busy timeout) instead of failing at once.

    Reads after it see every row committed before it was taken: the transaction before it is ended, since MariaDB's
    REPEATABLE READ would go on showing that transaction's first snapshot (without the rows of the lock's previous
    holder). Nothing may be pending in the session: it is committed. A user without a ``portal_user`` row (none
    logs in without one) gets no lock on MariaDB.
    """
    db.session.commit()
    noop = update(User).where(User.username == username).values(username=User.username)
    db.session.execute(noop.execution_options(synchronize_session=False))
