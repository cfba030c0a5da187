# SPDX-License-Identifier: GPL-3.0-or-later
"""The carme_backup role's slurm-usage part: this month's GPU-minutes per association as slurmctld enforces them,
the record the slurm role carries across the upgrade (``slurm_usage_carryover``; docs/upgrade.md "Budgets across
the upgrade"). The record's code is carme_runtime/usage_carryover.py, reached through the role's
``module_utils/carme_usage_carryover.py`` link (a filter runs on the controller, so the file is loaded by path)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _load_carryover() -> Any:
    path = Path(__file__).resolve().parent.parent / "module_utils" / "carme_usage_carryover.py"
    spec = importlib.util.spec_from_file_location("carme_backup_role_usage_carryover", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


carryover = _load_carryover()


def carme_backup_usage_record(assoc_mgr: str, month: str, taken: str, slurm_version: str = "") -> dict[str, Any]:
    """The carry-over record from ``scontrol show assoc_mgr flags=assoc``: the GPU-minutes each association used,
    belonging to ``month`` (YYYY-MM), taken at ``taken``."""
    minutes = carryover.parse_assoc_mgr(assoc_mgr)
    cluster = next((line.split()[0].partition("=")[2] for line in assoc_mgr.splitlines()
                    if line.startswith("ClusterName=")), "")  # fmt: skip
    record: dict[str, Any] = carryover.record(minutes, month, taken, cluster, slurm_version)
    return record


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"carme_backup_usage_record": carme_backup_usage_record}
