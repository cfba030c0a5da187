# SPDX-License-Identifier: GPL-3.0-or-later
"""Storage in the portal: the admin-declared datasets (start form) and the user's storage quota (dashboard).

Both come from config.py (the carme_webui role renders ``carme_webui_settings``): ``DATASETS``, a list of
``{name, path, readonly, description}`` (the inventory's ``carme_datasets``, the same list the nodes' runtime.json
binds into sessions), and ``STORAGE_QUOTA``: ``"beegfs"`` to read quotas with ``beegfs-ctl`` (``STORAGE_QUOTA_COMMAND``,
the argv prefix), anything else to say quotas are not available. The quota runs through carme_runtime and is cached
``QUOTA_CACHE_SECONDS``; a failing tool shows "unknown", never an error page.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from flask import current_app

from carme_runtime.command_runner import SubprocessRunner
from carme_runtime.config import is_dataset_name
from carme_runtime.storage_quota import StorageQuotaError
from carme_runtime.storage_quota import user_quota
from webui.caches import cached_view

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Dataset:
    name: str
    path: str
    readonly: bool
    description: str


def datasets() -> list[Dataset]:
    """The declared datasets; an entry without a valid name or an absolute path is skipped and logged."""
    out = []
    for entry in current_app.config.get("DATASETS") or ():
        name = str(entry.get("name", "")) if isinstance(entry, dict) else ""
        path = str(entry.get("path", "")) if isinstance(entry, dict) else ""
        if not is_dataset_name(name) or not path.startswith("/"):
            log.warning(
                "DATASETS: entry %r skipped (needs a name of letters, digits, . _ - and an absolute path)", entry
            )
            continue
        assert isinstance(entry, dict)
        out.append(Dataset(name, path, bool(entry.get("readonly", True)), str(entry.get("description", ""))))
    return out


def _gib(value: int | None) -> float | None:
    return None if value is None else round(value / 2**30, 2)


def quota_view(username: str) -> dict[str, Any]:
    """``available`` False: the cluster has no storage quotas; else used/limit in GiB and files (None = unknown)."""
    if current_app.config.get("STORAGE_QUOTA") != "beegfs":
        return {"available": False}

    def read() -> dict[str, Any]:
        prefix = tuple(current_app.config.get("STORAGE_QUOTA_COMMAND") or ("beegfs-ctl",))
        try:
            quota = user_quota(username, SubprocessRunner(timeout=10), prefix)
        except StorageQuotaError as exc:
            log.warning("storage quota of %s unknown: %s", username, exc)
            quota = None
        if quota is None:
            return {"available": True, "known": False}
        return {
            "available": True,
            "known": True,
            "used_gib": _gib(quota.size_used),
            "limit_gib": _gib(quota.size_limit),
            "percent": quota.percent,
            "files_used": quota.files_used,
            "files_limit": quota.files_limit,
        }

    return cached_view(("storage-quota", username), read, float(current_app.config["QUOTA_CACHE_SECONDS"]))
