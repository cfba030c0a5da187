# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's Zabbix client: ``host.get`` as the read-only API user (roles/zabbix_server), and its answer as
:class:`Health` (each host's Carme items, GPUs and open problems).

Standard library and zabbix-utils only: Molecule's ``monitoring`` scenario runs this file on its own against a real
Zabbix (molecule/monitoring/files/portal_health_check.py). The portal's shared snapshot is
:mod:`webui.monitoring.health`.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Any

# Items the health page shows, in this order: key -> label.
SHOWN_ITEMS = {
    "agent.ping": "Agent",
    "carme.slurm.node": "Slurm state",
    "proc.num[slurmd]": "slurmd",
    "proc.num[slurmctld]": "slurmctld",
    "proc.num[slurmdbd]": "slurmdbd",
    "proc.num[munged]": "munged",
    "proc.num[slapd]": "slapd",
    "proc.num[sssd]": "sssd",
    "proc.num[nginx]": "nginx",
    "proc.num[,,,webui.wsgi]": "portal",
    "vfs.fs.size[{$CARME.HOME},pused]": "home used",
    "vfs.fs.size[{$CARME.SCRATCH},pused]": "scratch used",
}
SEVERITIES = ("not classified", "information", "warning", "average", "high", "disaster")


@dataclass(frozen=True)
class Value:
    label: str
    value: str  # as Zabbix has it: the pages format it (webui.monitoring.view)
    units: str = ""
    clock: int = 0
    key: str = ""


@dataclass(frozen=True)
class Gpu:
    index: str
    name: str
    utilization: float | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    temperature: float | None = None

    @property
    def memory_text(self) -> str:
        if self.memory_used is None or self.memory_total is None:
            return "n/a"
        return f"{self.memory_used // 1048576} / {self.memory_total // 1048576} MiB"


@dataclass(frozen=True)
class Problem:
    name: str
    severity: str
    since: int

    @property
    def since_text(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.since)) if self.since else ""


@dataclass(frozen=True)
class HostHealth:
    name: str
    values: tuple[Value, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    problems: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class Health:
    hosts: Mapping[str, HostHealth] = field(default_factory=dict)
    fetched_at: float = 0.0
    error: str | None = None  # the last refresh failed: hosts are the last good copy (or none)
    enabled: bool = True

    def host(self, name: str) -> HostHealth | None:
        return self.hosts.get(name)


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _gpus(items: list[dict[str, Any]]) -> tuple[Gpu, ...]:
    """The GPUs from the master item's JSON (one nvidia-smi call on the node, see roles/zabbix_agent)."""
    stats = next((i for i in items if i.get("key_") == "carme.gpu.stats"), None)
    if stats is None or not stats.get("lastvalue"):
        return ()
    try:
        rows = json.loads(stats["lastvalue"])
    except ValueError:
        return ()
    gpus = []
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        mem_used, mem_total = _number(row.get("memory_used")), _number(row.get("memory_total"))
        gpus.append(
            Gpu(
                index=str(row.get("index", "")),
                name=str(row.get("name", "")),
                utilization=_number(row.get("utilization")),
                memory_used=None if mem_used is None else int(mem_used),
                memory_total=None if mem_total is None else int(mem_total),
                temperature=_number(row.get("temperature")),
            )
        )
    return tuple(gpus)


def parse_hosts(hosts: list[dict[str, Any]], now: float) -> Health:
    """A :class:`Health` from ``host.get`` with ``selectItems`` and ``selectTriggers`` (see :func:`fetch`)."""
    out: dict[str, HostHealth] = {}
    for h in hosts:
        name = str(h.get("host", ""))
        items = [i for i in h.get("items", []) if isinstance(i, dict)]
        by_key = {i.get("key_"): i for i in items}
        values = []
        for key, label in SHOWN_ITEMS.items():
            item = by_key.get(key)
            if item is None or str(item.get("state", "0")) == "1" or not int(item.get("lastclock") or 0):
                continue  # not on this host, unsupported, or no data yet
            value, units, clock = (
                str(item.get("lastvalue", "")),
                str(item.get("units", "")),
                int(item.get("lastclock") or 0),
            )
            values.append(Value(label, value, units, clock, key))
        problems = []
        for t in h.get("triggers", []):
            if str(t.get("value")) != "1" or str(t.get("status", "0")) != "0":
                continue
            prio = int(t.get("priority") or 0)
            problems.append(
                Problem(
                    name=str(t.get("description", "")).replace("{HOST.NAME}", name),
                    severity=SEVERITIES[prio] if 0 <= prio < len(SEVERITIES) else str(prio),
                    since=int(t.get("lastchange") or 0),
                )
            )
        problems.sort(key=lambda p: (-SEVERITIES.index(p.severity) if p.severity in SEVERITIES else 0, p.name))
        out[name] = HostHealth(name, tuple(values), _gpus(items), tuple(problems))
    return Health(hosts=dict(sorted(out.items())), fetched_at=now)


class ZabbixSource:
    """Talks to Zabbix with zabbix-utils; keeps its login between refreshes (one ``host.get`` per refresh)."""

    def __init__(self, config: Mapping[str, Any]):
        self.url = str(config["ZABBIX_URL"])
        self.user = str(config.get("ZABBIX_USER") or "")
        self.password = str(config.get("ZABBIX_PASSWORD") or "")
        self.ca_file = config.get("ZABBIX_CA_FILE")
        self.timeout = int(config.get("ZABBIX_TIMEOUT_SECONDS", 5))
        self._api: Any = None

    def _connect(self) -> Any:
        from zabbix_utils import ZabbixAPI  # type: ignore[import-untyped]

        ctx = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None
        return ZabbixAPI(url=self.url, user=self.user, password=self.password, ssl_context=ctx, timeout=self.timeout)

    def hosts(self) -> list[dict[str, Any]]:
        if self._api is None:
            self._api = self._connect()
        try:
            result: list[dict[str, Any]] = self._api.host.get(
                output=["host"],
                selectItems=["key_", "lastvalue", "lastclock", "units", "state"],
                selectTriggers=["description", "priority", "value", "lastchange", "status"],
                monitored_hosts=True,
            )
        except Exception:
            self._api = None  # log in again next time (expired session, restarted server)
            raise
        return result
