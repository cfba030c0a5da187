# SPDX-License-Identifier: GPL-3.0-or-later
"""The `site` scenario (issue 29): the path a real site walks, over real SSH, from a non-root controller.

Two bare nodes on a network with no route out (tests/site/bed.py), sshd and every package from the offline bundle,
the account ``deploy`` with the controller's key and sudo, the inventory from ``carme site init`` with its vault, the
site's own CA issuing the portal, apps, LDAP and Zabbix certificates (tests/site/inventory.py). ``site.yml`` is
deployed as the controller account ``carme-ctl``, then checked from outside: the certificates' issuer on each TLS
port, a Slurm job as an LDAP user, the portal's login page, a second converge with nothing changed, no secret in
clear in the inventory.

A line of ``make test`` (about ten minutes; alone: ``make test-site``), switched on by ``CARME_SITE_TESTS=1``; it needs
root on this host (podman, useradd), the node image and an offline bundle at :data:`tests.site.bed.BUNDLE` (``make
test-site`` builds one). Its commands are docs/site-guide.md's own (tests/site/guide.py).
``CARME_SITE_KEEP=1`` leaves the nodes up at the end; ``CARME_SITE_REUSE=1`` runs the checks on them again without a
new bed and first deploy (``python -m tests.site.bed down`` removes them and the controller account).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

if os.environ.get("CARME_SITE_TESTS") != "1":
    pytest.skip("opt-in: CARME_SITE_TESTS=1 (make test-site)", allow_module_level=True)

from tests.site import bed
from tests.site import guide
from tests.site import inventory as inv

pytestmark = pytest.mark.site


@dataclass
class Deploy:
    rc: int
    out: str
    seconds: float


@dataclass
class Site:
    head: str  # the head's address
    first: Deploy


def deploy() -> Deploy:
    t0 = time.monotonic()
    done = inv.deploy()
    return Deploy(done.returncode, done.stdout + done.stderr, time.monotonic() - t0)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    assert (bed.BUNDLE / "manifest.json").is_file(), f"no offline bundle in {bed.BUNDLE}: make test-site builds it"
    if os.environ.get("CARME_SITE_REUSE") == "1":  # a bed kept by CARME_SITE_KEEP=1: its deploy is not run again
        yield Site(bed.address(bed.HEAD), Deploy(0, "", 0.0))
        return
    try:
        bed.up()
        inv.init_site()
        inv.make_ca()
        bed.trust_ca(inv.CA / "ca.crt")
        inv.write_inventory_edits()
        inv.set_deploy_user(become_password=False)
        yield Site(bed.address(bed.HEAD), deploy())
    finally:
        if os.environ.get("CARME_SITE_KEEP") != "1":
            bed.down()


def recap(out: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP's counters per host."""
    found: dict[str, dict[str, int]] = {}
    for host, counters in re.findall(r"^\s*(\S+)\s+:\s+(ok=.*)$", out, flags=re.MULTILINE):
        found[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counters)}
    return found


def test_site_deploys_over_ssh_as_deploy_with_sudo(site: Site) -> None:
    if os.environ.get("CARME_SITE_REUSE") == "1":
        pytest.skip("CARME_SITE_REUSE=1: the first deploy ran before, on the kept nodes")
    print(f"first deploy: {site.first.seconds:.0f} s")
    assert site.first.rc == 0, site.first.out[-5000:]
    hosts = recap(site.first.out)
    assert set(hosts) == set(bed.NODES), site.first.out[-3000:]
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in hosts.values()), hosts


def issuer(address: str, port: int, *starttls: str) -> str:
    """The issuer of the certificate a TLS port shows (openssl s_client, as a site's admin would look)."""
    argv = ["openssl", "s_client", "-connect", f"{address}:{port}", "-servername", inv.PORTAL_NAME, *starttls]
    shown = subprocess.run(argv, input="", capture_output=True, text=True, timeout=30, check=False)
    cert = subprocess.run(["openssl", "x509", "-noout", "-issuer"], input=shown.stdout, capture_output=True,
                          text=True, timeout=30, check=False)  # fmt: skip
    return cert.stdout.strip() or f"no certificate: {shown.stderr[-500:]}"


