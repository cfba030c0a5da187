# SPDX-License-Identifier: GPL-3.0-or-later
"""Interactive sessions: validate a request and build the Slurm job (sbatch argv or slurmrestd payload).

User input never reaches a shell and never changes the job script: the script is the constant
:data:`JOB_SCRIPT`, and every user value travels in the job environment (``CARME_APP``, ``CARME_IMAGE``,
``CARME_SESSION_SECRET``...) or as a separate ``--option=value`` word of the sbatch argv, after
validation. Inside the job, ``carme-launch`` reads the environment (see :mod:`carme_runtime.launch`).

The session secret goes only into the job environment (never into argv, where ``ps`` shows it, and never
into the job comment, which ``squeue`` shows to everyone).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import fields
from typing import TYPE_CHECKING

from carme_runtime.apps import MIN_SECRET_LENGTH
from carme_runtime.job import NAME_PATTERN
from carme_runtime.job import is_name
from carme_runtime.runtimes import RUNTIME_NAMES
from carme_runtime.slurm_formats import format_comment
from carme_runtime.slurmrest import LEGACY_API

if TYPE_CHECKING:
    from carme_runtime.apps import AppSpec

IMAGE_RE = re.compile(r"^[A-Za-z0-9_./:+@-]+$")
#: the whole batch script; constant on purpose
JOB_SCRIPT = "#!/bin/bash\nexec carme-launch\n"
#: PATH inside the job before carme-launch runs (the job environment is not the submitter's)
JOB_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: where the dialect's body is posted as it is (Slurm 22.05); other versions: ``SlurmRestApi.submit_body``
REST_SUBMIT_PATH = LEGACY_API.path("job/submit")


class ValidationError(ValueError):
    """A bad value in a :class:`SessionRequest`; ``field`` names it (for forms and API errors)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class SessionLimits:
    """Bounds a request must respect (site config; QOS limits still apply inside Slurm)."""

    max_gpus: int = 8  # per node
    max_nodes: int = 1  # nodes of one session (multi-node sessions: the app runs on the first)
    max_cpus: int = 64
    max_mem_mb: int = 512 * 1024
    max_time_minutes: int = 7 * 24 * 60
    partitions: tuple[str, ...] = ()  # empty: any valid name
    apps: tuple[str, ...] = ()  # empty: any valid name
    image_prefixes: tuple[str, ...] = ()  # empty: any image; else the image must lie under one of them


@dataclass(frozen=True)
class SessionRequest:
    user: str
    app: str
    image: str
    gpus: int = 0  # per node
    cpus: int = 1  # per node (one task per node)
    mem_mb: int = 4096  # per node
    time_minutes: int = 60
    nodes: int = 1
    partition: str = ""
    qos: str = ""
    account: str = ""
    workdir: str = ""
    logdir: str = ""  # TensorBoard's log directory ({logdir} in the app spec); "": the working directory

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> SessionRequest:
        """Build from form/JSON data; ints may come as strings. Unknown keys are an error."""
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, object] = {}
        for key, value in data.items():
            if key not in known:
                raise ValidationError(key, "unknown field")
            if known[key].type == "int":
                if isinstance(value, bool):
                    raise ValidationError(key, "must be an integer")
                if isinstance(value, str):
                    if not re.fullmatch(r"[0-9]{1,9}", value.strip()):
                        raise ValidationError(key, "must be an integer")
                    value = int(value.strip())
                if not isinstance(value, int):
                    raise ValidationError(key, "must be an integer")
            elif not isinstance(value, str):
                raise ValidationError(key, "must be a string")
            kwargs[key] = value
        for required in ("user", "app", "image"):
            if required not in kwargs:
                raise ValidationError(required, "missing")
        return cls(**kwargs)  # type: ignore[arg-type]

    def errors(self, limits: SessionLimits) -> list[ValidationError]:
        """Every problem, one per field (for forms); :meth:`validate` raises the first."""
        errs: list[ValidationError] = []
        for name in ("user", "app"):
            _check_name(errs, name, getattr(self, name), required=True)
        for name in ("partition", "qos", "account"):
            _check_name(errs, name, getattr(self, name), required=False)
        if limits.apps and self.app not in limits.apps and not any(e.field == "app" for e in errs):
            errs.append(ValidationError("app", f"unknown app {self.app!r}"))
        if limits.partitions and self.partition and self.partition not in limits.partitions:
            errs.append(ValidationError("partition", f"not an allowed partition: {self.partition!r}"))
        _check_image(errs, self.image, limits)
        _check_int(errs, "gpus", self.gpus, 0, limits.max_gpus)
        _check_int(errs, "nodes", self.nodes, 1, limits.max_nodes)
        _check_int(errs, "cpus", self.cpus, 1, limits.max_cpus)
        _check_int(errs, "mem_mb", self.mem_mb, 1, limits.max_mem_mb)
        _check_int(errs, "time_minutes", self.time_minutes, 1, limits.max_time_minutes)
        _check_path(errs, "workdir", self.workdir)
        if self.logdir:
            _check_path(errs, "logdir", self.logdir)
        return errs

    def validate(self, limits: SessionLimits | None = None) -> None:
        errs = self.errors(limits or SessionLimits())
        if errs:
            raise errs[0]


