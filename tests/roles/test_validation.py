# SPDX-License-Identifier: GPL-3.0-or-later
"""The validation play (playbooks/validate.yml) rejects malformed Slurm node groups and names the variable.

Each test copies the demo inventory (hosts.yml and group_vars) into tmp_path, breaks one thing, and runs the real
play with a local connection. The unbroken copy must pass, so a failure is caused by the broken value and nothing else.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.roles.harness import REPO_ROOT
from tests.roles.harness import TEST_SECRETS
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env


def _inventory(tmp_path: Path, **slurm_overrides: Any) -> Path:
    inv = tmp_path / "inventory"
    # The demo's hosts (head, node1, node2) and groups; the connection is overridden to local when run.
    shutil.copytree(REPO_ROOT / "inventories" / "demo" / "group_vars", inv / "group_vars")
    shutil.copy(REPO_ROOT / "inventories" / "demo" / "hosts.yml", inv / "hosts.yml")
    slurm_file = inv / "group_vars" / "all" / "slurm.yml"
    data = yaml.safe_load(slurm_file.read_text())
    data.update(slurm_overrides)
    slurm_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return inv


def _validate(inventory: Path) -> subprocess.CompletedProcess[str]:
    argv = [_ansible_bin("ansible-playbook"), str(REPO_ROOT / "playbooks" / "validate.yml"), "-i", str(inventory)]
    # Generated secrets (password lookups) go next to the copied inventory, never into the repo.
    extra = {"ansible_connection": "local", "carme_secrets_dir": str(inventory / "secrets"), **TEST_SECRETS}
    for key, value in extra.items():
        argv += ["-e", f"{key}={value}"]
    return subprocess.run(
        argv, cwd=REPO_ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300, check=False
    )


def _group(name: str | None, hosts: Any, gpus: Any = 2) -> dict[str, Any]:
    group: dict[str, Any] = {"hosts": hosts, "cpus": 2, "real_memory": 2000, "gpus": gpus, "gpu_type": "fake"}
    if name is not None:
        group = {"name": name, **group}
    return group


COMPUTE = "{{ groups['slurm_compute'] }}"

BROKEN: dict[str, tuple[dict[str, Any], list[str]]] = {
    "missing_name": (
        {"slurm_node_groups": [_group(None, COMPUTE)]},
        ["slurm_node_groups", "name"],
    ),
    "gpus_not_integer": (
        {"slurm_node_groups": [_group("gpu", COMPUTE, gpus="two")]},
        ["slurm_node_groups", "gpus"],
    ),
    "host_in_two_groups": (
        {"slurm_node_groups": [_group("gpu", COMPUTE), _group("cpu", ["node1"], gpus=0)]},
        ["slurm_node_groups[1]", "node1", "one group"],
    ),
    "partition_unknown_group": (
        {"slurm_partitions": [{"name": "batch", "node_groups": ["gpu", "nosuch"]}]},
        ["slurm_partitions[0]", "nosuch"],
    ),
    "session_qos_preempts_itself": (  # one user's session could end another's
        {"slurm_qos": [{"name": "normal"}, {"name": "interactive", "Preempt": ["normal", "interactive"]}]},
        ["slurm_qos[1] (interactive).Preempt names the QOS itself"],
    ),
}


def test_unbroken_copy_passes(tmp_path: Path) -> None:
    result = _validate(_inventory(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_inventory_fails_and_names_the_variable(tmp_path: Path, case: str) -> None:
    overrides, expected = BROKEN[case]
    result = _validate(_inventory(tmp_path, **overrides))
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"{case}: the validation play passed:\n{output}"
    failed = [line for line in output.splitlines() if "fatal:" in line or "msg" in line or "failed" in line]
    for text in expected:
        assert text in output, f"{case}: {text!r} not in the failure output:\n" + "\n".join(failed)


def test_example_inventory_passes_the_slurm_checks() -> None:
    """The example site's Slurm and munge wiring is valid (the other roles' variables are checked elsewhere)."""
    inventory = REPO_ROOT / "inventories" / "example"
    argv = [_ansible_bin("ansible-playbook"), str(REPO_ROOT / "playbooks" / "validate.yml"), "-i", str(inventory)]
    argv += ["-e", "ansible_connection=local", "-e", '{"validate_inventory_roles": ["munge", "slurm"]}']
    for key, value in TEST_SECRETS.items():
        argv += ["-e", f"{key}={value}"]
    result = subprocess.run(
        argv, cwd=REPO_ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr


def test_a_site_with_its_own_ldap_needs_no_ldap_server_variables(tmp_path: Path) -> None:
    """Each host is checked against the roles its groups run: no ldap_server host, no ldap_server_* variables."""
    inv = _inventory(tmp_path)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    hosts["all"]["children"]["carme"]["children"]["ldap_server"] = {"hosts": {}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    ldap_file = inv / "group_vars" / "all" / "ldap.yml"
    ldap = {k: v for k, v in yaml.safe_load(ldap_file.read_text()).items() if not k.startswith("ldap_server_")}
    ldap["ldap_client_uris"] = ["ldaps://ldap.site.example"]
    ldap["ldap_users_bind_password"] = "not-used-without-an-ldap-server-host"
    ldap_file.write_text(yaml.safe_dump(ldap, sort_keys=False))
    portal_file = inv / "group_vars" / "all" / "portal.yml"
    portal = yaml.safe_load(portal_file.read_text())
    portal["carme_webui_ldap_uri"] = "ldaps://ldap.site.example"
    portal["carme_webui_ldap_start_tls"] = False
    portal_file.write_text(yaml.safe_dump(portal, sort_keys=False))
    result = _validate(inv)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr

    # The same inventory with head back in ldap_server: now the server's required variables are checked.
    hosts["all"]["children"]["carme"]["children"]["ldap_server"] = {"hosts": {"head": None}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    result = _validate(inv)
    assert result.returncode != 0
    assert "ldap_server_base_dn" in result.stdout + result.stderr
