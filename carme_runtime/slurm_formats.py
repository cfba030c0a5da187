# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers for Slurm command output, and the session comment format.

pyslurm cannot be used (no PyPI build for Slurm 22.05), so the runtime reads ``--json`` and ``-P``
(parsable) output of the CLI tools. ``--json`` records have the shapes of slurmrestd's versions (Slurm 22.05's,
24.11's) and are read through :mod:`carme_runtime.slurmrest`. Each parser takes text and returns plain
values, so it is tested against stored sample outputs in ``tests/runtime/data/``.

Note: in Slurm 22.05, ``squeue --json`` ignores the filtering options (``-w``, ``-u``, ``--states``), as its
man page says; :func:`jobs_on_node` filters in Python, so passing the options is harmless and helps on
newer Slurm.

Imported by the epilog: no ``typing``/``dataclasses`` at runtime, ``json`` imported lazily.
"""

from __future__ import annotations

import re

from carme_runtime.hostlist import HostlistError
from carme_runtime.hostlist import expand_hostlist
from carme_runtime.job import COMMENT_PREFIX as COMMENT_PREFIX
from carme_runtime.slurmrest import job_record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

#: job states in which a job holds resources on its nodes
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING"})
#: job states of a job that has not finished: waiting for (or requeued to wait for) resources, or holding them
UNFINISHED_STATES = ACTIVE_STATES | {"PENDING", "REQUEUED"}
#: job states after which a job never runs again (squeue(1), "JOB STATE CODES"); a state in neither set (a hold Slurm
#: adds later, say) is neither unfinished nor ended
ENDED_STATES = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
)


class SlurmParseError(ValueError):
    """Output of a Slurm command that does not have the expected shape."""


def _load_json(text: str, what: str) -> dict[str, object]:
    import json

    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmParseError(f"{what}: invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SlurmParseError(f"{what}: top level is not an object")
    errors = data.get("errors") or []
    if errors:
        raise SlurmParseError(f"{what}: Slurm reported errors: {errors!r}")
    return data


class SqueueJob:
    """The fields of a ``squeue --json`` job record the runtime uses."""

    __slots__ = ("comment", "job_id", "name", "nodes", "state", "user_id", "user_name")

    def __init__(
        self, job_id: int, user_name: str, user_id: int, state: str, nodes: list[str], name: str, comment: str
    ) -> None:
        self.job_id = job_id
        self.user_name = user_name
        self.user_id = user_id
        self.state = state
        self.nodes = nodes
        self.name = name
        self.comment = comment

    def __repr__(self) -> str:
        return f"SqueueJob({self.job_id}, {self.user_name!r}, {self.state!r}, nodes={self.nodes})"


def parse_squeue_json(text: str) -> list[SqueueJob]:
    data = _load_json(text, "squeue --json")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmParseError("squeue --json: no 'jobs' list")
    out = []
    for rec in jobs:
        if not isinstance(rec, dict) or "job_id" not in rec:
            raise SlurmParseError("squeue --json: job record without job_id")
        job = job_record(rec)
        try:
            nodes = expand_hostlist(job["nodes"])
        except HostlistError as exc:
            raise SlurmParseError(f"squeue --json: {exc}") from exc
        out.append(
            SqueueJob(
                job_id=job["job_id"],
                user_name=job["user_name"],
                user_id=job["user_id"],
                state=job["job_state"],
                nodes=nodes,
                name=job["name"],
                comment=job["comment"],
            )
        )
    return out


def squeue_node_user_argv(node: str, user: str) -> list[str]:
    return ["squeue", "--json", "-w", node, "-u", user]


def jobs_on_node(
    jobs: Iterable[SqueueJob], node: str, user: str | None = None, uid: int | None = None
) -> list[SqueueJob]:
    """Active jobs that hold ``node`` (optionally only those of ``user``/``uid``)."""
    out = []
    for job in jobs:
        if job.state not in ACTIVE_STATES or node not in job.nodes:
            continue
        if user is not None and job.user_name != user:
            continue
        if uid is not None and job.user_id != uid:
            continue
        out.append(job)
    return out


# --- session comment ------------------------------------------------------------------------------

_COMMENT_KEY_RE = re.compile(r"^[a-z_]+$")
_COMMENT_VALUE_RE = re.compile(r"^[A-Za-z0-9_.:/-]*$")


def format_comment(**fields: str | int) -> str:
    """``carme:v1;host=n1;port=8888;state=ready``. Values are restricted so the comment parses back."""
    parts = [COMMENT_PREFIX]
    for key, value in fields.items():
        sval = str(value)
        if not _COMMENT_KEY_RE.match(key) or not _COMMENT_VALUE_RE.match(sval):
            raise ValueError(f"comment field {key}={sval!r} has characters outside [A-Za-z0-9_.:/-]")
        parts.append(f"{key}={sval}")
    return ";".join(parts)


def parse_comment(comment: str) -> dict[str, str] | None:
    """Inverse of :func:`format_comment`; ``None`` when the comment is not a carme one."""
    parts = comment.strip().split(";")
    if not parts or parts[0] != COMMENT_PREFIX:
        return None
    out: dict[str, str] = {}
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if sep and _COMMENT_KEY_RE.match(key) and _COMMENT_VALUE_RE.match(value):
            out[key] = value
    return out


# --- sacctmgr -P ---------------------------------------------------------------------------------


def parse_parsable(text: str) -> list[dict[str, str]]:
    """``-P``/``-p`` output with a header line -> one dict per row (trailing ``|`` of ``-p`` tolerated)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    trailing = header[-1] == ""
    if trailing:
        header = header[:-1]
    rows = []
    for lineno, line in enumerate(lines[1:], 2):
        cells = line.split("|")
        if trailing and cells and cells[-1] == "":
            cells = cells[:-1]
        if len(cells) != len(header):
            raise SlurmParseError(f"line {lineno}: {len(cells)} fields, header has {len(header)}")
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


