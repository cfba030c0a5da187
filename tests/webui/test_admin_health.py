# SPDX-License-Identifier: GPL-3.0-or-later
"""The admin's node health page reads like a product: values in words and units, relative times with the absolute
UTC time in a title, and only the items of the node's role (issue 30). Canned Zabbix data through the Zabbix
stand-in (tests/fixtures/zabbix_standin.py) and the real client; the formatting functions directly."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.zabbix_standin import ZabbixStandIn
from tests.fixtures.zabbix_standin import zabbix_standin
from webui.monitoring import view
from webui.monitoring.zabbix import HostHealth
from webui.monitoring.zabbix import Value

from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import make_app

NOW = 1_800_000_000


def item(key: str, value: str, *, units: str = "", age: int = 180, state: str = "0") -> dict[str, Any]:
    return {"key_": key, "lastvalue": value, "lastclock": str(int(time.time()) - age), "units": units, "state": state}


def head_host() -> dict[str, Any]:
    """The head as Zabbix has it: every Carme item (the template is on every host); no Slurm node state
    (scontrol knows no node "head": unsupported)."""
    items = [
        item("agent.ping", "1"),
        item("carme.slurm.node", "", state="1"),
        item("proc.num[slurmd]", "0"),
        item("proc.num[slurmctld]", "1"),
        item("proc.num[slurmdbd]", "1"),
        item("proc.num[munged]", "1"),
        item("proc.num[nginx]", "2"),
        item("proc.num[,,,webui.wsgi]", "3"),
        item("vfs.fs.size[{$CARME.HOME},pused]", "32.607202", units="%", age=7200),
    ]
    return {"hostid": "10001", "host": "head", "items": items, "triggers": []}


def compute_host(name: str) -> dict[str, Any]:
    items = [
        item("agent.ping", "1"),
        item("carme.slurm.node", "IDLE"),
        item("proc.num[slurmd]", "1"),
        item("proc.num[slurmctld]", "0"),
        item("proc.num[slurmdbd]", "0"),
        item("proc.num[munged]", "0"),
        item("proc.num[nginx]", "0"),
        item("carme.gpu.stats", "[]"),
    ]
    return {"hostid": "10002", "host": name, "items": items, "triggers": []}


@pytest.fixture
def zabbix() -> Iterator[ZabbixStandIn]:
    with zabbix_standin() as standin:
        standin.hosts = [head_host(), compute_host("gpu01")]
        yield standin


def health_page(base_config: dict[str, Any], sched: FakeScheduler, url: str) -> str:
    app = make_app({**base_config, "SCHEDULER": sched, "ZABBIX_URL": url, "ZABBIX_USER": "carme-api",
                    "ZABBIX_PASSWORD": "api-password-0123456789", "ZABBIX_TIMEOUT_SECONDS": 2})  # fmt: skip
    client = app.test_client()
    log_in_as(app, client, "carol", admin=True)
    page = client.get("/admin/health")
    assert page.status_code == 200
    return page.get_data(as_text=True)


def section(html: str, node: str) -> str:
    match = re.search(rf'<section class="node-health" data-node="{node}".*?</section>', html, re.S)
    assert match, html
    return match.group(0)


def test_values_in_words_and_units_with_relative_times(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, zabbix: ZabbixStandIn
) -> None:
    head = section(health_page(base_config, fake_scheduler, zabbix.url), "head")
    assert "32.6 %" in head and "32.607202" not in head
    assert re.search(r"<td>slurmctld</td><td>running</td>", head)
    assert re.search(r"<td>Agent</td><td>answering</td>", head)
    assert "3 min ago" in head and "2 h ago" in head
    assert re.search(
        r'<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">', head
    )
    assert "Unix time" not in head


def test_each_node_shows_the_items_of_its_role(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, zabbix: ZabbixStandIn
) -> None:
    html = health_page(base_config, fake_scheduler, zabbix.url)
    head, gpu01 = section(html, "head"), section(html, "gpu01")
    assert 'data-role="head"' in head and 'data-role="compute"' in gpu01
    for label in ("slurmctld", "slurmdbd", "nginx", "portal"):
        assert f"<td>{label}</td>" in head and f"<td>{label}</td>" not in gpu01
    for label in ("slurmd", "Slurm state"):
        assert f"<td>{label}</td>" in gpu01 and f"<td>{label}</td>" not in head
    assert re.search(r'<td>munged</td><td class="bad">not running</td>', gpu01)  # shared items on both, judged
    assert "<td>munged</td>" in head


def test_a_node_slurm_lists_is_compute_even_without_its_slurm_state(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, zabbix: ZabbixStandIn
) -> None:
    host = compute_host("gpu01")
    host["items"] = [i for i in host["items"] if i["key_"] != "carme.slurm.node"]  # slurmctld down: no state
    zabbix.hosts = [head_host(), host]
    gpu01 = section(health_page(base_config, fake_scheduler, zabbix.url), "gpu01")
    assert 'data-role="compute"' in gpu01 and "<td>slurmctld</td>" not in gpu01


def test_formatting() -> None:
    assert view.shown(Value("home used", "32.607202", "%", NOW, "vfs.fs.size[/home,pused]")).text == "32.6 %"
    assert view.shown(Value("slurmd", "0", "", NOW, "proc.num[slurmd]")) == view.Shown(
        "slurmd", "not running", NOW, False
    )
    assert view.shown(Value("Agent", "0", "", NOW, "agent.ping")).text == "not answering"
    assert view.shown(Value("Slurm state", "MIXED", "", NOW, "carme.slurm.node")).text == "MIXED"
    assert [view.ago(NOW - s, NOW) for s in (3, 45, 180, 7200, 86400, 3 * 86400)] == [
        "just now", "45 s ago", "3 min ago", "2 h ago", "1 day ago", "3 days ago"
    ]  # fmt: skip
    assert view.utc_text(NOW) == "2027-01-15 08:00:00 UTC" and view.utc_iso(NOW) == "2027-01-15T08:00:00Z"


def test_role_from_slurm_or_the_agents_slurm_state() -> None:
    state = Value("Slurm state", "IDLE", "", NOW, "carme.slurm.node")
    assert view.role_of(HostHealth("node9", (state,)), ()) == view.COMPUTE
    assert view.role_of(HostHealth("node9"), {"node9"}) == view.COMPUTE
    assert view.role_of(HostHealth("head"), {"node9"}) == view.HEAD
