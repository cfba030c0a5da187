# SPDX-License-Identifier: GPL-3.0-or-later
"""Files that hold a secret are never shown in a diff: `carme deploy --diff` (or --check --diff) records diffs in its
run artifacts, so every task that writes such a file says `diff: false`.

The list names the files by what they hold; a new template with a password in it must join the list and the task
must say `diff: false`, or this test fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.roles.harness import REPO_ROOT

SECRET_FILES = {
    "etc/sssd/sssd.conf.j2": "the LDAP bind password",
    "etc/slurm/slurmdbd.conf.j2": "StoragePass",
    "etc/carme/webui/config.py.j2": "SECRET_KEY and the database password",
    "{{ munge_key }}": "the munge key",
    "{{ carme_webui_slurm_jwt_key_source }}": "the Slurm JWT key",
    "-portal.key": "the portal's TLS key",
    "{{ beegfs_server_conn_auth_secret }}": "the BeeGFS connection-authentication secret (servers)",
    "{{ beegfs_client_conn_auth_secret }}": "the BeeGFS connection-authentication secret (clients)",
    "etc/zabbix/zabbix_server.conf.d/carme.conf.j2": "the Zabbix database password",
    "etc/zabbix/zabbix.conf.php.j2": "the Zabbix database password (frontend)",
    "{{ zabbix_agent_psk }}": "the agent's PSK",
    "{{ zabbix_server_tls_key_file }}": "the Zabbix frontend's TLS key",
}
TEMPLATE_WORDS = ("password", "StoragePass", "SECRET_KEY", "authtok")
#: templates that say one of TEMPLATE_WORDS without holding a secret
NO_SECRET = {
    "etc/pam.d/": "PAM stacks name Debian's common-password stack and pam_unix's authtok options, no secret",
}


def _tasks(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, list):
        for item in node:
            found += _tasks(item)
    elif isinstance(node, dict):
        found.append(node)
        for key in ("block", "rescue", "always"):
            found += _tasks(node.get(key))
    return found


def _writes(task: dict[str, Any]) -> str:
    for module in ("ansible.builtin.template", "ansible.builtin.copy"):
        args = task.get(module)
        if isinstance(args, dict):
            return str(args.get("src", "")) + str(args.get("content", ""))
    return ""


ALL_TASKS = [
    (path, task)
    for path in sorted((REPO_ROOT / "roles").glob("*/tasks/*.yml"))
    for task in _tasks(yaml.safe_load(path.read_text(encoding="utf-8")))
]


@pytest.mark.parametrize("marker", sorted(SECRET_FILES))
def test_secret_file_tasks_never_diff(marker: str) -> None:
    writers = [(path, task) for path, task in ALL_TASKS if marker in _writes(task)]
    assert writers, f"no task writes {marker} any more: update SECRET_FILES"
    for path, task in writers:
        assert task.get("diff") is False, f"{path.relative_to(REPO_ROOT)}: {task.get('name')} ({SECRET_FILES[marker]})"


def test_every_template_with_a_secret_is_listed() -> None:
    for template in sorted((REPO_ROOT / "roles").glob("*/templates/**/*.j2")):
        text = template.read_text(encoding="utf-8")
        rel = "/".join(template.relative_to(REPO_ROOT).parts[3:])  # roles/<role>/templates/<rel>
        holds = [w for w in TEMPLATE_WORDS if w in text]
        if any(rel.startswith(key) for key in NO_SECRET):
            continue
        if holds and not any(key in rel for key in SECRET_FILES):
            pytest.fail(f"{template.relative_to(REPO_ROOT)} mentions {holds}: list it in SECRET_FILES if it holds one")


def test_secret_lists_cover_real_files() -> None:
    assert Path(REPO_ROOT / "roles/ldap_client/templates/etc/sssd/sssd.conf.j2").is_file()