def _bad_chars(value: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in value)


def _check_name(errs: list[ValidationError], field: str, value: str, *, required: bool) -> None:
    if not isinstance(value, str):
        errs.append(ValidationError(field, "must be a string"))
    elif not value:
        if required:
            errs.append(ValidationError(field, "missing"))
    elif _bad_chars(value):
        errs.append(ValidationError(field, "contains a newline or control character"))
    elif len(value) > 64:
        errs.append(ValidationError(field, "longer than 64 characters"))
    elif not is_name(value) or value.startswith("-"):
        errs.append(ValidationError(field, f"must match {NAME_PATTERN} and not start with '-'"))


def _check_int(errs: list[ValidationError], field: str, value: int, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        errs.append(ValidationError(field, "must be an integer"))
    elif not lo <= value <= hi:
        errs.append(ValidationError(field, f"must be between {lo} and {hi}, got {value}"))


def _check_image(errs: list[ValidationError], image: str, limits: SessionLimits) -> None:
    if not isinstance(image, str) or not image:
        errs.append(ValidationError("image", "missing"))
    elif _bad_chars(image):
        errs.append(ValidationError("image", "contains a newline or control character"))
    elif not IMAGE_RE.match(image) or image.startswith("-") or ".." in image.split("/"):
        errs.append(ValidationError("image", f"must match {IMAGE_RE.pattern}, no '..', not start with '-'"))
    elif limits.image_prefixes and not any(
        image == p.rstrip("/") or image.startswith(p.rstrip("/") + "/") for p in limits.image_prefixes
    ):
        errs.append(ValidationError("image", "not under an allowed image directory"))


def _check_path(errs: list[ValidationError], field: str, workdir: str) -> None:
    """A directory the job uses (its working directory, the log directory): absolute, normalised, plain."""
    if not isinstance(workdir, str) or not workdir:
        errs.append(ValidationError(field, "missing"))
    elif _bad_chars(workdir):
        errs.append(ValidationError(field, "contains a newline or control character"))
    elif not workdir.startswith("/"):
        errs.append(ValidationError(field, "must be an absolute path"))
    elif os.path.normpath(workdir) != workdir.rstrip("/") or "/../" in workdir + "/":
        errs.append(ValidationError(field, "must be a normalised path (no '..', '//', '.')"))
    elif "%" in workdir or "," in workdir or ":" in workdir:
        errs.append(ValidationError(field, "must not contain '%', ',' or ':' (Slurm/Apptainer separators)"))
    elif len(workdir) > 1024:
        errs.append(ValidationError(field, "longer than 1024 characters"))


def _check_runtime(runtime: str) -> None:
    if runtime not in RUNTIME_NAMES:
        raise ValidationError("runtime", f"must be one of {', '.join(RUNTIME_NAMES)}")


def job_name(app: AppSpec) -> str:
    return f"carme-{app.name}"


def output_path(req: SessionRequest, app: AppSpec) -> str:
    return os.path.join(req.workdir, f"carme-{app.name}-%j.out")


def submitted_comment(app: AppSpec) -> str:
    return format_comment(app=app.name, state="submitted")


def build_job_environment(req: SessionRequest, app: AppSpec, runtime: str, secret: str) -> dict[str, str]:
    """The whole job environment (sbatch: the submitting process's environment; REST: ``job.environment``)."""
    _check_runtime(runtime)
    if len(secret) < MIN_SECRET_LENGTH or _bad_chars(secret):
        raise ValidationError("secret", f"session secret missing or shorter than {MIN_SECRET_LENGTH}")
    if req.app != app.name:
        raise ValidationError("app", f"request is for {req.app!r}, spec is {app.name!r}")
    env = {
        "PATH": JOB_PATH,
        "CARME_APP": app.name,
        "CARME_IMAGE": req.image,
        "CARME_RUNTIME": runtime,
        "CARME_WORKDIR": req.workdir,
        "CARME_SESSION_SECRET": secret,
    }
    if req.logdir:
        env["CARME_LOGDIR"] = req.logdir  # carme-launch renders it as the app's {logdir}
    return env


def build_sbatch_argv(req: SessionRequest, app: AppSpec, runtime: str) -> list[str]:
    """sbatch argv; run it with :data:`JOB_SCRIPT` on stdin and :func:`build_job_environment` as env.

    ``--export`` lists variable *names* only, so sbatch copies their values from its own environment
    and nothing else of the submitting process (e.g. the portal's secrets) leaks into the job.
    Call ``req.validate(limits)`` first; this function re-checks only what it must.
    """
    _check_runtime(runtime)
    if req.app != app.name:
        raise ValidationError("app", f"request is for {req.app!r}, spec is {app.name!r}")
    names = ["PATH", "CARME_APP", "CARME_IMAGE", "CARME_RUNTIME", "CARME_WORKDIR", "CARME_SESSION_SECRET"]
    if req.logdir:
        names.append("CARME_LOGDIR")
    argv = ["sbatch", "--parsable", f"--job-name={job_name(app)}"]
    if req.partition:
        argv.append(f"--partition={req.partition}")
    if req.qos:
        argv.append(f"--qos={req.qos}")
    if req.account:
        argv.append(f"--account={req.account}")
    argv += [
        f"--time={req.time_minutes}",
        f"--nodes={req.nodes}",
        f"--ntasks={req.nodes}",  # one task per node: ``srun`` in the session starts one process on each
        f"--cpus-per-task={req.cpus}",
        f"--mem={req.mem_mb}M",
    ]
    if req.gpus > 0:
        argv.append(f"--gres=gpu:{req.gpus}")
    argv += [
        f"--chdir={req.workdir}",
        f"--output={output_path(req, app)}",
        f"--comment={submitted_comment(app)}",
        "--no-requeue",  # a session on a lost node ends (NODE_FAIL), it never starts again behind the user's back
        f"--export={','.join(names)}",
    ]
    return argv


def build_rest_payload(req: SessionRequest, app: AppSpec, runtime: str, secret: str) -> dict[str, object]:
    """Body of slurmrestd's ``POST job/submit`` in Carme's dialect (:mod:`carme_runtime.slurmrest`: Slurm 22.05's
    version, which takes it as it is; ``SlurmRestApi.submit_body`` turns it into a newer version's).

    GPUs go in ``gres`` (``"gpu:N"``): 22.05 rejects ``tres_per_node`` with "Unknown key" (newer versions get
    ``tres_per_node``).
    """
    env = build_job_environment(req, app, runtime, secret)
    job: dict[str, object] = {"name": job_name(app)}
    if req.account:
        job["account"] = req.account
    if req.partition:
        job["partition"] = req.partition
    if req.qos:
        job["qos"] = req.qos
    job.update(
        {
            "time_limit": req.time_minutes,
            "nodes": req.nodes,  # the dialect: a count (min = max); 22.05 ignores a [min, max] list (1 node)
            "tasks": req.nodes,
            "cpus_per_task": req.cpus,
            "memory_per_node": req.mem_mb,
            "current_working_directory": req.workdir,
            "standard_output": output_path(req, app),
            "environment": env,
            "comment": submitted_comment(app),
            # a session whose node is lost ends (NODE_FAIL) and the portal says so; requeued, it would start again
            # later, on another node, with a new front, behind its user's back (Slurm's default for batch jobs).
            # slurmrestd 22.05 ignores this key (Requeue=1 whatever its value): carme-launch sets Requeue=0 too
            "requeue": False,
        }
    )
    if req.gpus > 0:
        job["gres"] = f"gpu:{req.gpus}"
    return {"script": JOB_SCRIPT, "job": job}
