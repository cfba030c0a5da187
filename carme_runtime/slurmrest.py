# SPDX-License-Identifier: GPL-3.0-or-later
"""The one adapter between Carme and the versions of Slurm's REST API (slurmrestd), and of the CLI's ``--json``.

Carme speaks one dialect inside: that of slurmrestd's OpenAPI v0.0.38 (Slurm 22.05). The job description
:func:`carme_runtime.sessions.build_rest_payload` builds, and the records the portal and the runtime read (jobs, nodes,
partitions, reservations, accounting jobs), have v0.0.38's keys and plain values. This module is the only place that
knows the other versions:

* :func:`choose_version` picks the newest version Carme supports among those a slurmrestd offers (from its OpenAPI
  document, else by probing ``ping``); the portal asks once per process (:mod:`webui.slurm.client`), or takes the
  version the site names (``SLURMRESTD_API_VERSION``);
* :class:`SlurmRestApi` builds that version's paths and request bodies from the dialect;
* :func:`job_record`, :func:`node_record`, :func:`partition_record`, :func:`reservation_record` and
  :func:`account_job_record` turn a record of any supported version into the dialect.

Versions: v0.0.38 (Slurm 22.05) and v0.0.40, v0.0.41, v0.0.42 (data_parser; Slurm 24.11 serves these three). From
v0.0.40 on, numbers may come as ``{"set", "infinite", "number"}``, states as lists of flags, and the submit body
carries the script and the environment (a list of ``NAME=value``) inside ``job``.

Imported by the epilog (through :mod:`carme_runtime.slurm_formats`): no ``typing``/``dataclasses`` at runtime.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from collections.abc import Iterable
    from collections.abc import Mapping
    from typing import Any

#: Slurm 22.05's version: Carme's dialect
LEGACY = "v0.0.38"
#: every version this adapter speaks, newest first
SUPPORTED = ("v0.0.42", "v0.0.41", "v0.0.40", LEGACY)
#: the setting's value that asks slurmrestd which versions it offers
AUTO = "auto"
#: what the dialect says for "no limit" (Slurm's INFINITE, as v0.0.38 prints it)
INFINITE = 0xFFFFFFFF
#: where a slurmrestd serves its OpenAPI document: 23.02 and newer, then 22.05
OPENAPI_PATHS = ("/openapi/v3", "/openapi")

_PATH_VERSION = re.compile(r"^/slurm(?:db)?/(v\d+\.\d+\.\d+)/")


class ApiVersionError(ValueError):
    """No version both sides speak, or a setting that names none."""


def check_setting(value: str) -> str:
    """``SLURMRESTD_API_VERSION``: ``auto`` or one of :data:`SUPPORTED`."""
    value = str(value).strip()
    if value != AUTO and value not in SUPPORTED:
        raise ApiVersionError(
            f"SLURMRESTD_API_VERSION must be {AUTO!r} or one of {', '.join(SUPPORTED)}, got {value!r}"
        )
    return value


def offered_versions(openapi: Mapping[str, Any]) -> set[str]:
    """The versions whose ``/slurm/<version>/`` paths an OpenAPI document lists."""
    paths = openapi.get("paths")
    found = set()
    for path in paths if isinstance(paths, dict) else ():
        match = _PATH_VERSION.match(str(path))
        if match and str(path).startswith("/slurm/"):
            found.add(match.group(1))
    return found


def newest_supported(offered: Iterable[str]) -> str | None:
    offered = set(offered)
    return next((v for v in SUPPORTED if v in offered), None)


def choose_version(get: Callable[[str], Mapping[str, Any] | None]) -> str:
    """The newest supported version a slurmrestd offers. ``get(path)`` returns the JSON object a GET answers, or
    ``None`` when the path is not served (404, or an error answer); connection errors pass through it."""
    for path in OPENAPI_PATHS:
        doc = get(path)
        chosen = newest_supported(offered_versions(doc)) if doc is not None else None
        if chosen:
            return chosen
    for version in SUPPORTED:
        if get(f"/slurm/{version}/ping") is not None:
            return version
    raise ApiVersionError(f"slurmrestd offers none of the API versions Carme speaks ({', '.join(SUPPORTED)})")


# --- values ------------------------------------------------------------------------------------------------------


def number(value: Any, default: int = 0) -> int:
    """An integer as any version prints it: plain, or ``{"set": true, "infinite": false, "number": n}``.

    Infinite is :data:`INFINITE`; unset, missing or not a number is ``default``."""
    if isinstance(value, dict):
        if value.get("infinite"):
            return INFINITE
        if value.get("set") is False:
            return default
        value = value.get("number", default)
    if isinstance(value, bool):
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def first(value: Any) -> str:
    """A state as v0.0.38 prints it (a string) from a newer version's list of flags (the base state first)."""
    if isinstance(value, list):
        return str(value[0]) if value else ""
    return str(value or "")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _names(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value if v]
    return [v for v in _text(value).split(",") if v]


