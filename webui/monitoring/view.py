# SPDX-License-Identifier: GPL-3.0-or-later
"""Zabbix values as the pages show them: in words and units, with times relative to now, and only the items that
apply to the node's role (the admin's health page; the raw snapshot is :mod:`webui.monitoring.zabbix`).

A node is a compute node when Slurm lists it (or, while Slurm cannot say, when its agent reports a Slurm node state);
every other monitored host is a service host (the head): the Carme template's items are on every host, but slurmd,
the Slurm state and GPUs mean something only on compute nodes, and slurmctld, slurmdbd, slapd, nginx and the portal
only on the head.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from webui.monitoring.zabbix import Gpu
from webui.monitoring.zabbix import HostHealth
from webui.monitoring.zabbix import Problem
from webui.monitoring.zabbix import Value

COMPUTE = "compute"
HEAD = "head"
#: item keys shown only on compute nodes, and only on the head; the rest (agent, munged, sssd, disks) on both
COMPUTE_ITEMS = frozenset({"proc.num[slurmd]", "carme.slurm.node"})
HEAD_ITEMS = frozenset(
    {"proc.num[slurmctld]", "proc.num[slurmdbd]", "proc.num[slapd]", "proc.num[nginx]", "proc.num[,,,webui.wsgi]"}
)
SLURM_STATE_KEY = "carme.slurm.node"


@dataclass(frozen=True)
class Shown:
    """One item as the page shows it: ``ok`` False marks a bad service or agent value (None: no judgement)."""

    label: str
    text: str
    clock: int
    ok: bool | None = None


@dataclass(frozen=True)
class NodeView:
    name: str
    role: str  # COMPUTE or HEAD
    values: tuple[Shown, ...]
    gpus: tuple[Gpu, ...]
    problems: tuple[Problem, ...]


def role_of(host: HostHealth, slurm_nodes: Collection[str]) -> str:
    """COMPUTE when Slurm lists the node or its agent reports a Slurm node state, else HEAD."""
    if host.name in slurm_nodes or any(v.key == SLURM_STATE_KEY and v.value for v in host.values):
        return COMPUTE
    return HEAD


def applies(key: str, role: str) -> bool:
    if key in COMPUTE_ITEMS:
        return role == COMPUTE
    return role == HEAD if key in HEAD_ITEMS else True


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def shown(value: Value) -> Shown:
    """``proc.num[...]``: running / not running; ``agent.ping``: answering / not answering; percentages with one
    decimal; anything else as Zabbix has it, with its units."""
    number = _number(value.value)
    if value.key.startswith("proc.num[") and number is not None:
        return Shown(value.label, "running" if number > 0 else "not running", value.clock, number > 0)
    if value.key == "agent.ping":
        up = number == 1
        return Shown(value.label, "answering" if up else "not answering", value.clock, up)
    if value.units == "%" and number is not None:
        return Shown(value.label, f"{number:.1f} %", value.clock)
    text = f"{value.value} {value.units}" if value.units else value.value
    return Shown(value.label, text, value.clock)


def node_view(host: HostHealth, slurm_nodes: Collection[str]) -> NodeView:
    role = role_of(host, slurm_nodes)
    values = tuple(shown(v) for v in host.values if applies(v.key, role))
    return NodeView(host.name, role, values, host.gpus if role == COMPUTE else (), host.problems)


def ago(timestamp: float, now: float | None = None) -> str:
    """``timestamp`` (Unix time) relative to ``now``: "just now", "3 min ago", "2 h ago", "5 days ago"."""
    seconds = int((time.time() if now is None else now) - timestamp)
    if seconds < 0:
        return "in the future"
    if seconds < 60:
        return "just now" if seconds < 10 else f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    days = seconds // 86400
    return f"{days} day{'s' if days > 1 else ''} ago"


def utc_text(timestamp: float) -> str:
    """The absolute time, for a title: ``2026-11-26 12:56:19 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timestamp))


def utc_iso(timestamp: float) -> str:
    """The machine-readable time for ``<time datetime>``: ``2026-11-26T12:56:19Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))
