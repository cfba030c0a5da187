# SPDX-License-Identifier: GPL-3.0-or-later
"""Reservation requests and their decisions (issue 16): the glue between the form, the policy
(:mod:`webui.reservations.policy`), the portal's table of requests and Slurm (:mod:`webui.reservations.slurm`)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo

from flask import current_app
from sqlalchemy import select

from webui import forms
from webui.auth.audit import audit
from webui.auth.logins import CurrentUser
from webui.extensions import db
from webui.models import ReservationRequest
from webui.models import utcnow
from webui.quota.limits import user_limits
from webui.quota.usage import gpu_hours_used
from webui.reservations.policy import APPROVE
from webui.reservations.policy import Decision
from webui.reservations.policy import PolicyRefused
from webui.reservations.policy import ReservationPolicy
from webui.reservations.policy import Window
from webui.reservations.policy import decide
from webui.reservations.policy import gpu_hours_in
from webui.reservations.policy import month_bounds
from webui.reservations.slurm import Reservation
from webui.reservations.slurm import Reservations
from webui.reservations.slurm import ReservationSpec
from webui.reservations.slurm import ReservationState
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


def _reserved_gpus(res: Reservation) -> int:
    """The GPUs a reservation not requested through the portal holds: its TRES's (23.02 and later), else all the
    GPUs of its nodes (22.05's whole nodes)."""
    return res.gpus or _node_gpus(res.nodes)


def _held(username: str, state: ReservationState, rows: list[ReservationRequest]) -> dict[str, Window]:
    """The user's reservations in Slurm by name, charged the GPUs requested (else the GPUs they hold)."""
    by_name = {r.name: r for r in rows if r.name}
    held = {}
    for res in state.reservations:
        if res.is_for(username):
            row = by_name.get(res.name)
            held[res.name] = Window(res.start, res.end, row.gpus if row is not None else _reserved_gpus(res))
    return held


def _ended(row: ReservationRequest, held: dict[str, Window], now: dt.datetime) -> bool:
    """An approved request whose reservation ended (Slurm forgets a reservation when it ends)."""
    return row.status == APPROVED and row.name not in held and row.end_at <= now


def own_windows(username: str, state: ReservationState) -> list[Window]:
    """The user's reservations in Slurm, their open requests, and their approved requests that already ended."""
    rows = requests_of(username)
    held = _held(username, state, rows)
    now = utcnow()
    not_in_slurm = [Window(r.start_at, r.end_at, r.gpus) for r in rows if r.status == PENDING or _ended(r, held, now)]
    return [*held.values(), *not_in_slurm]


def reserved_gpu_hours(
    username: str, now: dt.datetime | None = None, state: ReservationState | None = None
) -> float | None:
    """Reserved GPU-hours this month (held in Slurm or ended, not pending); ``None`` when Slurm cannot say.
    ``state``: Slurm's reservations as the page already read them (one read per page: under a slurmctld outage each
    read may wait for slurmrestd's timeout)."""
    state = state or slurm_state()
    if state.error and not state.fetched_at:
        return None
    now = now or utcnow()
    start, end = month_bounds(now)
    rows = [r for r in requests_of(username) if r.name]
    held = _held(username, state, rows)
    windows = [*held.values(), *(Window(r.start_at, r.end_at, r.gpus) for r in rows if _ended(r, held, now))]
    return sum((gpu_hours_in(w, start, end) for w in windows), 0.0)


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
    per_node = current_scheduler().state().max_gpus_per_node(reservation_partition())
    if gpus > nodes * per_node:
        raise forms.FieldError("gpus", f"{nodes} node(s) have at most {nodes * per_node} GPUs here")
    state = slurm_state()
    if state.error and not state.fetched_at:
        raise SlurmError(state.error)
    used = gpu_hours_used(user.username)
    budget = user_limits(user.username).gpu_hours_per_month  # Slurm's GrpTRESMins; None: no budget in Slurm
    # From here to the commit, one request of this user at a time (security issue #27): the same request sent twice
    # at once became two rows, each decided without the other. Their open requests are read under the lock.
    lock_user(user.username)
    same = _same_request(user.username, gpus, nodes, start, end)
    if same is not None and same.status == APPROVED and not state.error and not _held_by_slurm(same, state):
        same = None  # its reservation was deleted in Slurm (scontrol delete): Slurm is the source of truth
    if same is not None:
        if same.status == PENDING:
            message = f"Request {same.id} for this time is recorded already and waits for an administrator."
        else:
            message = f"Reservation {same.name} for this time exists already."
        db.session.rollback()
        return same, message
    request = Window(start, end, gpus)
    now = utcnow()
    try:
        decision = decide(policy(), request, nodes, now, own=own_windows(user.username, state),
                          used_gpu_hours=used, budget_gpu_hours=math.inf if budget is None else budget)  # fmt: skip
    except PolicyRefused as exc:
        raise forms.FieldError(exc.field, exc.message) from exc
    row = _record(user.username, request, nodes, purpose, public, decision, now)
    return row, _outcome(row, decision)


def _record(
    username: str, request: Window, nodes: int, purpose: str, public: bool, decision: Decision, now: dt.datetime
) -> ReservationRequest:
    """Record the request (its id names the Slurm reservation), and create the reservation when approved."""
    row = ReservationRequest(
        username=username,
        gpus=request.gpus,
        nodes=nodes,
        start_at=request.start,
        end_at=request.end,
        purpose=purpose,
        public=public,
        status=PENDING,
        created_at=now,
        reason=decision.reason if decision.outcome != APPROVE else "",
    )
    db.session.add(row)
    db.session.flush()
    audit("reservation.request", str(row.id), gpus=request.gpus, nodes=nodes, start=request.start.isoformat(),
          end=request.end.isoformat())  # fmt: skip
    if decision.outcome == APPROVE:
        approve(row, decided_by="policy", reason=decision.reason)
    else:
        db.session.commit()
    return row


def _outcome(row: ReservationRequest, decision: Decision) -> str:
    if row.status == APPROVED:
        return f"Reservation {row.name} created in Slurm ({decision.reason})."
    if row.status == FAILED:
        return f"Slurm refused the reservation: {row.reason}"
    return f"Request {row.id} waits for an administrator: {decision.reason}."


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


def _held_by_slurm(row: ReservationRequest, state: ReservationState) -> bool:
    """Slurm still holds the request's reservation, or this snapshot is older than the approval (another worker's
    snapshot, up to SCHEDULER_CACHE_SECONDS old, may not show a reservation created a moment ago). The portal's
    database may keep whole seconds only (MariaDB's DATETIME): the approval is taken as up to a second later."""
    decided = row.decided_at.timestamp() + 1.0 if row.decided_at else float("inf")
    return decided >= state.fetched_at or any(r.name == row.name for r in state.reservations)


def reservation_partition() -> str | None:
    configured = current_app.config.get("RESERVATION_PARTITION")
    if configured:
        return str(configured)
    return default_partition(current_scheduler().state())


def create_in_slurm(row: ReservationRequest) -> str:
    """Create the request's reservation in Slurm, named ``carme-<user>-<id>``; returns the name. :class:`SlurmError`
    carries Slurm's refusal. The approval and ``reservations-sync`` (:mod:`webui.reservations.resync`) both use it."""
    name = f"carme-{row.username}-{row.id}"
    spec = ReservationSpec(
        name=name,
        user=row.username,
        start=row.start_at,
        end=row.end_at,
        node_count=row.nodes,
        partition=reservation_partition(),
        gpus=row.gpus,
    )
    backend().create(spec)
    return name


def approve(row: ReservationRequest, *, decided_by: str, reason: str) -> None:
    """Create the Slurm reservation; Slurm's refusal marks the request failed, with Slurm's words as the reason."""
    row.decided_by, row.decided_at = decided_by, utcnow()
    try:
        name = create_in_slurm(row)
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