# --- records -----------------------------------------------------------------------------------------------------

_JOB_TEXT = ("user_name", "name", "partition", "nodes", "comment", "state_reason", "account")
_JOB_TRES = ("tres_alloc_str", "tres_per_node", "tres_req_str")


def job_record(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A job (``GET .../jobs``, ``squeue --json``) in the dialect: the keys Carme reads, plain values."""
    rec: dict[str, Any] = {k: _text(raw.get(k)) for k in _JOB_TEXT}
    rec.update({k: _text(raw.get(k)) for k in _JOB_TRES})
    rec["job_id"] = number(raw.get("job_id"))
    rec["user_id"] = number(raw.get("user_id"), -1)
    rec["job_state"] = first(raw.get("job_state"))
    for key in ("start_time", "end_time", "time_limit"):
        rec[key] = number(raw.get(key))
    return rec


def node_record(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A node: ``state`` the base state, ``state_flags`` the rest (newer versions list them all in ``state``)."""
    state = raw.get("state")
    flags = [str(f) for f in raw.get("state_flags") or []]
    if isinstance(state, list):
        base, flags = (str(state[0]) if state else ""), [str(f) for f in state[1:]] + flags
    else:
        base = _text(state)
    return {
        "name": _text(raw.get("name")),
        "state": base,
        "state_flags": flags,
        "gres": _text(raw.get("gres")),
        "gres_used": _text(raw.get("gres_used")),
        "partitions": _names(raw.get("partitions")),
        "address": _text(raw.get("address")),
        "hostname": _text(raw.get("hostname")),
    }


def _sub(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def partition_record(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A partition: ``nodes`` a hostlist, ``max_time_limit`` minutes (:data:`INFINITE`: none), ``flags`` with
    ``DEFAULT`` for the default partition."""
    nodes = raw.get("nodes")
    if "maximums" in raw or isinstance(nodes, dict):  # v0.0.40+: grouped
        part = _sub(raw, "partition")
        max_time = number(_sub(raw, "maximums").get("time"), INFINITE)
        state = first(part.get("state"))
        nodes = _sub(raw, "nodes").get("configured")
        flags = _names(raw.get("flags")) + _names(_sub(raw, "defaults").get("flags")) + _names(part.get("flags"))
    else:
        max_time = number(raw.get("max_time_limit", raw.get("maximum_time")), INFINITE)
        state, flags = _text(raw.get("state")), _names(raw.get("flags"))
    return {
        "name": _text(raw.get("name")),
        "nodes": _text(nodes),
        "max_time_limit": max_time,
        "state": state,
        "flags": flags,
    }


def reservation_record(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A reservation: times in epoch seconds, ``users`` a list of names."""
    return {
        "name": _text(raw.get("name")),
        "start_time": number(raw.get("start_time")),
        "end_time": number(raw.get("end_time")),
        "users": [u for u in _names(raw.get("users")) if u != "(null)"],
        "node_list": _text(raw.get("node_list")),
        "node_count": number(raw.get("node_count")),
        "partition": _text(raw.get("partition")),
        "flags": _names(raw.get("flags")),
        "tres": _text(raw.get("tres")),
    }


def account_record(raw: Mapping[str, Any]) -> dict[str, Any]:
    """An account of Slurm's accounting (``GET /slurmdb/.../accounts``): ``coordinators`` a list of user names."""
    coords = raw.get("coordinators")
    return {
        "name": _text(raw.get("name")),
        "description": _text(raw.get("description")),
        "organization": _text(raw.get("organization")),
        "coordinators": sorted(
            _text(c.get("name")) for c in (coords if isinstance(coords, list) else []) if isinstance(c, dict)
        ),
    }


def association_record(raw: Mapping[str, Any]) -> dict[str, Any]:
    """An association (``GET /slurmdb/.../associations``): ``user`` "" for the account's own; ``grp_tres_minutes``
    its GrpTRESMins as ``{"gres/gpu": minutes, ...}`` (the same shape from v0.0.38 on); the limits a job meets
    (``grp_tres`` GrpTRES, ``max_tres_per_job`` MaxTRESPerJob, ``max_jobs`` MaxJobs, ``max_submit_jobs``
    MaxSubmitJobs, ``max_wall`` MaxWallDurationPerJob in minutes; :data:`INFINITE` where unset)."""
    limits, tres = _sub(raw, "max"), _sub(_sub(raw, "max"), "tres")
    jobs = _sub(limits, "jobs")
    return {
        "account": _text(raw.get("account")),
        "user": _text(raw.get("user")),
        "parent_account": _text(raw.get("parent_account")),
        "is_default": bool(raw.get("is_default")),
        "default_qos": _text(_sub(raw, "default").get("qos")),
        "grp_tres_minutes": tres_counts(_sub(tres, "group").get("minutes")),
        "grp_tres": tres_counts(tres.get("total")),
        "max_tres_per_job": tres_counts(_sub(tres, "per").get("job")),
        "max_jobs": number(jobs.get("active"), INFINITE),
        "max_submit_jobs": number(jobs.get("total"), INFINITE),
        "max_wall": number(_sub(jobs, "per").get("wall_clock"), INFINITE),
    }


def qos_record(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A QOS (``GET /slurmdb/.../qos``): ``max_wall`` MaxWall in minutes, ``max_tres_per_job`` MaxTRESPerJob,
    ``max_tres_per_user`` MaxTRESPerUser, ``max_jobs_per_user`` MaxJobsPerUser (:data:`INFINITE` where unset)."""
    limits = _sub(_sub(raw, "limits"), "max")
    per = _sub(_sub(limits, "tres"), "per")
    return {
        "name": _text(raw.get("name")),
        "max_wall": number(_sub(_sub(limits, "wall_clock"), "per").get("job"), INFINITE),
        "max_tres_per_job": tres_counts(per.get("job")),
        "max_tres_per_user": tres_counts(per.get("user")),
        "max_jobs_per_user": number(_sub(_sub(_sub(limits, "jobs"), "active_jobs"), "per").get("user"), INFINITE),
    }


def tres_counts(items: Any) -> dict[str, int]:
    """A TRES list ``[{"type": "gres", "name": "gpu", "count": n}, ...]`` as ``{"gres/gpu": n}``."""
    tres = [t for t in (items if isinstance(items, list) else []) if isinstance(t, dict)]
    return {_tres_key(t): number(t.get("count"), INFINITE) for t in tres}


def _tres_key(tres: Mapping[str, Any]) -> str:
    """``gres/gpu`` (or ``cpu``) of a TRES item ``{"type": "gres", "name": "gpu", "count": n}``."""
    kind, name = _text(tres.get("type")), _text(tres.get("name"))
    return f"{kind}/{name}" if name else kind


def account_job_record(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A job of Slurm's accounting (``GET /slurmdb/.../jobs``, ``sacct --json``) in dbv0.0.38's shape."""
    state = raw.get("state")
    current = state.get("current") if isinstance(state, dict) else state
    times = _sub(raw, "time")
    comment = raw.get("comment")
    allocated = _sub(raw, "tres").get("allocated")
    tres = [
        {"type": _text(t.get("type")), "name": _text(t.get("name")), "count": number(t.get("count"))}
        for t in (allocated if isinstance(allocated, list) else [])
        if isinstance(t, dict)
    ]
    return {
        "job_id": number(raw.get("job_id")),
        "user": _text(raw.get("user")),
        "account": _text(raw.get("account")),
        "name": _text(raw.get("name")),
        "state": {"current": first(current)},
        "time": {k: number(times.get(k)) for k in ("start", "end", "elapsed")},
        "comment": {"job": _text(comment.get("job") if isinstance(comment, dict) else comment)},
        "working_directory": _text(raw.get("working_directory")),
        "std_out": _text(raw.get("std_out") or raw.get("stdout")),
        "tres": {"allocated": tres},
    }


# --- requests ----------------------------------------------------------------------------------------------------


def _set(value: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": int(value)}


#: dialect keys whose value newer versions take as ``{"set", "number"}``
_NUMBERS = ("time_limit", "memory_per_node")


def _job_desc(job: Mapping[str, Any]) -> dict[str, Any]:
    """A v0.0.38 job description as v0.0.40+ takes it."""
    out: dict[str, Any] = {}
    for key, value in job.items():
        if key in _NUMBERS:
            out[key] = _set(value)
        elif key == "nodes":  # a count in v0.0.38
            out["minimum_nodes"] = out["maximum_nodes"] = int(value)
        elif key == "environment" and isinstance(value, dict):
            out[key] = [f"{k}={v}" for k, v in value.items()]
        elif key == "gres":  # "gpu:N"; newer versions take TRES per node
            out["tres_per_node"] = f"gres/{value}"
        else:
            out[key] = value
    return out


class SlurmRestApi:
    """Paths and request bodies of one slurmrestd version."""

    __slots__ = ("version",)

    def __init__(self, version: str) -> None:
        if version not in SUPPORTED:
            raise ApiVersionError(f"unsupported slurmrestd API version {version!r}")
        self.version = version

    def __repr__(self) -> str:
        return f"SlurmRestApi({self.version!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlurmRestApi) and other.version == self.version

    def __hash__(self) -> int:
        return hash(self.version)

    @property
    def legacy(self) -> bool:
        return self.version == LEGACY

    def path(self, endpoint: str) -> str:
        """``jobs`` -> ``/slurm/<version>/jobs``."""
        return f"/slurm/{self.version}/{endpoint.lstrip('/')}"

    def db_path(self, endpoint: str) -> str:
        """``associations`` -> ``/slurmdb/<version>/associations``."""
        return f"/slurmdb/{self.version}/{endpoint.lstrip('/')}"

    def accounts_path(self) -> str:
        """The accounts with their coordinators: v0.0.38 lists them always, v0.0.40+ only when asked (an unknown query
        field is refused by 22.05's slurmrestd)."""
        return self.db_path("accounts" if self.legacy else "accounts?WithCoordinators=true")

    def submit_body(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """``POST job/submit``'s body from the dialect's ``{"script": ..., "job": {...}}``."""
        if self.legacy:
            return dict(payload)
        job = _job_desc(payload.get("job") or {})
        if "script" in payload:
            job["script"] = payload["script"]
        return {"job": job}

    def update_body(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """``POST job/<id>``'s body (the job properties to change, in the dialect)."""
        return dict(changes) if self.legacy else _job_desc(changes)


#: Carme's dialect (Slurm 22.05's version), for code that builds or posts the dialect itself
LEGACY_API = SlurmRestApi(LEGACY)