# --- TRES strings ---------------------------------------------------------------------------------


def parse_tres(tres: str) -> dict[str, str]:
    """``"billing=2,cpu=2,gres/gpu=2,mem=100M,node=1"`` -> ``{"cpu": "2", "gres/gpu": "2", ...}``."""
    out: dict[str, str] = {}
    for item in tres.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise SlurmParseError(f"bad TRES item {item!r} in {tres!r}")
        out[key] = value
    return out


def gpu_count_from_tres(tres: dict[str, str]) -> int:
    """GPUs in a TRES dict: ``gres/gpu`` if present, else the sum of typed ``gres/gpu:<type>`` entries."""
    if "gres/gpu" in tres:
        return int(tres["gres/gpu"])
    return sum(int(v) for k, v in tres.items() if k.startswith("gres/gpu:"))


_GRES_GPU_RE = re.compile(r"(?:^|[,;])(?:gres[:/])?gpu(?::([A-Za-z0-9_.-]+))?(?::(\d+))?(?=\(|,|;|$)")


def count_gpus(spec: str | None) -> int:
    """GPUs in a TRES string (``cpu=2,gres/gpu=2``, as :func:`gpu_count_from_tres` counts them) or a GRES string
    (``gpu:4``, ``gpu:a100:2(S:0-1)``, ``gres:gpu:1``, 24.11's ``gres/gpu:1``; an untyped ``gpu`` is one)."""
    if not spec:
        return 0
    if "gres/gpu" in spec and "=" in spec:
        return gpu_count_from_tres(parse_tres(spec))
    total = 0
    for m in _GRES_GPU_RE.finditer(spec):
        type_or_count, count = m.group(1), m.group(2)
        if count is not None:
            total += int(count)
        elif type_or_count is not None and type_or_count.isdigit():
            total += int(type_or_count)
        else:
            total += 1
    return total
