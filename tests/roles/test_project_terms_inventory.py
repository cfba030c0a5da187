# SPDX-License-Identifier: GPL-3.0-or-later
"""An inventory project's owner (PI) and end date (issue 31), templated by Ansible itself (its Templar, no playbook):
the demo inventory's groups (users.yml ``pi``, ``end_date``) become the slurm role's accounts with ``GrpSubmitJobs``
0 once the end date has passed at deploy time (-1 while it runs) and the portal role's ``carme_webui_project_terms``,
which config.py renders as the ``PROJECT_TERMS`` the portal reads. Slurm refusing such an account's sbatch: the host
test in tests/integration/test_slurm_accounting.py."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]
from ansible.template import Templar  # type: ignore[import-untyped]
from ansible.template import trust_as_template

from tests.roles.harness import REPO_ROOT
from webui.projects import terms

DEMO = REPO_ROOT / "inventories" / "demo" / "group_vars" / "all"
CONFIG = REPO_ROOT / "roles" / "carme_webui" / "templates" / "etc" / "carme" / "webui" / "config.py.j2"


def load(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((DEMO / name).read_text()))


def template(expr: str, variables: dict[str, Any]) -> Any:
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr))


def research(groups: list[dict[str, Any]]) -> dict[str, Any]:
    accounts = template(load("slurm.yml")["slurm_accounts"], {"carme_groups": groups})
    return dict(next(a for a in accounts if a["name"] == "research"))


def demo_research(**changes: Any) -> list[dict[str, Any]]:
    groups = load("users.yml")["carme_groups"]
    return [{**g, **changes} if g["name"] == "research" else g for g in groups]


def test_the_demo_declares_research_with_its_pi_and_an_end_date_still_ahead() -> None:
    group = next(g for g in load("users.yml")["carme_groups"] if g["name"] == "research")
    assert group["pi"] == "alice" and dt.date.fromisoformat(group["end_date"]) > dt.date(2026, 11, 27)
    assert research(demo_research())["GrpSubmitJobs"] == -1  # runs: any earlier stop lifted


@pytest.mark.parametrize("end", ["2020-01-01", dt.date(2020, 1, 1)])
def test_an_ended_declared_project_gets_grp_submit_jobs_zero_at_deploy(end: object) -> None:
    assert research(demo_research(end_date=end))["GrpSubmitJobs"] == 0
    limits = {"slurm_account_limits": {"GrpSubmitJobs": 5}}
    assert research(demo_research(end_date=end, **limits))["GrpSubmitJobs"] == 0  # the end wins over a limit
    assert research(demo_research(end_date="2999-01-01", **limits))["GrpSubmitJobs"] == 5
    groups = [{k: v for k, v in g.items() if k not in ("pi", "end_date")} for g in demo_research()]
    assert "GrpSubmitJobs" not in research(groups)  # no end date: the account's own limits only


def config_terms(value: Any) -> dict[str, Any]:
    """The config.py line that holds ``carme_webui_project_terms``, templated and run as the portal would."""
    [line] = [line for line in CONFIG.read_text().splitlines() if line.startswith("PROJECT_TERMS = ")]
    scope: dict[str, Any] = {"_json": __import__("json")}
    exec(template(line, {"carme_webui_project_terms": value}), scope)
    return dict(scope["PROJECT_TERMS"])


def test_the_portal_learns_the_terms_from_the_inventory() -> None:
    value = template(load("portal.yml")["carme_webui_project_terms"], {"carme_groups": demo_research()})
    assert value == {"research": {"pi": "alice", "end_date": "2030-12-31"}}
    assert terms.inventory_terms(config_terms(value)) == {"research": terms.Terms("alice", dt.date(2030, 12, 31))}
    expr, groups = load("portal.yml")["carme_webui_project_terms"], demo_research(end_date=dt.date(2027, 6, 30))
    unquoted = template(expr, {"carme_groups": groups})  # an unquoted YAML date
    assert config_terms(unquoted)["research"]["end_date"] == "2027-06-30"
    assert config_terms({}) == {}
