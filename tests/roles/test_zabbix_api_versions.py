# SPDX-License-Identifier: GPL-3.0-or-later
"""The zabbix_server role's API module (roles/zabbix_server/library/carme_zabbix.py) speaks Zabbix 6.0 (Debian 12)
and 7.0 (Debian 13): the calls it makes against a recording fake API of each version.

A real Zabbix of both runs in the Molecule scenario ``monitoring`` (7.0 with CARME_NODE_IMAGE=...debian13, by hand);
this test pins which parameters each version gets: 6.0's stay what they were before 7.0 support came.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.roles.harness import load_file

carme_zabbix = load_file("roles/zabbix_server/library/carme_zabbix.py", "carme_zabbix")


class Version:
    def __init__(self, major: float) -> None:
        self.major = major


class FakeAPI:
    """Records every call as (method, params); answers a new server: nothing exists yet."""

    def __init__(self, major: float, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.version = Version(major)
        self.calls = calls

    def __getattr__(self, obj: str) -> Any:
        return _Object(obj, self.calls)

    def logout(self) -> None:
        self.calls.append(("logout", {}))


class _Object:
    def __init__(self, name: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.name, self.calls = name, calls

    def __getattr__(self, method: str) -> Any:
        def call(*args: Any, **params: Any) -> Any:
            self.calls.append((f"{self.name}.{method}", params))
            if method == "create":
                return {f"{self.name}ids": ["7"], "roleids": ["7"], "groupids": ["7"], "usrgrpids": ["7"]}
            if (self.name, method) == ("user", "get"):
                return [{"userid": "1"}] if params.get("filter") == {"username": "Admin"} else []
            if (self.name, method) == ("settings", "get"):
                return {"timeout_zabbix_agent": "3s"}
            return []

        return call


class FakeModule:
    check_mode = False

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params

    def fail_json(self, **kw: Any) -> None:
        raise AssertionError(kw)

    def exit_json(self, **kw: Any) -> None:
        self.result = kw


def run(major: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    template = tmp_path / "t.json"
    template.write_text(json.dumps({"zabbix_export": {"version": "6.0", "templates": [{"template": "Carme"}]}}))
    calls: list[tuple[str, dict[str, Any]]] = []
    params = {"login_user": "Admin", "login_password": "new-admin-password", "initial_password": "zabbix",
              "template_file": str(template), "template_name": "Carme", "host_group": "Carme",
              "hosts": [{"name": "node1", "psk_identity": "carme-node1", "psk": "ab" * 32}],
              "api_user": "carme-api", "api_password": "api-password-0123", "item_timeout": "10s"}  # fmt: skip
    module = FakeModule(params)
    sync = carme_zabbix.Sync(module)
    logins = iter([None, FakeAPI(major, calls), FakeAPI(major, calls)])  # the generated password is new
    monkeypatch.setattr(sync, "try_login", lambda user, password: next(logins))
    sync.run()
    return calls


def params_of(calls: list[tuple[str, dict[str, Any]]], method: str) -> dict[str, Any]:
    return next(p for m, p in calls if m == method)


def test_zabbix_60_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = run(6.0, tmp_path, monkeypatch)
    assert params_of(calls, "user.update") == {"userid": "1", "passwd": "new-admin-password"}
    assert "groups" in params_of(calls, "configuration.import_")["rules"]
    assert "host_groups" not in params_of(calls, "configuration.import_")["rules"]
    assert "rights" in params_of(calls, "usergroup.create")
    assert "selectRights" in params_of(calls, "usergroup.get")
    assert "selectGroups" in params_of(calls, "host.get")
    assert not [m for m, _ in calls if m.startswith("settings.")]  # 6.0: the server's Timeout= applies


def test_zabbix_70_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = run(7.0, tmp_path, monkeypatch)
    assert params_of(calls, "user.update")["current_passwd"] == "zabbix"
    rules = params_of(calls, "configuration.import_")["rules"]
    assert "groups" not in rules and rules["host_groups"] == rules["template_groups"] == {"createMissing": True}
    assert params_of(calls, "usergroup.create")["hostgroup_rights"] == [{"id": "7", "permission": 2}]
    assert "selectHostGroupRights" in params_of(calls, "usergroup.get")
    assert "selectHostGroups" in params_of(calls, "host.get") and "selectGroups" not in params_of(calls, "host.get")
    assert params_of(calls, "settings.update") == {"timeout_zabbix_agent": "10s"}
