# SPDX-License-Identifier: GPL-3.0-or-later
"""Golden files: the zabbix_agent role's agent configuration, UserParameters and systemd drop-in (demo inventory).

Rendered through real ansible (tests/roles/render_zabbix_agent.yml, the role's ``render`` tasks) and compared byte for
byte with tests/roles/golden/demo/zabbix_agent/. After an intended template change:
``CARME_UPDATE_GOLDEN=1 pytest tests/roles/test_zabbix_agent_golden.py``, then review the diff.

Security issue #27, item 8: agent 2's default ControlSocket is /tmp/agent.sock, which any user could bind first while
the agent restarts (the agent then failed to start). Every socket and pid path must be in the agent's private
runtime directory, which systemd creates for the agent's user with mode 0750.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest

from tests.fixtures.golden import assert_golden
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import render

GOLDEN = Path(__file__).parent / "golden" / "demo" / "zabbix_agent"
PLAYBOOK = REPO_ROOT / "tests" / "roles" / "render_zabbix_agent.yml"
FILES = ("zabbix_agent2.conf", "carme.conf", "zabbix-agent2.service.d-carme.conf")
#: Agent 2 options (Zabbix 6.0 and 7.0) that name a file the agent creates; each defaults to a path under /tmp.
RUNTIME_PATH_OPTIONS = ("PidFile", "ControlSocket", "PluginSocket")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("zabbix_agent")
    return render(REPO_ROOT / "inventories" / "demo", out, playbook=PLAYBOOK).check().out_dir


def options(text: str) -> dict[str, str]:
    """The agent configuration's ``Key=value`` lines (the last one wins, as in the agent)."""
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize("name", FILES)
def test_matches_golden(rendered: Path, name: str) -> None:
    assert_golden((rendered / name).read_text(), GOLDEN / name, name)


def test_no_path_under_tmp(rendered: Path) -> None:
    """No setting of the rendered files (comments aside) names a path in /tmp or /var/tmp."""
    for name in FILES:
        settings = [line for line in (rendered / name).read_text().splitlines() if not line.startswith("#")]
        under_tmp = [line for line in settings if re.search(r"(^|[\s=:,\"'])/(var/)?tmp(/|$|\s)", line)]
        assert not under_tmp, f"{name} names a path under /tmp: {under_tmp}"


def test_sockets_and_pid_file_in_the_private_runtime_directory(rendered: Path) -> None:
    conf = options((rendered / "zabbix_agent2.conf").read_text())
    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((rendered / "zabbix-agent2.service.d-carme.conf").read_text())
    service = unit["Service"]
    run_dir = Path("/run") / service["RuntimeDirectory"]
    assert service["RuntimeDirectoryMode"] == "0750"
    assert service["User"] == service["Group"] == "zabbix"  # the owner of the directory systemd creates
    for option in RUNTIME_PATH_OPTIONS:
        assert option in conf, f"{option} is not set: the agent would use its default under /tmp"
        assert Path(conf[option]).parent == run_dir, f"{option}={conf[option]} is not in {run_dir}"
