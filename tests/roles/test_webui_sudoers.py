# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's sudo rule (roles/carme_webui/templates/etc/sudoers.d/carme-portal.j2): the portal user may run
carme-read-log from its own virtualenv, and only that, as any user but root."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from tests.roles.harness import REPO_ROOT

ROLE = REPO_ROOT / "roles" / "carme_webui"


def render() -> str:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["comment"] = lambda text: f"#\n# {text}\n#"
    template = env.from_string((ROLE / "templates" / "etc" / "sudoers.d" / "carme-portal.j2").read_text())
    return template.render(
        ansible_managed="Ansible managed",
        carme_webui_user=defaults["carme_webui_user"],
        carme_webui_venv=defaults["carme_webui_venv"],
    )


def test_the_rule_allows_one_command_as_anyone_but_root() -> None:
    rules = [line for line in render().splitlines() if line and not line.startswith("#")]
    assert rules == ["carme-portal ALL=(ALL,!root) NOPASSWD: /opt/carme/webui-venv/bin/carme-read-log"]


def test_the_task_installs_it_validated_and_read_only() -> None:
    tasks = yaml.safe_load((ROLE / "tasks" / "log_reader.yml").read_text())
    [task] = [t for t in tasks if "ansible.builtin.template" in t]
    args = task["ansible.builtin.template"]
    assert args["dest"] == "/etc/sudoers.d/carme-portal" and args["mode"] == "0440"
    assert args["validate"] == "/usr/sbin/visudo -cf %s" and args["owner"] == "root"
    main = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    assert any(t.get("ansible.builtin.import_tasks") == "log_reader.yml" for t in main)


def test_the_portal_may_gain_privileges_for_sudo() -> None:
    unit = (ROLE / "templates" / "etc" / "systemd" / "system" / "carme-webui.service.j2").read_text()
    assert "NoNewPrivileges=yes" not in unit  # sudo is setuid: with it, every log read fails


@pytest.mark.skipif(shutil.which("visudo") is None, reason="visudo is not installed here")
def test_visudo_accepts_it(tmp_path: Path) -> None:
    path = tmp_path / "carme-portal"
    path.write_text(render())
    proc = subprocess.run(["visudo", "-cf", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
