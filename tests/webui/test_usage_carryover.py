# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal across the upgrade (docs/upgrade.md "Budgets across the upgrade"): in the month of the carry-over it
shows and checks the declared budget and the usage with the carried minutes added (the slurm role's record,
SLURM_USAGE_CARRYOVER_FILE); in another month, or without the record, Slurm's own figures, and the tick gives Slurm
the declared budgets back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from flask import Flask

from webui.models import utcnow
from webui.quota.carryover import restore_declared
from webui.quota.limits import user_limits
from webui.quota.usage import quota_view
from webui.slurm.records import SlurmProject
from webui.utilisation import tick

from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import post
from .conftest import set_slurm_limits


def carried(path: Path, month: str) -> None:
    """What the slurm role writes: alice's 2 GPU-hours declared, 1 used before the upgrade, 1 left in Slurm."""
    path.write_text(json.dumps({"format": 1, "tres": "gres/gpu", "month": month, "associations": {
        "alice@research": {"declared": 120, "carried": 60, "limit": 60},
        "research": {"declared": 6000, "carried": 90, "limit": 5910}}}))  # fmt: skip


def test_this_month_the_portal_counts_the_carried_usage_against_the_declared_budget(
    app: Flask, fake_scheduler: FakeScheduler, tmp_path: Path
) -> None:
    app.config["SLURM_USAGE_CARRYOVER_FILE"] = str(tmp_path / "carried.json")
    carried(tmp_path / "carried.json", utcnow().strftime("%Y-%m"))
    set_slurm_limits(fake_scheduler, "alice", gpu_minutes=60)  # Slurm holds 120 - 60; the fake has used 1.5 since
    with app.test_request_context("/"):
        view = quota_view("alice")
        assert (view["used_gpu_hours"], view["limit_gpu_hours"], view["left_gpu_hours"]) == (2.5, 2.0, 0.0)
        assert quota_view("alice", cached=True)["used_gpu_hours"] == 2.5
        assert user_limits("alice").gpu_minutes.slurm == (
            "association alice@research GrpTRESMins=gres/gpu=60 this month (lowered by the GPU-minutes carried over "
            "the upgrade): declared gres/gpu=120"
        )
    client = app.test_client()
    log_in_as(app, client, "alice")
    resp = post(client, "/sessions/new", {"app": "jupyterlab", "image": "pytorch", "gpus": "1", "time_minutes": "30"})
    said = resp.get_data(as_text=True)
    assert resp.status_code == 400 and "GPU budget for this month is used up (2.5 of 2 GPU-hours" in said


def test_in_another_month_or_without_the_record_slurms_own_figures(
    app: Flask, fake_scheduler: FakeScheduler, tmp_path: Path
) -> None:
    set_slurm_limits(fake_scheduler, "alice", gpu_minutes=120)  # a deploy after the month restored the declared 120
    for config in (
        {"SLURM_USAGE_CARRYOVER_FILE": str(tmp_path / "carried.json")},
        {},
        {"SLURM_USAGE_CARRYOVER_FILE": "/no/such"},
    ):
        carried(tmp_path / "carried.json", "2000-01")
        app.config.pop("SLURM_USAGE_CARRYOVER_FILE", None)
        app.config.update(config)
        with app.test_request_context("/"):
            view: dict[str, Any] = quota_view("alice")
            assert (view["used_gpu_hours"], view["limit_gpu_hours"]) == (1.5, 2.0), config
            assert user_limits("alice").gpu_minutes.slurm == "association alice@research GrpTRESMins=gres/gpu=120"


class Sacctmgr:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def sacctmgr(self, args: list[str]) -> str:
        self.calls.append(list(args))
        return ""


def test_once_the_month_is_over_the_tick_gives_slurm_the_declared_budgets_back(
    app: Flask, fake_scheduler: FakeScheduler, tmp_path: Path
) -> None:
    acct = Sacctmgr()
    app.config.update(SLURM_USAGE_CARRYOVER_FILE=str(tmp_path / "carried.json"), ACCOUNTING=acct)
    fake_scheduler.project_list = (SlurmProject("research", "", (), ("alice",), 5910),)
    set_slurm_limits(fake_scheduler, "alice", gpu_minutes=60)  # both still at their lowered limits
    carried(tmp_path / "carried.json", utcnow().strftime("%Y-%m"))
    with app.test_request_context("/"):
        assert restore_declared() == "nothing to restore" and acct.calls == []  # the month is not over
        carried(tmp_path / "carried.json", "2000-01")
        assert tick.run_tasks({"carryover": tick.TASKS["carryover"]})["carryover"].startswith("2 budget(s) restored")
    assert acct.calls == [
        ["modify", "user", "where", "name=alice", "account=research", "set", "GrpTRESMins=gres/gpu=120"],
        ["modify", "account", "where", "name=research", "set", "GrpTRESMins=gres/gpu=6000"],
    ]
    set_slurm_limits(fake_scheduler, "alice", gpu_minutes=240)  # changed since (a deploy, an admin): left alone
    fake_scheduler.project_list = (SlurmProject("research", "", (), ("alice",), 6000),)
    with app.test_request_context("/"):
        assert restore_declared().startswith("0 budget(s)")
    assert len(acct.calls) == 2


def test_the_portal_role_reads_the_file_the_slurm_role_writes() -> None:
    """roles/carme_webui renders SLURM_USAGE_CARRYOVER_FILE from its variable, whose default is the slurm role's."""
    roles = Path(__file__).resolve().parents[2] / "roles"
    config = (roles / "carme_webui" / "templates" / "etc" / "carme" / "webui" / "config.py.j2").read_text()
    assert "SLURM_USAGE_CARRYOVER_FILE = {{ carme_webui_usage_carryover_file | to_json }}" in config.splitlines()
    webui_defaults = yaml.safe_load((roles / "carme_webui" / "defaults" / "main.yml").read_text())
    slurm_defaults = yaml.safe_load((roles / "slurm" / "defaults" / "main.yml").read_text())
    assert webui_defaults["carme_webui_usage_carryover_file"] == slurm_defaults["slurm_usage_carryover_file"]
