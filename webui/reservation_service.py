"""Reservation requests, decisions and the calendar (issue 16): the glue between the form, the policy
(:mod:`webui.reservation_policy`), the portal's table of requests and Slurm (:mod:`webui.reservations_slurm`)."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from flask import current_app
from sqlalchemy import select

from webui import forms
from webui.auth.audit import audit
from webui.auth.logins import CurrentUser
from webui.extensions import db
from webui.models import CalendarToken
from webui.models import ReservationRequest
from webui.models import utcnow
from webui.quota.policy import effective_policy
from webui.quota.usage import gpu_hours_used
from webui.reservation_policy import APPROVE
from webui.reservation_policy import PolicyRefused
from webui.reservation_policy import ReservationPolicy
from webui.reservation_policy import Window
from webui.reservation_policy import decide
from webui.reservation_policy import gpu_hours_in
from webui.reservation_policy import month_bounds
from webui.reservations_slurm import Reservation
from webui.reservations_slurm import Reservations
from webui.reservations_slurm import ReservationSpec
from webui.reservations_slurm import ReservationState
from webui.slurm.errors import SlurmError
from webui.slurm.scheduler import current_scheduler
from webui.slurm.scheduler import default_partition
from webui.user_lock import lock_user

PENDING, APPROVED, DECLINED, FAILED, CANCELLED = "pending", "approved", "declined", "failed", "cancelled"
FORM_TIME = "%Y-%m-%dT%H:%M"  # <input type="datetime-local">


def backend() -> Reservations:
    res: Reservations = current_app.extensions["carme_reservations"]
    return res


def policy() -> ReservationPolicy:
    cfg = current_app.config
    return ReservationPolicy(
        max_gpus=int(cfg["RESERVATION_MAX_GPUS"]),
        max_nodes=int(cfg["RESERVATION_MAX_NODES"]),
        max_reserved_gpu_hours_per_month=float(cfg["RESERVATION_MAX_GPU_HOURS_PER_MONTH"]),
        max_days_ahead=int(cfg["RESERVATION_MAX_DAYS_AHEAD"]),
        min_minutes=int(cfg["RESERVATION_MIN_MINUTES"]),
        max_minutes=int(cfg["RESERVATION_MAX_MINUTES"]),
        auto_approve=bool(cfg["RESERVATION_AUTO_APPROVE"]),
    )


def zone() -> ZoneInfo:
    """The time zone the forms and the calendar speak (``RESERVATION_TIMEZONE``)."""
    return ZoneInfo(str(current_app.config.get("RESERVATION_TIMEZONE") or "UTC"))


def parse_time(form: Mapping[str, Any], name: str) -> dt.datetime:
    raw = forms.text(form, name, max_len=32)
    for fmt in (FORM_TIME, FORM_TIME + ":%S"):
        try:
            local = dt.datetime.strptime(raw.strip(), fmt).replace(tzinfo=zone())
        except ValueError:
            continue
        try:
            return local.astimezone(dt.UTC)
        except OverflowError:  # e.g. 0001-01-01T00:00 east of UTC: before the first day datetime knows
            raise forms.FieldError(name, "lies outside the calendar") from None
    raise forms.FieldError(name, "must be a date and time (YYYY-MM-DDTHH:MM)")


def slurm_state() -> ReservationState:
    """Slurm's reservations; while the scheduler's last look failed (slurmrestd or slurmctld down), what was known,
    flagged with that error, without a second query that would only wait for the same timeout (a dashboard under a
    slurmctld outage took two client timeouts, over 10 s, before this)."""
    cluster = current_scheduler().state()
    if cluster.error:
        return backend().last(cluster.error)
    return backend().state()


def requests_of(username: str) -> list[ReservationRequest]:
    stmt = select(ReservationRequest).where(ReservationRequest.username == username)
    return list(db.session.execute(stmt.order_by(ReservationRequest.start_at.desc()).limit(100)).scalars())


def requests_by_name(names: list[str]) -> dict[str, ReservationRequest]:
    if not names:
        return {}
    stmt = select(ReservationRequest).where(ReservationRequest.name.in_(names))
    return {r.name: r for r in db.session.execute(stmt).scalars() if r.name}


def _node_gpus(nodes: tuple[str, ...]) -> int:
    state = current_scheduler().state()
    by_name = {n.name: n.gpus_total for n in state.nodes}
    return sum(by_name.get(n, 0) for n in nodes)


def own_windows(username: str, state: ReservationState) -> list[Window]:
    """The user's reservations in Slurm (charged the GPUs requested, else their nodes' GPUs), their open requests,
    and their approved requests that already ended (Slurm forgets a reservation when it ends)."""
    rows = {r.name: r for r in requests_of(username) if r.name}
    windows = []
    seen = set()
    for res in state.reservations:
        if res.is_for(username):
            row = rows.get(res.name)
            gpus = row.gpus if row is not None else _node_gpus(res.nodes)
            windows.append(Window(res.start, res.end, gpus))
            seen.add(res.name)
    now = utcnow()
    for row in requests_of(username):
        if row.status == PENDING or (row.status == APPROVED and row.name not in seen and row.end_at <= now):
            windows.append(Window(row.start_at, row.end_at, row.gpus))
    return windows


def reserved_gpu_hours(username: str, now: dt.datetime | None = None) -> float | None:
    """Reserved GPU-hours this month (held in Slurm or ended, not pending); ``None`` when Slurm cannot say."""
    state = slurm_state()
    if state.error and not state.fetched_at:
        return None
    now = now or utcnow()
    start, end = month_bounds(now)
    rows = {r.name: r for r in requests_of(username) if r.name}
    total = 0.0
    seen = set()
    for res in state.reservations:
        if res.is_for(username):
            row = rows.get(res.name)
            gpus = row.gpus if row is not None else _node_gpus(res.nodes)
            total += gpu_hours_in(Window(res.start, res.end, gpus), start, end)
            seen.add(res.name)
    for row in rows.values():
        if row.status == APPROVED and row.name not in seen and row.end_at <= now:
            total += gpu_hours_in(Window(row.start_at, row.end_at, row.gpus), start, end)
    return total


def submit_request(user: CurrentUser, form: Mapping[str, Any]) -> tuple[ReservationRequest, str]:
    """Validate (400 naming the field), record, and approve at once when the policy allows; returns the request and
    what to tell the user."""
    gpus = forms.integer(form, "gpus", lo=1, hi=1024)
    nodes = forms.integer(form, "nodes", lo=1, hi=1024, default=1)
    start = parse_time(form, "start")
    end = parse_time(form, "end")
    if end <= start:
        raise forms.FieldError("end", "must be after the start")
    purpose = forms.text(form, "purpose", max_len=200)
    public = forms.flag(form, "public")
    cluster = current_scheduler().state()
    partition = reservation_partition()
    per_node = cluster.max_gpus_per_node(partition)
    if gpus > nodes * per_node:
        raise forms.FieldError("gpus", f"{nodes} node(s) have at most {nodes * per_node} GPUs here")
    state = slurm_state()
    if state.error and not state.fetched_at:
        raise SlurmError(state.error)
    used = gpu_hours_used(user.username)
    budget = effective_policy(user.username).gpu_hours_per_month
    # From here to the commit, one request of this user at a time (security issue #27): the same request sent twice
    # at once became two rows, each decided without the other. Their open requests are read under the lock.
    lock_user(user.username)
    same = _same_request(user.username, gpus, nodes, start, end)
    if same is not None:
        if same.status == PENDING:
            message = f"Request {same.id} for this time is recorded already and waits for an administrator."
        else:
            message = f"Reservation {same.name} for this time exists already."
        db.session.rollback()
        return same, message
    now = utcnow()
    request = Window(start, end, gpus)
    try:
        decision = decide(
            policy(),
            request,
            nodes,
            now,
            own=own_windows(user.username, state),
            used_gpu_hours=used,
            budget_gpu_hours=budget,
        )
    except PolicyRefused as exc:
        raise forms.FieldError(exc.field, exc.message) from exc
    row = ReservationRequest(
        username=user.username,
        gpus=gpus,
        nodes=nodes,
        start_at=start,
        end_at=end,
        purpose=purpose,
        public=public,
        status=PENDING,
        created_at=now,
        reason=decision.reason if decision.outcome != APPROVE else "",
    )
    db.session.add(row)
    db.session.flush()  # the id names the Slurm reservation
    audit("reservation.request", str(row.id), gpus=gpus, nodes=nodes, start=start.isoformat(), end=end.isoformat())
    if decision.outcome == APPROVE:
        approve(row, decided_by="policy", reason=decision.reason)
    else:
        db.session.commit()
    if row.status == APPROVED:
        return row, f"Reservation {row.name} created in Slurm ({decision.reason})."
    if row.status == FAILED:
        return row, f"Slurm refused the reservation: {row.reason}"
    return row, f"Request {row.id} waits for an administrator: {decision.reason}."


def _same_request(
    username: str, gpus: int, nodes: int, start: dt.datetime, end: dt.datetime
) -> ReservationRequest | None:
    """The user's open request or reservation for exactly this window and these resources (a second click)."""
    stmt = select(ReservationRequest).where(
        ReservationRequest.username == username,
        ReservationRequest.gpus == gpus,
        ReservationRequest.nodes == nodes,
        ReservationRequest.start_at == start,
        ReservationRequest.end_at == end,
        ReservationRequest.status.in_((PENDING, APPROVED)),
    )
    return db.session.execute(stmt.order_by(ReservationRequest.id).limit(1)).scalars().first()


