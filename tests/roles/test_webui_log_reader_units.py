# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's log reader units (roles/carme_webui: carme-log-reader.socket, carme-log-reader@.service, installed by
tasks/log_reader.yml): only the portal's group may connect, each connection runs ``carme-read-log --serve`` as root,
hardened, and the portal itself keeps ``NoNewPrivileges=yes``. Rendered through real ansible for the demo inventory
(tests/roles/render_webui_log_reader.yml) and compared with tests/roles/golden/demo/carme_webui/; after an intended
change: ``CARME_UPDATE_GOLDEN=1 pytest tests/roles/test_webui_log_reader_units.py``, then review the diff."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.fixtures.golden import assert_golden
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import render

ROLE = REPO_ROOT / "roles" / "carme_webui"
GOLDEN = Path(__file__).parent / "golden" / "demo" / "carme_webui"
PLAYBOOK = REPO_ROOT / "tests" / "roles" / "render_webui_log_reader.yml"
FILES = ("carme-log-reader.socket", "carme-log-reader@.service")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("log_reader_units")
    return render(REPO_ROOT / "inventories" / "demo", out, playbook=PLAYBOOK).check().out_dir


def unit(rendered: Path, name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((rendered / name).read_text())
    return parser


@pytest.mark.parametrize("name", FILES)
def test_matches_golden(rendered: Path, name: str) -> None:
    assert_golden((rendered / name).read_text(), GOLDEN / name, name)


def test_only_the_portals_group_may_connect(rendered: Path) -> None:
    socket = unit(rendered, "carme-log-reader.socket")["Socket"]
    assert socket["ListenStream"] == "/run/carme/log-reader.sock"
    assert (socket["SocketUser"], socket["SocketGroup"], socket["SocketMode"]) == ("root", "carme-portal", "0660")
    assert socket["Accept"] == "yes"


def test_the_reader_is_hardened(rendered: Path) -> None:
    service = unit(rendered, "carme-log-reader@.service")["Service"]
    assert service["ExecStart"].split() == [
        "/opt/carme/webui-venv/bin/carme-read-log", "--serve", "--peer-user", "carme-portal"
    ]  # fmt: skip
    assert service["StandardInput"] == "socket" and service["StandardOutput"] == "journal"  # never the socket
    assert "User" not in service  # root, to become the owner; it can do nothing else:
    assert service["CapabilityBoundingSet"].split() == ["CAP_SETUID", "CAP_SETGID"]
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "read-only",
        "PrivateTmp": "yes",
        "PrivateNetwork": "yes",
        "RestrictAddressFamilies": "AF_UNIX",
        "RuntimeMaxSec": "30",
    }
    assert {key: service.get(key) for key in expected} == expected


def test_the_portal_gains_no_privileges() -> None:
    portal = (ROLE / "templates" / "etc" / "systemd" / "system" / "carme-webui.service.j2").read_text()
    assert "NoNewPrivileges=yes" in portal.splitlines()


def test_the_tasks_install_the_units_and_remove_the_sudo_rule() -> None:
    tasks = yaml.safe_load((ROLE / "tasks" / "log_reader.yml").read_text())
    [removed] = [t["ansible.builtin.file"] for t in tasks if "ansible.builtin.file" in t]
    assert removed == {"path": "/etc/sudoers.d/carme-portal", "state": "absent"}
    [install] = [t for t in tasks if "ansible.builtin.template" in t]
    assert install["loop"] == list(FILES) and install["ansible.builtin.template"]["mode"] == "0644"
    [start] = [t["ansible.builtin.systemd_service"] for t in tasks if "ansible.builtin.systemd_service" in t]
    assert start["name"] == "carme-log-reader.socket" and start["enabled"] is True
    assert not any("ansible.builtin.apt" in t for t in tasks)  # no sudo to install
    assert not (ROLE / "templates" / "etc" / "sudoers.d").exists()
    main = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    assert any(t.get("ansible.builtin.import_tasks") == "log_reader.yml" for t in main)


def test_the_portal_is_told_the_socket() -> None:
    config = (ROLE / "templates" / "etc" / "carme" / "webui" / "config.py.j2").read_text()
    assert "LOG_READER_SOCKET = {{ carme_webui_log_reader_socket | to_json }}" in config.splitlines()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_accepts_them(rendered: Path, tmp_path: Path) -> None:
    """Every key known, every value valid (carme-read-log itself is not installed here)."""
    for name in FILES:
        (tmp_path / name).write_text((rendered / name).read_text())
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(str(tmp_path / n) for n in FILES)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    problems = [line for line in proc.stderr.splitlines() if line.strip() and "is not executable" not in line]
    assert not problems, proc.stderr
