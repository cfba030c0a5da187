# SPDX-License-Identifier: GPL-3.0-or-later
"""Node health from Zabbix in the portal: the admin page, the user's GPU card, the shared cache, Zabbix down.

Against tests/fixtures/zabbix_standin.py, a stand-in for the Zabbix 6.0 API (the real one runs in the Molecule
scenario ``monitoring``), through the real client (zabbix-utils).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from tests.fixtures.zabbix_standin import ZabbixStandIn
from tests.fixtures.zabbix_standin import host
from tests.fixtures.zabbix_standin import zabbix_standin
from webui.caches import SnapshotCache
from webui.monitoring.health import health_cache
from webui.monitoring.zabbix import Health

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import closed_port
from .conftest import log_in_as
from .conftest import make_app

A100 = [
    {
        "index": "0",
        "name": "NVIDIA A100",
        "utilization": 87.0,
        "memory_used": 40960 * 1048576,
        "memory_total": 81920 * 1048576,
        "temperature": 64.0,
    },
    {
        "index": "1",
        "name": "NVIDIA A100",
        "utilization": None,
        "memory_used": 0,
        "memory_total": 81920 * 1048576,
        "temperature": 31.0,
    },
]


@pytest.fixture
def zabbix() -> Iterator[ZabbixStandIn]:
    with zabbix_standin() as standin:
        standin.hosts = [
            host("head", problems=(("nginx is not running on {HOST.NAME}", 4),)),
            host("gpu01", gpus=A100),
            host("gpu02", slurm="IDLE+DRAIN", problems=(("Slurm node {HOST.NAME} is drained", 3),)),
        ]
        yield standin


def monitored_app(base_config: dict[str, Any], sched: FakeScheduler, url: str, **extra: Any) -> Flask:
    return make_app(
        {
            **base_config,
            "SCHEDULER": sched,
            "ZABBIX_URL": url,
            "ZABBIX_USER": "carme-api",
            "ZABBIX_PASSWORD": "api-password-0123456789",
            "ZABBIX_TIMEOUT_SECONDS": 2,
            **extra,
        }
    )


def test_admin_sees_every_node_with_values_and_open_problems(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, zabbix: ZabbixStandIn
) -> None:
    app = monitored_app(base_config, fake_scheduler, zabbix.url)
    client = app.test_client()
    log_in_as(app, client, "carol", admin=True)
    page = client.get("/admin/health")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    for name in ("head", "gpu01", "gpu02"):
        assert f'data-node="{name}"' in html
    assert "nginx is not running on head" in html  # {HOST.NAME} expanded, problem listed
    assert "Slurm node gpu02 is drained" in html
    assert "IDLE+DRAIN" in html  # latest Slurm state
    assert "slurmd is not running" not in html  # a trigger in state OK is no problem
    assert "87 %" in html and "40960 / 81920 MiB" in html and "64 °C" in html
    assert "scratch used" not in html  # unsupported item: not shown
    assert 'data-banner="monitoring"' not in html


def test_bob_gets_403_on_the_health_page(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, zabbix: ZabbixStandIn
) -> None:
    app = monitored_app(base_config, fake_scheduler, zabbix.url)
    client = app.test_client()
    log_in_as(app, client, "bob")
    assert client.get("/admin/health").status_code == 403
    assert zabbix.calls["host.get"] == 0


def test_a_user_sees_the_gpu_values_of_her_sessions_nodes_only(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, zabbix: ZabbixStandIn
) -> None:
    app = monitored_app(base_config, fake_scheduler, zabbix.url)
    add_session(app, fake_scheduler, "alice")  # runs on gpu01 (FakeScheduler.run)
    alice = app.test_client()
    log_in_as(app, alice, "alice")
    html = alice.get("/").get_data(as_text=True)
    assert 'id="node-gpus"' in html
    assert 'data-node="gpu01"' in html and 'data-node="gpu02"' not in html
    assert "87 %" in html and "64 °C" in html and "n/a" in html  # GPU 1 has no utilisation value
    bob = app.test_client()
    log_in_as(app, bob, "bob")
    assert 'id="node-gpus"' not in bob.get("/").get_data(as_text=True)  # no session, no card


def test_one_api_call_per_interval_for_everyone(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, zabbix: ZabbixStandIn
) -> None:
    app = monitored_app(base_config, fake_scheduler, zabbix.url, ZABBIX_CACHE_SECONDS=300)
    add_session(app, fake_scheduler, "alice")
    clients = []
    for name, admin in (("carol", True), ("dave", True), ("alice", False)):
        c = app.test_client()
        log_in_as(app, c, name, admin=admin)
        clients.append((c, admin))
    for _ in range(3):
        for c, admin in clients:
            assert c.get("/admin/health" if admin else "/").status_code == 200
    assert zabbix.calls["host.get"] == 1
    assert zabbix.calls["user.login"] == 1
    # the next interval: one more call, on the same login
    cache: SnapshotCache[Health] = app.extensions["carme_monitoring"]
    cache.ttl = 0
    clients[0][0].get("/admin/health")
    assert (zabbix.calls["host.get"], zabbix.calls["user.login"]) == (2, 1)


def test_zabbix_down_shows_a_banner_and_the_portal_keeps_working(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler
) -> None:
    app = monitored_app(base_config, fake_scheduler, f"http://127.0.0.1:{closed_port()}/")
    add_session(app, fake_scheduler, "alice")
    carol = app.test_client()
    log_in_as(app, carol, "carol", admin=True)
    page = carol.get("/admin/health")
    assert page.status_code == 200
    assert 'data-banner="monitoring"' in page.get_data(as_text=True)
    assert "Monitoring (Zabbix) is not reachable right now." in page.get_data(as_text=True)
    alice = app.test_client()
    log_in_as(app, alice, "alice")
    dash = alice.get("/")
    assert dash.status_code == 200
    html = dash.get_data(as_text=True)
    assert 'data-banner="monitoring"' in html
    assert "My sessions" in html  # the rest of the dashboard is there
    assert alice.get("/sessions/new").status_code == 200


def test_zabbix_going_down_keeps_the_last_values_with_the_banner(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, zabbix: ZabbixStandIn
) -> None:
    app = monitored_app(base_config, fake_scheduler, zabbix.url, ZABBIX_CACHE_SECONDS=0)
    carol = app.test_client()
    log_in_as(app, carol, "carol", admin=True)
    assert "nginx is not running on head" in carol.get("/admin/health").get_data(as_text=True)
    zabbix.down = True  # 502 from nginx, as when php-fpm or the server is gone
    page = carol.get("/admin/health")
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    assert 'data-banner="monitoring"' in html
    assert "nginx is not running on head" in html  # the last values received
    zabbix.down = False
    html = carol.get("/admin/health").get_data(as_text=True)
    assert 'data-banner="monitoring"' not in html  # back: logs in again and the banner goes


def test_a_failed_refresh_is_cached_for_the_interval(fake_scheduler: FakeScheduler) -> None:
    calls = {"n": 0}

    def fetch() -> list[dict[str, Any]]:
        calls["n"] += 1
        raise TimeoutError("timed out")

    now = {"t": 0.0}
    cache = health_cache(fetch, ttl=30, clock=lambda: now["t"])
    assert cache.get().error == "timed out"
    now["t"] = 29.0
    assert cache.get().error == "timed out"
    assert calls["n"] == 1  # an outage is not a storm of requests
    now["t"] = 31.0
    cache.get()
    assert calls["n"] == 2


def test_without_zabbix_url_monitoring_is_off(base_config: dict[str, Any], fake_scheduler: FakeScheduler) -> None:
    app = make_app({**base_config, "SCHEDULER": fake_scheduler})
    add_session(app, fake_scheduler, "alice")
    carol = app.test_client()
    log_in_as(app, carol, "carol", admin=True)
    assert "Monitoring is not configured" in carol.get("/admin/health").get_data(as_text=True)
    alice = app.test_client()
    log_in_as(app, alice, "alice")
    html = alice.get("/").get_data(as_text=True)
    assert 'id="node-gpus"' not in html and 'data-banner="monitoring"' not in html


def test_wrong_api_password_is_an_outage_not_a_500(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, zabbix: ZabbixStandIn
) -> None:
    app = monitored_app(base_config, fake_scheduler, zabbix.url, ZABBIX_PASSWORD="wrong-password-000000")
    carol = app.test_client()
    log_in_as(app, carol, "carol", admin=True)
    page = carol.get("/admin/health")
    assert page.status_code == 200
    assert "Incorrect user name or password" in page.get_data(as_text=True)