def reservation_partition() -> str | None:
    configured = current_app.config.get("RESERVATION_PARTITION")
    if configured:
        return str(configured)
    return default_partition(current_scheduler().state())


def approve(row: ReservationRequest, *, decided_by: str, reason: str) -> None:
    """Create the Slurm reservation; Slurm's refusal marks the request failed, with Slurm's words as the reason."""
    name = f"carme-{row.username}-{row.id}"
    spec = ReservationSpec(
        name=name,
        user=row.username,
        start=row.start_at,
        end=row.end_at,
        node_count=row.nodes,
        partition=reservation_partition(),
    )
    row.decided_by, row.decided_at = decided_by, utcnow()
    try:
        backend().create(spec)
    except SlurmError as exc:
        row.status, row.reason = FAILED, str(exc)
        audit("reservation.failed", str(row.id), by=decided_by, slurm=str(exc))
    else:
        row.status, row.name, row.reason = APPROVED, name, reason
        audit("reservation.approve", str(row.id), by=decided_by, reason=reason, name=name)
    db.session.commit()


def decline(row: ReservationRequest, *, decided_by: str, reason: str) -> None:
    row.status, row.reason = DECLINED, reason
    row.decided_by, row.decided_at = decided_by, utcnow()
    audit("reservation.decline", str(row.id), by=decided_by, reason=reason)
    db.session.commit()


