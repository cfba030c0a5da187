# SPDX-License-Identifier: GPL-3.0-or-later
"""What a session start asks for, and its checked translation (``carme_runtime``) into a slurmrestd submit body.

App specs come from ``carme_runtime`` too (built-in and site ``*.toml``), re-read at most once a minute.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import cachetools

from carme_runtime import apps as runtime_apps
from carme_runtime.apps import AppSpec
from carme_runtime.sessions import SessionLimits
from carme_runtime.sessions import SessionRequest
from carme_runtime.sessions import ValidationError
from carme_runtime.sessions import build_rest_payload


class SessionInvalid(ValueError):
    """A session request broke a limit; ``field`` names the form field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class SessionSpec:
    """What the start form asks for, after the portal's own checks."""

    user: str
    app: str
    image: str
    gpus: int
    time_minutes: int
    partition: str | None
    cpus: int
    mem_mb: int
    runtime: str = "apptainer"  # carme_runtime runtime name: "apptainer" (image) or "none" (environment)
    qos: str | None = None
    account: str | None = None
    workdir: str = ""
    limits: SessionLimits = field(default_factory=SessionLimits)
    reservation: str | None = None  # a Slurm reservation of the user's (issue 16)
    nodes: int = 1  # multi-node sessions (issue 15): gpus, cpus and mem_mb are per node
    logdir: str = ""  # TensorBoard's log directory (issue 30); "": the working directory


APPS_CACHE_SECONDS = 60.0


@cachetools.cached(cachetools.TTLCache(maxsize=16, ttl=APPS_CACHE_SECONDS), lock=threading.Lock())
def load_apps(dirs: Sequence[str]) -> dict[str, AppSpec]:
    """Built-in and site app specs (carme_runtime), re-read at most once a minute."""
    return runtime_apps.load_apps(list(dirs))


def readiness_path(app: AppSpec, job_id: int) -> str:
    """The readiness URL path as the portal asks the session front (the app's ``readiness_path`` template, e.g.
    ``{base_url}api/status``). An app served at ``/`` (``strip_prefix``) names its own path (``/healthz``): through
    the front it is under the base URL, which the front removes again."""
    base_url = app.base_url(job_id)
    values = {"base_url": base_url, "base_path": base_url.rstrip("/") or "/", "job_id": str(job_id)}
    try:
        path = app.readiness_path.format_map(values)
    except (KeyError, ValueError):
        return base_url
    return base_url.rstrip("/") + path if app.strip_prefix else path


def build_payload(spec: SessionSpec, secret: str, apps: Mapping[str, AppSpec], limits: SessionLimits) -> dict[str, Any]:
    """Validate with carme_runtime and build the submit body in Carme's dialect (``SlurmClient.submit`` turns it into
    the version slurmrestd speaks)."""
    app = apps.get(spec.app)
    if app is None:
        raise SessionInvalid("app", f"unknown app {spec.app!r}")
    req = SessionRequest(
        user=spec.user,
        app=spec.app,
        image=spec.image,
        gpus=spec.gpus,
        cpus=spec.cpus,
        mem_mb=spec.mem_mb,
        time_minutes=spec.time_minutes,
        nodes=spec.nodes,
        partition=spec.partition or "",
        qos=spec.qos or "",
        account=spec.account or "",
        workdir=spec.workdir,
        logdir=spec.logdir,
    )
    try:
        req.validate(limits)
        payload = dict(build_rest_payload(req, app, spec.runtime, secret))
    except ValidationError as exc:
        raise SessionInvalid(exc.field, exc.message) from exc
    if spec.reservation:
        job = payload["job"]
        assert isinstance(job, dict)
        job["reservation"] = spec.reservation  # a job field in every version; Slurm checks the user may use it
    return payload
