# SPDX-License-Identifier: GPL-3.0-or-later
"""`carme site init DIR`: a site inventory made from inventories/example, every secret generated into an ansible-vault
file. The result passes the validation play (playbooks/validate.yml, the roles' argument specs) run with the vault
password file and a local connection, no secret is in clear in DIR except the vault password file, and every vault_*
variable the inventory references is defined in the vault."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from carme_admin import site
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env

EXAMPLE = REPO_ROOT / "inventories" / "example"
VAULT_REF = re.compile(r"\bvault_[a-z0-9_]+")


def _init(target: Path, *options: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "carme_admin", "site", "init", str(target), *options]
    env = {**os.environ, "CARME_PROJECT_DIR": str(REPO_ROOT)}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def _decrypt(path: Path, password_file: Path) -> dict[str, Any]:
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import VaultLib
    from ansible.parsing.vault import get_file_vault_secret

    secret = get_file_vault_secret(filename=str(password_file), loader=DataLoader())
    secret.load()
    data = yaml.safe_load(VaultLib([("default", secret)]).decrypt(path.read_bytes()))
    assert isinstance(data, dict)
    return data


def _references(root: Path) -> set[str]:
    """The vault_* variables the inventory's YAML uses (comments left out)."""
    lines = [line for p in root.rglob("*.yml") if p.name != "vault.yml" for line in p.read_text().splitlines()]
    return {ref for line in lines if not line.lstrip().startswith("#") for ref in VAULT_REF.findall(line)}


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ("node[01-04]", ["node01", "node02", "node03", "node04"]),
        ("a,b", ["a", "b"]),
        ("n[8-10,12],gpu7", ["n8", "n9", "n10", "n12", "gpu7"]),
        ("", []),
    ],
)
def test_expand_hosts(spec: str, names: list[str]) -> None:
    assert site.expand_hosts(spec) == names


def test_every_secret_is_generated_named_in_the_example_and_documented() -> None:
    example = yaml.safe_load((EXAMPLE / "group_vars" / "all" / "vault.yml.example").read_text())
    assert set(example) == set(site.SECRETS)
    assert _references(EXAMPLE) == set(site.SECRETS)
    secrets_doc = (REPO_ROOT / "docs" / "secrets.md").read_text()
    assert [name for name in site.SECRETS if f"`{name}`" not in secrets_doc] == []


@pytest.mark.slow
def test_site_init_writes_a_valid_inventory_and_an_encrypted_vault(tmp_path: Path) -> None:
    target = tmp_path / "hpc"
    done = _init(target, "--head", "head", "--login", "login1", "--gpu-nodes", "node[01-02]",
                 "--domain", "hpc.uni.example", "--storage", "existing", "--runtime", "charliecloud")  # fmt: skip
    assert done.returncode == 0, done.stderr
    password_file = target / ".vault-pass"
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    vault_file = target / "group_vars" / "all" / "vault.yml"
    assert vault_file.read_text().startswith("$ANSIBLE_VAULT;1.1;AES256")
    vault = _decrypt(vault_file, password_file)
    assert set(vault) == set(site.SECRETS) and _references(target) <= set(vault)
    assert len(vault["vault_munge_key"]) >= 32 and re.fullmatch(r"[0-9a-f]{64}", vault["vault_zabbix_agent_psk"])
    files = [p for p in target.rglob("*") if p.is_file() and p != password_file]
    for name, value in vault.items():
        assert [str(p) for p in files if str(value) in p.read_text()] == [], f"{name} in clear"
    hosts = yaml.safe_load((target / "hosts.yml").read_text())["all"]["children"]["carme"]["children"]
    assert list(hosts["slurm_compute"]["children"]["gpu"]["hosts"]) == ["node01", "node02"]
    assert list(hosts["portal"]["hosts"]) == ["head"] and list(hosts["slurm_login"]["hosts"]) == ["login1"]
    ldap = yaml.safe_load((target / "group_vars" / "all" / "ldap.yml").read_text())
    assert ldap["carme_ldap_base_dn"] == "dc=hpc,dc=uni,dc=example"
    argv = [
        _ansible_bin("ansible-playbook"),
        str(REPO_ROOT / "playbooks" / "validate.yml"),
        "-i",
        str(target / "hosts.yml"),
        "--vault-password-file",
        str(password_file),
        "-e",
        "ansible_connection=local",
    ]
    result = subprocess.run(argv, cwd=REPO_ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    assert "head " in result.stdout and "node02 " in result.stdout  # every host was checked


def test_site_init_refuses_to_overwrite_and_takes_a_given_password_file(tmp_path: Path) -> None:
    target = tmp_path / "site"
    given = tmp_path / "pass"
    given.write_text("a-site-password\n")
    assert _init(target, "--vault-password-file", str(given)).returncode == 0
    assert not (target / ".vault-pass").exists()
    assert "vault_munge_key" in _decrypt(target / "group_vars" / "all" / "vault.yml", given)
    refused = _init(target, "--vault-password-file", str(given))
    assert refused.returncode == 2 and "--force" in refused.stderr
    before = (target / "group_vars" / "all" / "vault.yml").read_text()
    assert _init(target, "--vault-password-file", str(given), "--force").returncode == 0
    assert (target / "group_vars" / "all" / "vault.yml").read_text() != before


def test_write_private_replaces_a_file_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vault, a backup manifest, the upgrade's state: 0600 from creation, and a failure before the rename (a kill,
    a full disk) leaves the old content, not a truncated file."""
    target = tmp_path / "private" / "state.json"
    site.write_private(target, "old\n")
    assert target.read_text() == "old\n" and stat.S_IMODE(target.stat().st_mode) == 0o600

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(site.os, "fsync", no_space)
    with pytest.raises(OSError, match="No space left"):
        site.write_private(target, "new\n")
    assert target.read_text() == "old\n" and [p.name for p in target.parent.iterdir()] == ["state.json"]
    monkeypatch.undo()
    site.write_private(target, "new\n")
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["state.json"]  # no temporary file left behind