def cancel(row: ReservationRequest, user: CurrentUser) -> None:
    """The owner (or an admin) withdraws a request or gives a reservation back (deleted in Slurm)."""
    if row.status == APPROVED and row.name:
        names = {r.name for r in slurm_state().reservations}
        if row.name in names:
            backend().delete(row.name)
    row.status = CANCELLED
    row.decided_by, row.decided_at = user.username, utcnow()
    audit("reservation.cancel", str(row.id), name=row.name or "")
    db.session.commit()


def pending_requests() -> list[ReservationRequest]:
    stmt = select(ReservationRequest).where(ReservationRequest.status == PENDING)
    return list(db.session.execute(stmt.order_by(ReservationRequest.start_at)).scalars())


def recent_decisions() -> list[ReservationRequest]:
    stmt = select(ReservationRequest).where(ReservationRequest.status != PENDING)
    return list(db.session.execute(stmt.order_by(ReservationRequest.decided_at.desc()).limit(50)).scalars())


def active_reservations(username: str, now: dt.datetime | None = None) -> list[Reservation]:
    """The user's reservations that hold nodes right now (what the session start form offers)."""
    now = now or utcnow()
    return [r for r in slurm_state().reservations if r.is_for(username) and r.active(now)]


# --- the calendar --------------------------------------------------------------------------------------------------


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
            out.append(Block("", res.start, res.end, "busy", "Busy", f"{res.node_count} node(s) reserved"))
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


# --- iCalendar feed ------------------------------------------------------------------------------------------------


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_calendar_token(username: str) -> str:
    """A fresh feed token for the user (the old URL stops working); only its hash is stored."""
    token = secrets.token_urlsafe(32)
    row = db.session.get(CalendarToken, username)
    if row is None:
        db.session.add(CalendarToken(username=username, token_hash=_token_hash(token), created_at=utcnow()))
    else:
        row.token_hash, row.created_at = _token_hash(token), utcnow()
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
    return row is not None and hmac.compare_digest(row.token_hash, _token_hash(token))


def _ical_text(value: str) -> str:
    return value.replace("\\", "\\\\").replace(";", "\\;").replace(",", "\\,").replace("\r", "").replace("\n", "\\n")


def _fold(line: str) -> list[str]:
    """RFC 5545 3.1: lines of at most 75 octets, continued with a leading space."""
    out: list[str] = []
    current = ""
    for ch in line:
        limit = 75 if not out else 74
        if len((current + ch).encode()) > limit:
            out.append(current)
            current = ch
        else:
            current += ch
    out.append(current)
    return [out[0]] + [" " + part for part in out[1:]]


def _ical_time(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def ical_feed(username: str, host: str) -> str:
    """The user's own reservations (from Slurm) and open requests as an RFC 5545 calendar."""
    state = slurm_state()
    rows = {r.name: r for r in requests_of(username) if r.name}
    stamp = _ical_time(utcnow())
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//Carme//Reservations//EN", "CALSCALE:GREGORIAN"]
    events: list[tuple[str, dt.datetime, dt.datetime, str, str, str]] = []
    for res in state.reservations:
        if res.is_for(username):
            row = rows.get(res.name)
            summary = f"GPU reservation {res.name}"
            description = (row.purpose + "\n" if row is not None else "") + "Nodes: " + ",".join(res.nodes)
            events.append((f"{res.name}@{host}", res.start, res.end, summary, description, "CONFIRMED"))
    for row in requests_of(username):
        if row.status == PENDING:
            events.append(
                (
                    f"request-{row.id}@{host}",
                    row.start_at,
                    row.end_at,
                    "GPU reservation (pending)",
                    row.purpose,
                    "TENTATIVE",
                )
            )
    for uid, start, end, summary, description, status in events:
        lines += [
            "BEGIN:VEVENT",
            f"UID:{_ical_text(uid)}",
            f"DTSTAMP:{stamp}",
            f"DTSTART:{_ical_time(start)}",
            f"DTEND:{_ical_time(end)}",
            f"SUMMARY:{_ical_text(summary)}",
            f"DESCRIPTION:{_ical_text(description)}",
            f"STATUS:{status}",
            "END:VEVENT",
        ]
    lines.append("END:VCALENDAR")
    return "".join(part + "\r\n" for line in lines for part in _fold(line))
