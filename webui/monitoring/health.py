# SPDX-License-Identifier: GPL-3.0-or-later
"""Node health for the pages: one shared Zabbix snapshot per worker, refreshed with one API call per interval for
every user.

The portal asks ``host.get`` (:mod:`webui.monitoring.zabbix`) once per ``ZABBIX_CACHE_SECONDS`` for every host with
its Carme items and triggers. Requests read the snapshot; none of them talks to Zabbix. When Zabbix is down the
snapshot keeps the last good values, flagged with the error (pages show a banner), and the failure is cached for the
same interval, so an outage never turns into a storm of requests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from flask import current_app

from webui.caches import SnapshotCache
from webui.monitoring.zabbix import Health
from webui.monitoring.zabbix import ZabbixSource
from webui.monitoring.zabbix import parse_hosts

log = logging.getLogger(__name__)


def health_cache(
    fetch: Callable[[], list[dict[str, Any]]] | None,
    ttl: float,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> SnapshotCache[Health]:
    """The :class:`Health` snapshot of ``fetch``'s hosts, refreshed at most once per ``ttl`` seconds per process,
    single-flight; ``fetch`` None: monitoring is off."""
    if fetch is None:
        return SnapshotCache(lambda: Health(enabled=False), ttl, on_error=_flagged, clock=clock)
    hosts = fetch
    return SnapshotCache(lambda: parse_hosts(hosts(), wall()), ttl, on_error=_flagged, clock=clock)


def _flagged(last: Health | None, exc: Exception) -> Health:
    """Any failure (network, TLS, API, bad data) is an outage: the last good values, flagged with it."""
    log.warning("Zabbix refresh failed: %s", exc)
    old = last or Health()
    return Health(hosts=old.hosts, fetched_at=old.fetched_at, error=_describe(exc))


def _describe(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "…"


def from_config(config: Mapping[str, Any]) -> SnapshotCache[Health]:
    """``ZABBIX_URL`` unset: monitoring is off (no health page content, no dashboard card)."""
    ttl = float(config.get("ZABBIX_CACHE_SECONDS", 30))
    return health_cache(ZabbixSource(config).hosts if config.get("ZABBIX_URL") else None, ttl)


def node_health() -> Health:
    """The app's Zabbix snapshot (one per worker, shared by every request)."""
    cache: SnapshotCache[Health] = current_app.extensions["carme_monitoring"]
    return cache.get()
