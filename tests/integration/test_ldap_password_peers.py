# SPDX-License-Identifier: GPL-3.0-or-later
"""Security issue #27, item 9, against a real slapd: wrong passwords from any host must not lock anyone out.

Before, the ldap_server role's ppolicy locked an account after 20 failed binds for 900 s, so any user on any node
could lock anyone (``ldapwhoami -D uid=alice,... -w wrong`` 22 times). Now the role sets no lockout, and accepts a
user's password bind only from ``ldap_server_password_auth_peers``. This test renders what the role applies
(``roles/ldap_server/tasks/render.yml``: the olcAccess list, the default password policy and the ppolicy overlay's
settings) with the peers ``[127.0.0.1]``, loads it into a throwaway slapd 2.5 configured over cn=config as the role's
is, and binds over loopback only: 127.0.0.1 plays the portal (allowed peer), 127.0.0.2 any other node.

The server is this module's own (not ``tests.fixtures.slapd``'s, which has fixed ACLs in a slapd.conf and no ppolicy);
it reuses that fixture's tools, users and entries. TLS is left out (plain ldap:// on loopback): the role's TLS
settings are not what is tested here.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.net import free_port
from tests.fixtures.net import wait_port
from tests.fixtures.slapd import BASE_DN
from tests.fixtures.slapd import ROOT_DN
from tests.fixtures.slapd import SCHEMA_DIR
from tests.fixtures.slapd import SLAPD
from tests.fixtures.slapd import USERS
from tests.fixtures.slapd import _hash
from tests.fixtures.slapd import _have_tools
from tests.fixtures.slapd import _ldif
from tests.fixtures.slapd import stop_slapd
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import render

with warnings.catch_warnings():  # as in webui.auth.ldap: ldap3 imports names pyasn1 >= 0.6 deprecates
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"ldap3(\.|$)")
    warnings.filterwarnings("ignore", r".*(tagMap|typeMap) is deprecated", DeprecationWarning)
    import ldap3  # type: ignore[import-untyped]

pytestmark = [pytest.mark.host, pytest.mark.slow]

SLAPADD = Path("/usr/sbin/slapadd")
LDAPADD = Path("/usr/bin/ldapadd")
ALLOWED = "127.0.0.1"  # the password peer (the portal's address)
OTHER = "127.0.0.2"  # any other host of the cluster
ALLOWED_NET = "127.0.0.4/30"  # a peer network (127.0.0.4 to 127.0.0.7): slapd's peername.ip=...%<netmask>
IN_ALLOWED_NET = "127.0.0.5"
INVALID_CREDENTIALS = 49
SERVICE_DN = f"cn=sssd-reader,ou=services,{BASE_DN}"
SERVICE_PASSWORD = "sssd-reader-pw-0123456789"


@dataclass(frozen=True)
class Directory:
    port: int
    rendered: dict[str, Any]
    root_password: str

    def bind(self, dn: str, password: str, source: str) -> int:
        """Simple bind from ``source`` (a loopback address); the LDAP result code (0 = success)."""
        conn = self.connection(dn, password, source)
        try:
            conn.bind()
            return int(conn.result["result"])
        finally:
            conn.unbind()

    def connection(self, dn: str | None, password: str | None, source: str) -> Any:
        """An ldap3 connection (not bound yet) whose socket is bound to ``source`` (a loopback address)."""
        server = ldap3.Server("127.0.0.1", port=self.port, connect_timeout=5)
        return ldap3.Connection(
            server, user=dn, password=password, source_address=source, source_port=0, receive_timeout=10
        )

    def read(self, dn: str, *attributes: str) -> dict[str, list[str]]:
        """Attributes of ``dn`` (operational ones too) read as the rootDN."""
        conn = self.connection(ROOT_DN, self.root_password, ALLOWED)
        try:
            assert conn.bind(), conn.result
            conn.search(dn, "(objectClass=*)", search_scope=ldap3.BASE, attributes=list(attributes))
            entry = conn.response[0]["raw_attributes"]
            return {name: [v.decode() for v in entry.get(name) or []] for name in attributes}
        finally:
            conn.unbind()


def user_dn(name: str) -> str:
    return f"uid={name},ou=people,{BASE_DN}"


def rendered_settings(out: Path) -> dict[str, Any]:
    """What the role would apply, for the peers 127.0.0.1 and 127.0.0.4/30 (not 127.0.0.2) and one service account
    that binds from anywhere."""
    variables = {
        "ldap_server_base_dn": BASE_DN,
        # Besides the peer under test, the other forms (IPv6, CIDRs), so that slapd parses each of them.
        "ldap_server_password_auth_peers": [ALLOWED, "::1", ALLOWED_NET, "fd00:88::/64"],
        "ldap_server_password_auth_any_peer_dns": [SERVICE_DN],
    }
    playbook = REPO_ROOT / "tests" / "roles" / "render_ldap_server.yml"
    render(REPO_ROOT / "inventories" / "demo", out, variables, playbook=playbook).check()
    data: dict[str, Any] = yaml.safe_load((out / "acl-ppolicy.yml").read_text())
    return data


def ldif_attrs(attributes: dict[str, Any]) -> str:
    """LDIF lines of an attribute dict as the role's ldap_attrs tasks take it ([] = attribute absent)."""
    lines = []
    for name, value in attributes.items():
        for item in value if isinstance(value, list) else [value]:
            lines.append(f"{name}: {item}\n")
    return "".join(lines)


