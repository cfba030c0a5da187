# SPDX-License-Identifier: GPL-3.0-or-later
"""The reservations calendar (issue 16): the week and month grids of the Reservations page, and each user's
iCalendar feed (RFC 5545, written by ``icalendar``) behind a URL whose token only the user has."""

from __future__ import annotations

import datetime as dt
import hmac
from dataclasses import dataclass

from webui.auth.audit import audit
from webui.auth.logins import CurrentUser
from webui.extensions import db
from webui.models import CalendarToken
from webui.models import utcnow
from webui.reservations.service import PENDING
from webui.reservations.service import requests_by_name
from webui.reservations.service import requests_of
from webui.reservations.service import slurm_state
from webui.reservations.service import zone
from webui.reservations.slurm import ReservationState
from webui.tokens import new_token
from webui.tokens import token_hash


@dataclass(frozen=True)
class Block:
    """A reservation as one user may see it on one day."""

    name: str
    start: dt.datetime
    end: dt.datetime
    kind: str  # own, public, busy
    title: str
    detail: str


def blocks(user: CurrentUser, state: ReservationState) -> list[Block]:
    """Every reservation: the user's own (and all, for admins) in full, public ones with owner and purpose, the
    others as busy blocks with their time and node count only."""
    rows = requests_by_name([r.name for r in state.reservations])
    out = []
    for res in state.reservations:
        row = rows.get(res.name)
        nodes = ",".join(res.nodes) or f"{res.node_count} node(s)"
        if res.is_for(user.username) or user.is_admin:
            purpose = row.purpose if row is not None else ""
            kind = "own" if res.is_for(user.username) else "public"
            who = ",".join(res.users)
            detail = f"{who} · {nodes}" + (f" · {purpose}" if purpose else "")
            out.append(Block(res.name, res.start, res.end, kind, res.name, detail))
        elif row is not None and row.public:
            out.append(Block(res.name, res.start, res.end, "public", row.purpose, f"{row.username} · {nodes}"))
        else:
            held = f"{res.gpus} GPU(s)" if res.gpus else f"{res.node_count} node(s)"
            out.append(Block("", res.start, res.end, "busy", "Busy", f"{held} reserved"))
    return sorted(out, key=lambda b: (b.start, b.end))


@dataclass(frozen=True)
class Day:
    date: dt.date
    blocks: list[tuple[Block, str, str]]  # block, start and end as shown on this day (HH:MM)
    in_month: bool = True
    today: bool = False


def days(all_blocks: list[Block], first: dt.date, count: int, month: int | None = None) -> list[Day]:
    tz = zone()
    today = utcnow().astimezone(tz).date()
    out = []
    for i in range(count):
        date = first + dt.timedelta(days=i)
        lo = dt.datetime.combine(date, dt.time(), tz)
        hi = lo + dt.timedelta(days=1)
        shown = []
        for b in all_blocks:
            if b.start < hi and lo < b.end:
                s = max(b.start.astimezone(tz), lo)
                e = min(b.end.astimezone(tz), hi)
                shown.append((b, s.strftime("%H:%M"), "24:00" if e == hi else e.strftime("%H:%M")))
        out.append(Day(date, shown, month is None or date.month == month, date == today))
    return out


# --- the iCalendar feed --------------------------------------------------------------------------------------------


def new_calendar_token(username: str) -> str:
    """A fresh feed token for the user (the old URL stops working); only its hash is stored."""
    token = new_token()
    row = db.session.get(CalendarToken, username)
    if row is None:
        db.session.add(CalendarToken(username=username, token_hash=token_hash(token), created_at=utcnow()))
    else:
        row.token_hash, row.created_at = token_hash(token), utcnow()
    audit("calendar.token.new", username)
    db.session.commit()
    return token


def revoke_calendar_token(username: str) -> None:
    row = db.session.get(CalendarToken, username)
    if row is not None:
        db.session.delete(row)
    audit("calendar.token.revoke", username)
    db.session.commit()


def has_calendar_token(username: str) -> bool:
    return db.session.get(CalendarToken, username) is not None


def calendar_owner(username: str, token: str) -> bool:
    row = db.session.get(CalendarToken, username)
    return row is not None and hmac.compare_digest(row.token_hash, token_hash(token))


@dataclass(frozen=True)
class _Event:
    uid: str
    start: dt.datetime
    end: dt.datetime
    summary: str
    description: str
    status: str


def _events(username: str, host: str) -> list[_Event]:
    """The user's own reservations (from Slurm), then their open requests."""
    state = slurm_state()
    rows = requests_of(username)
    by_name = {r.name: r for r in rows if r.name}
    events = []
    for res in state.reservations:
        if res.is_for(username):
            row = by_name.get(res.name)
            description = (row.purpose + "\n" if row is not None else "") + "Nodes: " + ",".join(res.nodes)
            events.append(_Event(f"{res.name}@{host}", res.start, res.end, f"GPU reservation {res.name}",
                                 description, "CONFIRMED"))  # fmt: skip
    for row in rows:
        if row.status == PENDING:
            events.append(_Event(f"request-{row.id}@{host}", row.start_at, row.end_at, "GPU reservation (pending)",
                                 row.purpose, "TENTATIVE"))  # fmt: skip
    return events


def ical_feed(username: str, host: str) -> str:
    """The user's own reservations (from Slurm) and open requests as an RFC 5545 calendar (times in UTC)."""
    # Imported here, as the CLI imports alembic: only a feed request needs it, and a worker may never serve one.
    from icalendar import Calendar
    from icalendar import Event

    cal = Calendar()
    cal.add("version", "2.0")
    cal.add("prodid", "-//Carme//Reservations//EN")
    cal.add("calscale", "GREGORIAN")
    stamp = utcnow().replace(microsecond=0)
    for ev in _events(username, host):
        event = Event()
        event.add("uid", ev.uid)
        event.add("dtstamp", stamp)
        event.add("dtstart", ev.start.astimezone(dt.UTC))
        event.add("dtend", ev.end.astimezone(dt.UTC))
        event.add("summary", ev.summary)
        event.add("description", ev.description)
        event.add("status", ev.status)
        cal.add_component(event)
    body: bytes = cal.to_ical()
    return body.decode()
