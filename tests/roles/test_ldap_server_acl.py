# SPDX-License-Identifier: GPL-3.0-or-later
"""The ldap_server role's ACLs and password policy (security issue #27, item 9), rendered without slapd.

``tests/roles/render_ldap_server.yml`` runs the role's ``render`` tasks, which write what ``config.yml`` sets (the
olcAccess list, the default password policy, the ppolicy overlay's settings) to ``acl-ppolicy.yml``; the golden copy
is tests/roles/golden/demo/ldap_server/acl-ppolicy.yml. After an intended change:
``CARME_UPDATE_GOLDEN=1 pytest tests/roles/test_ldap_server_acl.py``, then review the diff. The same file loaded into
a real slapd: tests/integration/test_ldap_password_peers.py.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.golden import assert_golden
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import RenderResult
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env
from tests.roles.harness import render
from tests.roles.test_validation import _inventory
from tests.roles.test_validation import _validate

GOLDEN = Path(__file__).parent / "golden" / "demo" / "ldap_server" / "acl-ppolicy.yml"
PLAYBOOK = REPO_ROOT / "tests" / "roles" / "render_ldap_server.yml"
#: A site's peers in every form the variable takes (the demo's own are host names, resolved on the LDAP host).
PEERS = ["127.0.0.1", "::1", "10.88.0.0/16", "192.0.2.10", "fd00:88::/64"]
SERVICE_DN = "cn=sssd-reader,ou=services,dc=carme,dc=demo"


def render_acl(out: Path, variables: Mapping[str, object]) -> RenderResult:
    return render(REPO_ROOT / "inventories" / "demo", out, variables, playbook=PLAYBOOK)


def load(result: RenderResult) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(result.check().text("acl-ppolicy.yml"))
    return data


def password_rule(acl: list[str]) -> str:
    [rule] = [rule for rule in acl if rule.startswith("to attrs=userPassword ")]
    return rule


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> RenderResult:
    variables = {"ldap_server_password_auth_peers": PEERS, "ldap_server_password_auth_any_peer_dns": [SERVICE_DN]}
    return render_acl(tmp_path_factory.mktemp("ldap_acl"), variables)


def test_matches_golden(rendered: RenderResult) -> None:
    assert_golden(rendered.check().text("acl-ppolicy.yml"), GOLDEN, "acl-ppolicy.yml")


def test_password_binds_only_from_the_peers(rendered: RenderResult) -> None:
    acl = load(rendered)["olcAccess"]
    assert password_rule(acl) == (
        "to attrs=userPassword by self write"
        " by peername.ip=127.0.0.1 anonymous auth"
        " by peername.ipv6=::1 anonymous auth"
        " by peername.ip=10.88.0.0%255.255.0.0 anonymous auth"
        " by peername.ip=192.0.2.10 anonymous auth"
        " by peername.ipv6=fd00:88::%ffff:ffff:ffff:ffff:: anonymous auth"
        " by * none"
    )
    # No other rule lets anonymous authenticate, except the service account's, which is limited to its own entry.
    others = [rule for rule in acl if "anonymous auth" in rule and rule != password_rule(acl)]
    assert others == [f'to dn.base="{SERVICE_DN}" attrs=userPassword by self write by anonymous auth by * none']
    assert acl.index(others[0]) < acl.index(password_rule(acl)), "slapd uses the first rule that matches"
    assert acl[0].startswith("to * by dn.exact=gidNumber=0+uidNumber=0,cn=peercred"), "root over ldapi:/// first"


def test_no_lockout(rendered: RenderResult) -> None:
    data = load(rendered)
    assert data["policy"]["attributes"]["pwdLockout"] == "FALSE"
    for gone in ("pwdMaxFailure", "pwdLockoutDuration", "pwdFailureCountInterval"):
        assert data["policy"]["attributes"][gone] == [], f"{gone} is deleted (earlier versions set it)"
    assert data["overlay"]["attributes"]["olcPPolicyUseLockout"] == "FALSE"


def test_host_names_are_resolved(tmp_path: Path) -> None:
    data = load(render_acl(tmp_path, {"ldap_server_password_auth_peers": ["localhost"]}))
    assert "by peername.ip=127.0.0.1 anonymous auth" in password_rule(data["olcAccess"])


def test_defaults_are_loopback_only(tmp_path: Path) -> None:
    loopback = {"ldap_server_password_auth_peers": ["127.0.0.1", "::1"]}
    rule = password_rule(load(render_acl(tmp_path, loopback))["olcAccess"])
    assert rule == (
        "to attrs=userPassword by self write by peername.ip=127.0.0.1 anonymous auth"
        " by peername.ipv6=::1 anonymous auth by * none"
    )
    defaults = yaml.safe_load((REPO_ROOT / "roles" / "ldap_server" / "defaults" / "main.yml").read_text())
    assert defaults["ldap_server_password_auth_peers"] == ["127.0.0.1", "::1"]


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "bad name", "head/24"])
def test_an_invalid_peer_fails_naming_it(tmp_path: Path, bad: str) -> None:
    result = render_acl(tmp_path, {"ldap_server_password_auth_peers": ["127.0.0.1", bad]})
    assert result.returncode != 0
    assert "ldap_server_password_auth_peers" in result.output and repr(bad) in result.output


def peers_of(inventory: str, host: str) -> list[str]:
    """``ldap_server_password_auth_peers`` as the inventory sets it for ``host`` (templated, not resolved)."""
    argv = [_ansible_bin("ansible"), host, "-i", str(REPO_ROOT / "inventories" / inventory), "-c", "local"]
    argv += ["-m", "ansible.builtin.debug", "-a", "var=ldap_server_password_auth_peers"]
    env = ansible_env({"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"})
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout[proc.stdout.index("{") :])
    peers: list[str] = data["plays"][0]["tasks"][0]["hosts"][host]["ldap_server_password_auth_peers"]
    return peers


@pytest.mark.parametrize(
    ("inventory", "host", "expected"),
    [
        # The demo: the head is the portal and the LDAP host; no login nodes; node1/node2 are not peers.
        ("demo", "head", ["127.0.0.1", "::1", "head"]),
        # The example site: the head (portal and LDAP host) and its two login nodes.
        ("example", "head01", ["127.0.0.1", "::1", "head01", "login01", "login02"]),
    ],
)
def test_inventories_name_the_portal_and_login_hosts(inventory: str, host: str, expected: list[str]) -> None:
    assert peers_of(inventory, host) == expected


@pytest.mark.parametrize("removed", ["ldap_server_ppolicy_max_failure", "ldap_server_ppolicy_lockout_duration"])
def test_the_removed_lockout_variables_are_rejected(tmp_path: Path, removed: str) -> None:
    inventory = _inventory(tmp_path)
    ldap_file = inventory / "group_vars" / "all" / "ldap.yml"
    ldap_file.write_text(ldap_file.read_text() + f"{removed}: 20\n")
    result = _validate(inventory)
    assert result.returncode != 0
    assert f"{removed} is no longer supported" in result.stdout
    assert "ldap_server_password_auth_peers" in result.stdout