def schema_ldif(name: str) -> str:
    return "".join(line for line in (SCHEMA_DIR / f"{name}.ldif").read_text().splitlines(True) if line[:1] != "#")


def config_ldif(workdir: Path, rendered: dict[str, Any], root_hash: str) -> str:
    """cn=config of a slapd set up as the role's: mdb database {1} with the rendered ACLs, ppolicy overlay."""
    overlay = rendered["overlay"]
    assert overlay["dn"].endswith(",olcDatabase={1}mdb,cn=config")
    access = "".join(f"olcAccess: {{{i}}}{rule}\n" for i, rule in enumerate(rendered["olcAccess"]))
    blocks = [
        f"dn: cn=config\nobjectClass: olcGlobal\ncn: config\nolcPidFile: {workdir / 'slapd.pid'}\n"
        f"olcArgsFile: {workdir / 'slapd.args'}\n",
        "dn: cn=module{0},cn=config\nobjectClass: olcModuleList\ncn: module{0}\nolcModulePath: /usr/lib/ldap\n"
        "olcModuleLoad: {0}back_mdb\nolcModuleLoad: {1}ppolicy\n",
        "dn: cn=schema,cn=config\nobjectClass: olcSchemaConfig\ncn: schema\n",
        *(schema_ldif(name) for name in ("core", "cosine", "nis", "inetorgperson")),
        "dn: olcDatabase={-1}frontend,cn=config\nobjectClass: olcDatabaseConfig\nobjectClass: olcFrontendConfig\n"
        "olcDatabase: {-1}frontend\n",
        "dn: olcDatabase={0}config,cn=config\nobjectClass: olcDatabaseConfig\nolcDatabase: {0}config\n"
        "olcAccess: {0}to * by * none\n",
        "dn: olcDatabase={1}mdb,cn=config\nobjectClass: olcDatabaseConfig\nobjectClass: olcMdbConfig\n"
        f"olcDatabase: {{1}}mdb\nolcDbDirectory: {workdir / 'db'}\nolcDbMaxSize: 67108864\n"
        f"olcSuffix: {BASE_DN}\nolcRootDN: {ROOT_DN}\nolcRootPW: {root_hash}\n{access}",
        # The role adds memberOf as overlay {0}; ppolicy keeps the role's index {1} only when memberOf is there.
        f"dn: olcOverlay={{0}}ppolicy,olcDatabase={{1}}mdb,cn=config\nobjectClass: olcOverlayConfig\n"
        f"objectClass: olcPPolicyConfig\nolcOverlay: {{0}}ppolicy\n{ldif_attrs(overlay['attributes'])}",
    ]
    return "\n".join(block.strip("\n") + "\n" for block in blocks)


def data_ldif(rendered: dict[str, Any]) -> str:
    """The fixture's people and groups, the role's default password policy, and a service account."""
    policy = rendered["policy"]
    policy_attrs = {k: v for k, v in policy["attributes"].items() if v != []}
    return "\n".join(
        [
            _ldif(USERS),
            f"dn: ou=policies,{BASE_DN}\nobjectClass: organizationalUnit\nou: policies\n",
            f"dn: {policy['dn']}\nobjectClass: organizationalRole\nobjectClass: pwdPolicy\ncn: default\n"
            f"pwdAttribute: userPassword\n{ldif_attrs(policy_attrs)}",
            f"dn: ou=services,{BASE_DN}\nobjectClass: organizationalUnit\nou: services\n",
            f"dn: {SERVICE_DN}\nobjectClass: applicationProcess\nobjectClass: simpleSecurityObject\n"
            f"cn: sssd-reader\nuserPassword: {_hash(SERVICE_PASSWORD)}\n",
        ]
    )


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Directory]:
    if not (_have_tools() and SLAPADD.exists()):
        pytest.skip("slapd, slapadd, ldapadd and the schema LDIFs are needed (apt-get install slapd ldap-utils)")
    workdir = tmp_path_factory.mktemp("slapd-peers")
    rendered = rendered_settings(workdir / "rendered")
    confdir = workdir / "slapd.d"
    confdir.mkdir()
    (workdir / "db").mkdir()
    root_password = "root-" + os.urandom(8).hex()
    (workdir / "config.ldif").write_text(config_ldif(workdir, rendered, _hash(root_password)))
    load = run([str(SLAPADD), "-n", "0", "-F", str(confdir), "-l", str(workdir / "config.ldif")])
    assert load.returncode == 0, f"slapadd of cn=config failed: {load.stderr[-2000:]}"
    port = free_port()
    uri = f"ldap://127.0.0.1:{port}/"
    pidfile = workdir / "slapd.pid"
    start = run([str(SLAPD), "-h", uri, "-F", str(confdir), "-n", f"carme-test-slapd-peers-{port}"])
    try:
        if start.returncode != 0 or not wait_port(port, 20, interval=0.05):
            pytest.fail(f"slapd did not start (rc={start.returncode}): {start.stderr.strip()[-500:]}")
        (workdir / "data.ldif").write_text(data_ldif(rendered))
        add = run([str(LDAPADD), "-x", "-H", uri, "-D", ROOT_DN, "-w", root_password, "-f", str(workdir / "data.ldif")])
        assert add.returncode == 0, f"ldapadd failed: {add.stderr[-1000:]}"
        yield Directory(port=port, rendered=rendered, root_password=root_password)
    finally:
        stop_slapd(pidfile)


