# SPDX-License-Identifier: GPL-3.0-or-later
"""What a session may be started with: the enabled images, the apps they allow, and the start form's limits."""

from __future__ import annotations

from typing import Any

from flask import current_app
from sqlalchemy import select

from carme_runtime.apps import AppSpec
from webui.extensions import db
from webui.models import ImageCatalog
from webui.quota.limits import user_limits
from webui.slurm.session_spec import load_apps
from webui.slurm.state import ClusterState


def session_runtime(kind: str) -> str:
    """carme_runtime's runtime for a catalogue entry: environments run in their prefix, ``container`` images (built
    by ``carme image build``) in the site's container runtime (``CONTAINER_RUNTIME``), older ``image`` entries in
    Apptainer."""
    if kind == "environment":
        return "none"
    if kind == "container":
        return str(current_app.config.get("CONTAINER_RUNTIME", "apptainer"))
    return "apptainer"


def catalog() -> list[ImageCatalog]:
    return list(
        db.session.execute(
            select(ImageCatalog).where(ImageCatalog.enabled.is_(True)).order_by(ImageCatalog.name)
        ).scalars()
    )


def installed_apps() -> dict[str, AppSpec]:
    return load_apps(tuple(current_app.config["CARME_APP_DIRS"]))


def available_apps(images: list[ImageCatalog]) -> list[str]:
    """Apps some enabled image allows and carme_runtime knows."""
    installed = installed_apps()
    return sorted({a for img in images for a in img.allowed_apps if a in installed})


def app_spec(name: str) -> AppSpec | None:
    return installed_apps().get(name)


def form_limits(username: str, state: ClusterState, partition: str | None = None) -> dict[str, Any]:
    """What the user may ask for in ``partition``: Slurm's limits for them (``limits``, :mod:`webui.quota.limits`),
    the settings and the partition's nodes together. ``max_sessions``: ``None`` where Slurm sets no limit."""
    slurm = user_limits(username)
    part_obj = next((p for p in state.partitions if p.name == partition), None) if partition else None
    max_time = int(current_app.config["SESSION_MAX_TIME_MINUTES"])
    for cap in (slurm.time_minutes.value, part_obj.max_time_minutes if part_obj else None):
        max_time = min(max_time, cap) if cap else max_time
    max_cpus, max_mem_mb = resource_limits()
    per_node = state.max_gpus_per_node(partition)
    per_session = slurm.gpus_per_session.value
    return {
        "max_gpus": per_node if per_session is None else min(per_session, per_node),
        "max_cpus": max_cpus,
        "max_mem_mb": max_mem_mb,
        "default_cpus": min(max_cpus, max(1, int(current_app.config["SESSION_DEFAULT_CPUS"]))),
        "default_mem_mb": min(max_mem_mb, max(1, int(current_app.config["SESSION_DEFAULT_MEM_MB"]))),
        "max_nodes": max(1, min(int(current_app.config.get("SESSION_MAX_NODES", 1)), _usable_nodes(state, partition))),
        "max_time_minutes": max_time,
        "max_sessions": slurm.sessions.value,
        "limits": slurm,
    }


def resource_limits() -> tuple[int, int]:
    """The CPUs and MB of memory (per node) a session may ask for: ``SESSION_MAX_CPUS`` and ``SESSION_MAX_MEM_MB``,
    or the defaults' values where those are unset."""
    cfg = current_app.config
    max_cpus = int(cfg.get("SESSION_MAX_CPUS") or cfg["SESSION_DEFAULT_CPUS"])
    max_mem_mb = int(cfg.get("SESSION_MAX_MEM_MB") or cfg["SESSION_DEFAULT_MEM_MB"])
    return max(1, max_cpus), max(1, max_mem_mb)


def _usable_nodes(state: ClusterState, partition: str | None) -> int:
    """How many usable nodes the partition has (all partitions' nodes without one)."""
    part = next((p for p in state.partitions if p.name == partition), None) if partition else None
    members = set(part.nodes) if part else set()
    return sum(1 for n in state.nodes if n.usable and (not partition or n.name in members or partition in n.partitions))
