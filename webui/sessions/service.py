# SPDX-License-Identifier: GPL-3.0-or-later
"""Starting and stopping sessions, shared by the HTML pages and the JSON API.

A start checks everything on the server (image, app, partition, reservation, size, the user's session limit and
GPU budget), submits the job as the user, and records owner and secret; a stop cancels the job as its owner, or as
the Slurm admin identity for an admin.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

from flask import abort
from flask import current_app

from carme_runtime.sessions import SessionLimits
from webui import forms
from webui.auth.audit import audit
from webui.auth.logins import CurrentUser
from webui.extensions import db
from webui.models import ImageCatalog
from webui.models import PortalSession
from webui.models import utcnow
from webui.projects.service import session_account
from webui.quota.limits import Limit
from webui.quota.limits import UserLimits
from webui.quota.usage import quota_view
from webui.reservations.maintenance import check_session
from webui.reservations.service import active_reservations
from webui.reservations.slurm import Reservation
from webui.sessions import limit
from webui.sessions.catalog import available_apps
from webui.sessions.catalog import catalog
from webui.sessions.catalog import form_limits
from webui.sessions.catalog import session_runtime
from webui.sessions.profiles import chosen_profile
from webui.sessions.profiles import remember_choice
from webui.sessions.profiles import with_profile
from webui.sessions.records import active_sessions
from webui.sessions.records import get_portal_session
from webui.slurm.errors import SlurmError
from webui.slurm.scheduler import current_scheduler
from webui.slurm.scheduler import default_partition
from webui.slurm.scheduler import live_state
from webui.slurm.session_spec import SessionInvalid
from webui.slurm.session_spec import SessionSpec
from webui.slurm.state import ClusterState
from webui.tokens import new_token

#: how old a snapshot may be when a refusal depends on it (the session limit)
FRESH_STATE_SECONDS = 1.0
#: the least memory the form's GiB field takes
MIN_MEM_GIB = 0.1
#: the start form's label of the ``logdir`` field, named in its errors
LOGDIR_LABEL = "TensorBoard log directory"


def start_session(user: CurrentUser, form: Mapping[str, Any]) -> PortalSession:
    """Validate everything on the server, submit as the user, record owner and secret.

    With a ``profile`` (the start form's chooser), the profile gives app, image, GPUs, CPUs, memory and time, and
    every non-empty field of ``form`` overrides it; without one (the JSON API), ``form`` gives them all."""
    state = live_state()
    images = catalog()
    profile = chosen_profile(form, images)
    values = with_profile(form, profile)
    image, app = _image_and_app(values, images)
    partitions = [p.name for p in state.partitions]
    partition, reservation = _partition_and_reservation(user.username, values, state, partitions)
    limits = form_limits(user.username, state, partition)
    if profile is not None and form.get("time_minutes") in (None, ""):
        values["time_minutes"] = min(profile.time_minutes, limits["max_time_minutes"])  # the user's own limit
    gpus, nodes, time_minutes = _size(values, limits, reservation)
    if reservation is None:  # a session in a reservation ends with it; else it must end before a maintenance window
        check_session(state, partition or default_partition(state), time_minutes)
    cpus, mem_mb = _resources(values, limits)
    if reservation is not None and reservation.gpus:
        cpus = _within_gpu_reservation(form, reservation, gpus, nodes, cpus)  # a profile's CPUs are lowered too
    cfg = current_app.config
    workdir = str(cfg["SESSION_WORKDIR_TEMPLATE"]).format(user=user.username)
    logdir = _logdir(values, app, workdir)
    state = _within_session_limit(user.username, state, limits["limits"].sessions)
    if gpus > 0:  # Slurm enforces the budget itself (GrpTRESMins); an unknown usage is never taken as "allowed"
        _check_budget(user.username)
    spec = SessionSpec(
        user=user.username,
        app=app,
        image=image.image,
        gpus=gpus,
        time_minutes=time_minutes,
        partition=partition,
        cpus=cpus,
        mem_mb=mem_mb,
        qos=cfg.get("SESSION_QOS"),
        account=session_account(user.username, values, gpus) or cfg.get("SESSION_ACCOUNT"),
        workdir=workdir,
        runtime=session_runtime(image.kind),
        limits=_runtime_limits(limits, partitions, images),
        reservation=reservation.name if reservation is not None else None,
        nodes=nodes,
        logdir=logdir,
    )
    # the claim's commit expires the catalogue row: no read of it after the count
    name = profile.name if profile is not None else None
    return _submit_and_record(spec, image.name, limits["limits"].sessions, state, name)


def _image_and_app(form: Mapping[str, Any], images: list[ImageCatalog]) -> tuple[ImageCatalog, str]:
    image_name = forms.choice(form, "image", [i.name for i in images])
    image = next(i for i in images if i.name == image_name)
    app = forms.choice(form, "app", available_apps(images))
    if app not in image.allowed_apps:
        raise forms.FieldError("app", f"is not offered with image {image.name!r}")
    return image, app


def _partition_and_reservation(
    username: str, form: Mapping[str, Any], state: ClusterState, partitions: list[str]
) -> tuple[str | None, Reservation | None]:
    """The partition asked for (or the default); with one of the user's reservations that hold nodes now (issue 16),
    the reservation's partition."""
    if form.get("partition") in (None, ""):
        partition = default_partition(state)
    else:
        partition = forms.choice(form, "partition", partitions)
    reservation = None
    if form.get("reservation"):
        held = {r.name: r for r in active_reservations(username)}
        reservation = held.get(forms.choice(form, "reservation", list(held)))
        if reservation is not None and reservation.partition in partitions:
            partition = reservation.partition
    return partition, reservation


def _size(form: Mapping[str, Any], limits: dict[str, Any], reservation: Reservation | None) -> tuple[int, int, int]:
    """GPUs per node, nodes and minutes, within ``limits``; a session in a reservation ends when the reservation ends
    (the dashboard says so)."""
    nodes = forms.integer(form, "nodes", lo=1, hi=limits["max_nodes"], default=1)
    _within_slurm(form, limits["limits"], nodes)
    gpus = forms.integer(form, "gpus", lo=0, hi=limits["max_gpus"])
    time_minutes = forms.integer(form, "time_minutes", lo=1, hi=limits["max_time_minutes"])
    if reservation is not None:
        left = int((reservation.end - utcnow()).total_seconds() // 60)
        if left < 1:
            raise forms.FieldError("reservation", "ends in less than a minute")
        time_minutes = min(time_minutes, left)
    return gpus, nodes, time_minutes


def _within_slurm(form: Mapping[str, Any], slurm: UserLimits, nodes: int) -> None:
    """A 400 naming the field, with Slurm's figure and where Slurm holds it, for GPUs or minutes over Slurm's limit
    (Slurm would refuse the job, or hold it forever)."""
    gpus, per_session = forms.integer(form, "gpus", lo=0, hi=1024), slurm.gpus_per_session
    if per_session.value is not None and gpus * nodes > per_session.value:  # GPUs are per node; Slurm counts the job's
        raise forms.FieldError(
            "gpus",
            f"{gpus} per node on {nodes} nodes is more than the {per_session.value} GPUs a session may have "
            f"(Slurm: {per_session.slurm})",
        )
    wall = slurm.time_minutes
    if wall.value is not None and forms.integer(form, "time_minutes", lo=1, hi=10**7) > wall.value:
        raise forms.FieldError("time_minutes", f"must be at most {wall.value} minutes (Slurm: {wall.slurm})")


def _resources(values: Mapping[str, Any], limits: dict[str, Any]) -> tuple[int, int]:
    """CPUs and MB of memory per node within ``limits``; memory comes as ``mem_gib`` (the form) or ``mem_mb``."""
    cpus = forms.integer(values, "cpus", lo=1, hi=limits["max_cpus"], default=limits["default_cpus"])
    if values.get("mem_gib") not in (None, ""):
        hi = math.floor(limits["max_mem_mb"] / 1024 * 100) / 100
        gib = forms.number(values, "mem_gib", lo=min(MIN_MEM_GIB, hi), hi=hi)
        return cpus, max(1, round(gib * 1024))
    mem_mb = forms.integer(values, "mem_mb", lo=1, hi=limits["max_mem_mb"], default=limits["default_mem_mb"])
    return cpus, mem_mb


def _within_gpu_reservation(form: Mapping[str, Any], reservation: Reservation, gpus: int, nodes: int, cpus: int) -> int:
    """A session in a reservation of GPUs (Slurm 23.02+) fits it, or would wait in it forever: at most its GPUs (per
    node times nodes), its nodes, and its CPUs (a default or a profile's CPUs per node are lowered to them; a larger
    number asked for is a 400)."""
    if nodes > max(1, reservation.node_count):
        held = f"reservation {reservation.name} holds GPUs of {reservation.node_count} node(s)"
        raise forms.FieldError("nodes", held)
    if gpus * nodes > reservation.gpus:
        raise forms.FieldError("gpus", f"reservation {reservation.name} holds {reservation.gpus} GPU(s)")
    if reservation.cpus and cpus * nodes > reservation.cpus:
        if form.get("cpus") not in (None, ""):
            raise forms.FieldError("cpus", f"reservation {reservation.name} holds {reservation.cpus} CPU(s)")
        return max(1, reservation.cpus // nodes)
    return cpus


def _logdir(values: Mapping[str, Any], app: str, home: str) -> str:
    """TensorBoard's log directory: a directory in the user's home (``~/runs`` or ``/home/USER/runs``); "" (the
    working directory) when none is given or the app is not TensorBoard, which alone reads it."""
    raw = forms.text(values, "logdir", max_len=1024, required=False).strip()
    if not raw or app != "tensorboard":
        return ""
    if raw == "~" or raw.startswith("~/"):
        raw = home + raw[1:]
    path = forms.absolute_path(raw.rstrip("/") or "/", "logdir", LOGDIR_LABEL)
    if path != home and not path.startswith(home + "/"):
        raise forms.FieldError("logdir", f"{LOGDIR_LABEL} must lie in your home directory {home}")
    return path


def _within_session_limit(username: str, state: ClusterState, sessions: Limit) -> ClusterState:
    """Refuse a start beyond the user's running-job limit in Slurm; the state the count was taken from."""
    if sessions.value is None:
        return state
    active = active_sessions(username, state)
    if len(active) >= sessions.value:
        # the snapshot may be seconds old: a session the user has just stopped must not count against her
        state = current_scheduler().state(max_age=FRESH_STATE_SECONDS)
        active = active_sessions(username, state)
    if len(active) >= sessions.value:
        raise forms.FieldError(
            "app", f"you already have {len(active)} sessions; the limit is {sessions.value} (Slurm: {sessions.slurm})"
        )
    return state


def _check_budget(username: str) -> None:
    quota = quota_view(username)
    budget: Limit = quota["limits"].gpu_minutes
    if budget.value is None:  # Slurm sets no GPU budget for this association (or cannot say: it enforces its own)
        return
    if quota["used_gpu_hours"] is None:
        raise forms.FieldError(
            "gpus",
            "your GPU-hours used this month cannot be read from Slurm right now; "
            "try again in a minute or start a CPU-only session",
        )
    if quota["used_gpu_hours"] >= quota["limit_gpu_hours"]:
        raise forms.FieldError(
            "gpus",
            f"your GPU budget for this month is used up ({quota['used_gpu_hours']:g} of {quota['limit_gpu_hours']:g} "
            f"GPU-hours; Slurm: {budget.slurm}); start a CPU-only session",
        )


def _runtime_limits(limits: dict[str, Any], partitions: list[str], images: list[ImageCatalog]) -> SessionLimits:
    """The limits carme_runtime checks the request against again (what the form allowed)."""
    return SessionLimits(
        max_gpus=limits["max_gpus"],
        max_nodes=limits["max_nodes"],
        max_time_minutes=limits["max_time_minutes"],
        max_cpus=limits["max_cpus"],
        max_mem_mb=limits["max_mem_mb"],
        partitions=tuple(partitions),
        apps=tuple(available_apps(images)),
    )


def _submit_and_record(
    spec: SessionSpec, image_name: str, sessions: Limit, state: ClusterState, profile: str | None
) -> PortalSession:
    """Submit under a claim on the user's session limit, and record the session with its secret (and, started from
    a ``profile``, that profile as the user's next default).

    Counted again under the user's lock with the starts in flight, and this one recorded as in flight (security
    issue #27: concurrent starts all passed the first count); the submission runs outside the lock.
    """
    secret = new_token()

    def count() -> int:
        return len(active_sessions(spec.user, state))

    with limit.claimed(spec.user, sessions.value, count, source=sessions.slurm) as claim:
        try:
            job_id = current_scheduler().submit(spec, secret)
        except SessionInvalid as exc:
            raise forms.FieldError(exc.field, exc.message) from exc
        with _or_cancel(job_id, spec.user):  # recorded with its claim settled, or the job is cancelled again
            record = PortalSession(
                job_id=job_id,
                owner=spec.user,
                app=spec.app,
                image=image_name,
                gpus=spec.gpus,
                partition=spec.partition,
                time_minutes=spec.time_minutes,
                secret=secret,
                created_at=utcnow(),
                reservation=spec.reservation,
                profile=profile,
                cpus=spec.cpus,
                mem_mb=spec.mem_mb,
            )
            db.session.add(record)
            if profile is not None:
                remember_choice(spec.user, {"profile": profile})  # committed with the record: only a start that worked
            claim.settle()  # in the record's transaction: from its commit on the session counts itself
            audit("session.start", str(job_id), app=spec.app, image=image_name, gpus=spec.gpus,
                  partition=spec.partition, nodes=spec.nodes, profile=profile)  # fmt: skip
            db.session.commit()
    return record


@contextlib.contextmanager
def _or_cancel(job_id: int, username: str) -> Iterator[None]:
    """Record a submitted job: any failure (a deadlock, the database gone) rolls back and cancels the job."""
    try:
        yield
    except Exception:
        db.session.rollback()
        try:  # never leave a job running that nobody can reach or see
            current_scheduler().cancel(job_id, as_user=username)
        except SlurmError:
            current_app.logger.exception("could not cancel orphaned job %s", job_id)
        raise


def stop_session(user: CurrentUser, job_id: int, note: str = "") -> PortalSession:
    """Owner stops as themself; an admin stops anyone's as the Slurm admin identity, with an optional ``note`` to the
    owner (shown on the owner's dashboard and in the history)."""
    record = get_portal_session(job_id)
    if record is None:
        abort(404, description="No such session.")
    if record.owner == user.username:
        as_user = user.username
    elif user.is_admin:
        as_user = str(current_app.config["SLURM_ADMIN_USER"])
    else:
        abort(403, description="Only the owner or an administrator may stop this session.")
    if record.ended_at is not None:
        # Stopped already (a second click, a retried API call) or ended in Slurm: nothing left to cancel. Asking Slurm
        # again only brought its "Invalid job id" back, as a 503.
        return record
    try:
        current_scheduler().cancel(job_id, as_user=as_user)
    except SlurmError:
        # Slurm refuses to cancel a job it has forgotten or that is ending or ended: the session is over all the same
        # (the dashboard had not looked since). Only a job that still runs by Slurm's fresh word, or no word, is an
        # error (a 503 from the API, a message on the pages).
        fresh = current_scheduler().state(max_age=FRESH_STATE_SECONDS)
        job = fresh.job(job_id)
        if fresh.error or (job is not None and job.user == record.owner and job.active and job.state != "COMPLETING"):
            raise
    record.ended_at = utcnow()
    record.secret = ""  # an ended session's secret is of no use to anyone: do not keep it
    by_owner = record.owner == user.username
    record.end_reason = "user" if by_owner else "admin"
    if not by_owner:
        record.stopped_by = user.username
        record.stop_note = note
    action = "session.stop" if by_owner else "admin.session.stop"
    audit(action, str(job_id), owner=record.owner, **({} if by_owner else {"note": note}))
    db.session.commit()
    return record