@pytest.mark.parametrize(("what", "port", "starttls"), [
    ("portal", 443, ()), ("apps", 8444, ()), ("ldap", 389, ("-starttls", "ldap")), ("zabbix", 8445, ()),
])  # fmt: skip
def test_certificates_are_the_site_cas(site: Site, what: str, port: int, starttls: tuple[str, ...]) -> None:
    assert site.first.rc == 0
    assert inv.CA_NAME in issuer(site.head, port, *starttls), what


def test_a_slurm_job_runs_as_an_ldap_user(site: Site) -> None:
    assert site.first.rc == 0
    uid = bed.on_node(bed.NODES[1], f"getent passwd {inv.USER}").stdout
    assert ":20001:" in uid, "the user does not come from LDAP (sssd) on the GPU node"
    job = bed.on_node(bed.HEAD, f"runuser -u {inv.USER} -- srun -N1 -t 1 --gres=gpu:1 sh -c 'id -un; hostname'",
                      check=False)  # fmt: skip
    assert job.stdout.split() == [inv.USER, bed.NODES[1]], job.stdout + job.stderr


def test_the_portal_login_page_answers(site: Site) -> None:
    assert site.first.rc == 0
    page = subprocess.run(["curl", "-sS", "--max-time", "20", "--cacert", str(inv.CA / "ca.crt"), "--resolve",
                           f"{inv.PORTAL_NAME}:443:{site.head}", f"https://{inv.PORTAL_NAME}/auth/login"],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert page.returncode == 0, page.stderr
    assert 'name="password"' in page.stdout, page.stdout[:2000]


#: on the head, as the portal reads it: its ZABBIX_CA_FILE ("": the system trust store), then TLS to the frontend
PORTAL_TO_ZABBIX = r"""
import socket, ssl
settings = {}
exec(open("/etc/carme/webui/config.py").read(), settings)
ca = settings.get("ZABBIX_CA_FILE") or None
ctx = ssl.create_default_context(cafile=ca)
with socket.create_connection(("127.0.0.1", 8445), 10) as raw, ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
    print("verified with", ca or "the system trust store")
"""


def test_the_portal_verifies_the_zabbix_frontend(site: Site) -> None:
    """The portal's node health reads Zabbix over TLS with ZABBIX_CA_FILE: with the site's certificate that is the
    trust store (inventories/example/group_vars/all/portal.yml), not the frontend's certificate itself."""
    assert site.first.rc == 0
    done = bed.on_node(bed.HEAD, f"python3 -c {shlex.quote(PORTAL_TO_ZABBIX)}", check=False)
    assert done.stdout.startswith("verified with the system trust store"), done.stdout + done.stderr


def test_no_secret_in_clear_in_the_inventory(site: Site) -> None:
    vault = inv.SITE / "group_vars" / "all" / "vault.yml"
    assert vault.read_text().startswith("$ANSIBLE_VAULT;"), "the vault is not encrypted"
    secrets = inv.vault_values()
    texts = {p: p.read_text(errors="replace") for p in inv.SITE.rglob("*") if p.is_file() and p != vault}
    texts.pop(inv.SITE / ".vault-pass")
    leaks = [f"{p}: {name}" for p, text in texts.items() for name, value in secrets.items() if value in text]
    assert not leaks, leaks
    assert "nsenter" not in "".join(texts.values()), "the site inventory must reach the nodes over SSH"


def test_a_second_converge_with_a_sudo_password_changes_nothing(site: Site) -> None:
    """The second run is the sudo-password one (one deploy fewer): the deploy account's sudo now asks for its
    password, which hosts.yml's ansible_become_password names in the vault; the run succeeds and changes nothing."""
    assert site.first.rc == 0
    password = secrets.token_urlsafe(24)
    inv.add_to_vault("vault_deploy_become_password", password)
    inv.set_deploy_user(become_password=True)
    for node in bed.NODES:
        bed.set_sudo(node, password)
    try:
        again = deploy()
    finally:
        inv.set_deploy_user(become_password=False)
        for node in bed.NODES:
            bed.set_sudo(node, password=None)
    print(f"second deploy, with a sudo password: {again.seconds:.0f} s")
    assert again.rc == 0, again.out[-5000:]
    assert password not in (inv.SITE / "hosts.yml").read_text()
    changed = {host: c["changed"] for host, c in recap(again.out).items()}
    assert changed == dict.fromkeys(bed.NODES, 0), "\n".join(re.findall(r"^changed: .*$|^TASK .*$", again.out, re.M))


#: the guide's commands and where the scenario runs each (``bundle build``: ``make test-site``, before the tests)
GUIDE_RUN_BY = {
    "site init": "inventory.init_site",
    "check": "carme_check",
    "bundle build": "Makefile test-site",
    "bundle verify": "test_the_guides_bundle_verify_accepts_the_bundle",
    "deploy": "inventory.deploy",
}


def test_every_guide_command_is_run() -> None:
    """Each ``carme`` command of docs/site-guide.md is one the scenario runs, read from the guide itself."""
    verbs = [" ".join(c.split()[1:3]) if c.split()[1] in ("site", "bundle") else c.split()[1] for c in guide.commands()]
    assert sorted(verbs) == sorted(GUIDE_RUN_BY), verbs
    recipe = (bed.REPO / "Makefile").read_text()
    assert "carme bundle build --release $(CARME_RELEASE) --out $(SITE_BUNDLE)" in recipe
    assert inv.guide_command("bundle build")[1:4] == ["bundle", "build", "--release"]


def test_the_guides_bundle_verify_accepts_the_bundle() -> None:
    done = bed.as_controller(inv.guide_command("bundle verify"), check=False, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


# -- carme check: each injected fault named, one at a time, on the GPU node -------------------------------------------
NODE = bed.NODES[1]
FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"  # scripts/host-packages.txt: libfaketime
FAKETIME_ON_NODE = "/usr/local/lib/libfaketime-site-test.so.1"
#: (what is broken, how, how it is mended, the check that must name it)
FAULTS = {
    "sshd stopped": ("systemctl stop ssh.service ssh.socket", "systemctl start ssh.service", "unreachable"),
    "sudo removed": ("rm /etc/sudoers.d/carme-deploy", "", "sudo"),
    "a name not resolving": (
        "cp /etc/nsswitch.conf /root/nsswitch.conf.site-test && sed -i 's/^hosts:.*/hosts: files/' /etc/nsswitch.conf",
        "mv /root/nsswitch.conf.site-test /etc/nsswitch.conf",
        "resolve",
    ),
    # A container shares this host's clock: the node's `date` (what the check reads) answers 10 minutes ahead through
    # libfaketime (this host's, copied in for the test). Preloading it for every process instead (/etc/ld.so.preload)
    # made sshd's sandboxed pre-authentication child die: the check said "unreachable", not "clock".
    "the clock 10 min off": (
        f"mv /usr/bin/date /usr/bin/date.site-test && printf '#!/bin/sh\\nFAKETIME=+10m LD_PRELOAD={FAKETIME_ON_NODE} "
        'exec /usr/bin/date.site-test "$@"\\n\' > /usr/bin/date && chmod 0755 /usr/bin/date',
        "mv /usr/bin/date.site-test /usr/bin/date",
        "clock",
    ),
}


def carme_check() -> tuple[set[tuple[str, str]], float]:
    """``carme check --json`` as the controller: the (host, check) pairs with a problem, and the seconds it took.
    No SSH connection sharing: a connection kept open from an earlier run would hide a stopped sshd."""
    t0 = time.monotonic()
    done = bed.as_controller([*inv.guide_command("check"), "--json"], check=False,
                             extra_env=("ANSIBLE_SSH_ARGS=-o ControlMaster=no",))  # fmt: skip
    seconds = time.monotonic() - t0
    report = json.loads(done.stdout)
    return {(host, p["check"]) for host, found in report["hosts"].items() for p in found["problems"]}, seconds


@pytest.fixture(scope="module")
def baseline(site: Site) -> set[tuple[str, str]]:
    """What `carme check` finds on the healthy site: the GPU node has fake GPUs and no nvidia-smi."""
    found, _ = carme_check()
    assert found == {(NODE, "nvidia")}, found
    return found


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_carme_check_names_the_injected_fault(baseline: set[tuple[str, str]], fault: str) -> None:
    breaks, mends, check = FAULTS[fault]
    if FAKETIME_ON_NODE in breaks:
        bed.podman("cp", FAKETIME, f"{NODE}:{FAKETIME_ON_NODE}")
    bed.on_node(NODE, breaks)
    try:
        found, seconds = carme_check()
    finally:
        if mends:
            bed.on_node(NODE, mends)
        else:
            bed.set_sudo(NODE, password=None)
    print(f"carme check with {fault}: {seconds:.1f} s")
    assert found - baseline == {(NODE, check)}, found
    assert seconds < 30