def test_the_role_sets_no_lockout(directory: Directory) -> None:
    attributes = directory.rendered["policy"]["attributes"]
    assert attributes["pwdLockout"] == "FALSE"
    assert directory.rendered["overlay"]["attributes"]["olcPPolicyUseLockout"] == "FALSE"


def test_wrong_binds_from_another_host_lock_nobody_and_the_right_password_works_only_from_a_peer(
    directory: Directory,
) -> None:
    alice = user_dn("alice")
    for _ in range(25):
        assert directory.bind(alice, "wrong-password", OTHER) == INVALID_CREDENTIALS
    assert directory.bind(alice, USERS["alice"], ALLOWED) == 0, "alice's own login (from the portal) must work"
    # From a host that is not a peer, the right password is refused like a wrong one.
    assert directory.bind(alice, USERS["alice"], OTHER) == INVALID_CREDENTIALS


def test_a_peer_network_is_a_netmask(directory: Directory) -> None:
    assert directory.bind(user_dn("alice"), USERS["alice"], IN_ALLOWED_NET) == 0


def test_wrong_binds_from_a_peer_lock_nobody_either(directory: Directory) -> None:
    """The portal's address itself: 25 wrong binds there (the portal's own lockout stops a guesser first) do not lock
    the account in the directory; the failures are recorded for admins and the next good bind clears them."""
    carol = user_dn("carol")
    for _ in range(25):
        assert directory.bind(carol, "wrong-password", ALLOWED) == INVALID_CREDENTIALS
    recorded = directory.read(carol, "pwdFailureTime", "pwdAccountLockedTime")
    assert recorded["pwdAccountLockedTime"] == []
    kept = int(directory.rendered["policy"]["attributes"]["pwdMaxRecordedFailure"])
    assert 0 < len(recorded["pwdFailureTime"]) <= kept
    assert directory.bind(carol, USERS["carol"], ALLOWED) == 0
    assert directory.read(carol, "pwdFailureTime")["pwdFailureTime"] == []


def test_anonymous_reads_from_any_host_still_work(directory: Directory) -> None:
    """sssd on every node reads anonymously: the userPassword rule does not touch that."""
    conn = directory.connection(None, None, OTHER)
    try:
        assert conn.bind(), conn.result
        conn.search(f"ou=people,{BASE_DN}", "(uid=alice)", attributes=["uidNumber", "userPassword"])
        [entry] = conn.response
        assert entry["attributes"]["uidNumber"] == 30001  # the fixture's first user (sorted: alice)
        assert not entry["attributes"].get("userPassword")
    finally:
        conn.unbind()


def test_a_service_account_binds_from_any_host(directory: Directory) -> None:
    """A DN in ldap_server_password_auth_any_peer_dns (e.g. sssd's bind DN) authenticates from every address."""
    assert directory.bind(SERVICE_DN, SERVICE_PASSWORD, OTHER) == 0
    assert directory.bind(SERVICE_DN, "wrong-password", OTHER) == INVALID_CREDENTIALS


def test_a_lock_set_before_the_upgrade_is_ignored(directory: Directory) -> None:
    """An account the old policy had locked (pwdAccountLockedTime) logs in again: pwdLockout FALSE ignores it."""
    bob = user_dn("bob")
    conn = directory.connection(ROOT_DN, directory.root_password, ALLOWED)
    try:
        assert conn.bind(), conn.result
        relax = ("1.3.6.1.4.1.4203.666.5.12", True, None)  # pwdAccountLockedTime is NO-USER-MODIFICATION
        locked_at = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)).strftime("%Y%m%d%H%M%SZ")  # in effect
        changes = {"pwdAccountLockedTime": [(ldap3.MODIFY_REPLACE, [locked_at])]}
        assert conn.modify(bob, changes, controls=[relax]), conn.result
    finally:
        conn.unbind()
    assert directory.read(bob, "pwdAccountLockedTime")["pwdAccountLockedTime"] != []
    assert directory.bind(bob, USERS["bob"], ALLOWED) == 0
