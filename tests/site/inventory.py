# SPDX-License-Identifier: GPL-3.0-or-later
"""The `site` scenario's inventory: ``carme site init`` as the controller, a site CA made with openssl, and the test
bed's few settings (containers instead of GPU servers) in one extra file, ``group_vars/all/testbed.yml``.

What a site edits by hand (docs/site-guide.md, section 4) is written here the same way: ``host_vars/<node>.yml`` with
``ansible_host`` (the node's address), the GPU node group's hardware, the site's own certificates. Secrets stay in
the vault ``carme site init`` wrote; nothing here holds one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.site import bed
from tests.site import guide

SITE = bed.WORK / "site"  # the inventory directory
CA = bed.WORK / "site-ca"  # the site's CA and the certificates it issued (controller side)
CA_NAME = "Carme Site Test CA"
DOMAIN = "site.test"
PORTAL_NAME = f"portal.{DOMAIN}"
#: certificate name -> its subjectAltNames (the first one's name is its CN); the Zabbix role reaches its own frontend
#: at https://127.0.0.1:8445 and verifies it with the host's trust store (where a site puts its CA: bed.trust_ca)
CERTS = {
    "portal": [f"DNS:{PORTAL_NAME}", f"DNS:*.apps.{PORTAL_NAME}", f"DNS:{bed.HEAD}"],
    "ldap": [f"DNS:{bed.HEAD}"],
    "zabbix": [f"DNS:{bed.HEAD}", "DNS:localhost", "IP:127.0.0.1"],
}
USER = "alice"  # the example's first user (group_vars/all/users.yml)


#: docs/site-guide.md's example values -> the scenario's (tests/site/guide.py): no login nodes, one GPU node, storage
#: that exists already (no BeeGFS packages here), Charliecloud (in the bundle on both releases; Apptainer is in Debian
#: unstable only, a source the offline bundle does not carry)
GUIDE_VALUES = {
    "sites/hpc": str(SITE),
    "head01": bed.HEAD,
    "login[01-02]": "",
    "gpu[01-16]": bed.NODES[1],
    "hpc.example.org": DOMAIN,
    "beegfs": "existing",
    "apptainer": "charliecloud",
    "/srv/carme-bundle": str(bed.BUNDLE),
    "trixie": bed.RELEASE,  # the guide's release (bundle build, verify): the scenario's
}


def guide_command(verb: str) -> list[str]:
    """The guide's ``carme VERB ...`` command with the scenario's values (tests/site/guide.py)."""
    return guide.command(verb, GUIDE_VALUES)


def init_site() -> None:
    """The guide's ``carme site init`` with the scenario's two hosts, run by the controller account."""
    bed.as_controller(guide_command("site init"))


def _openssl(*args: str) -> None:
    bed.as_controller(["openssl", *args])


def make_ca() -> None:
    """The site's CA and, signed by it, the portal (with the apps' wildcard), LDAP and Zabbix certificates."""
    bed.as_controller(["install", "-d", "-m", "0700", str(CA)])
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "30",
             "-subj", f"/CN={CA_NAME}", "-keyout", f"{CA}/ca.key", "-out", f"{CA}/ca.crt",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    for name, names in CERTS.items():
        sans = ",".join(names)
        ext = f"{CA}/{name}.ext"
        bed.as_controller(["sh", "-c", f"printf 'subjectAltName={sans}\\nextendedKeyUsage=serverAuth\\n' > {ext}"])
        cn = names[0].split(":", 1)[1]
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={cn}",
                 "-keyout", f"{CA}/{name}.key", "-out", f"{CA}/{name}.csr")  # fmt: skip
        _openssl("x509", "-req", "-in", f"{CA}/{name}.csr", "-CA", f"{CA}/ca.crt", "-CAkey", f"{CA}/ca.key",
                 "-CAcreateserial", "-days", "30", "-extfile", ext, "-out", f"{CA}/{name}.crt")  # fmt: skip


def tls_vars() -> dict[str, Any]:
    """Every role takes the site's certificates: nothing generated, no self-signed fallback."""
    ca = f"{CA}/ca.crt"
    return {
        "ldap_server_tls_generate": False,
        "ldap_server_tls_ca_file": ca,
        "ldap_server_tls_cert_file": f"{CA}/ldap.crt",
        "ldap_server_tls_key_file": f"{CA}/ldap.key",
        "ldap_client_tls_ca_file": ca,
        "carme_webui_ldap_ca_file": ca,
        "carme_webui_tls_generate": False,
        "carme_webui_tls_cert_file": f"{CA}/portal.crt",
        "carme_webui_tls_key_file": f"{CA}/portal.key",
        "zabbix_server_tls_cert_file": f"{CA}/zabbix.crt",
        "zabbix_server_tls_key_file": f"{CA}/zabbix.key",
    }


def testbed_vars() -> dict[str, Any]:
    """What the containers need that real GPU servers do not (the demo inventory's test-bed settings)."""
    wheelhouse = f"{bed.BUNDLE_ON_NODE}/wheelhouse"
    return {
        "common_offline_bundle_path": bed.BUNDLE_ON_NODE,
        "carme_webui_wheelhouse": wheelhouse,
        "carme_runtime_wheelhouse": wheelhouse,
        "zabbix_server_wheelhouse": wheelhouse,
        "common_fake_gpus": "{{ 2 if inventory_hostname in groups['slurm_compute'] else 0 }}",
        # unprivileged containers cannot write cgroup hierarchies (inventories/demo/group_vars/all/slurm.yml)
        "slurm_proctrack_type": "proctrack/linuxproc",
        "slurm_task_plugin": "task/none",
        "slurm_jobacct_gather_type": "jobacct_gather/linux",
        "slurm_node_groups": [
            {
                "name": "gpu",
                "hosts": "{{ groups['gpu'] }}",
                "cpus": 2,
                "real_memory": 2000,
                "gpus": 2,
                "gpu_type": "fake",
                "gpu_files": "/dev/nvidia[0-1]",
            }
        ],
        "slurm_users": [
            {"name": "root", "account": "admins"},
            {"name": "carme-portal", "account": "services", "admin_level": "Operator"},
            {"name": USER, "account": "research"},
        ],
        "carme_datasets": [
            {
                "name": "samples",
                "path": "/srv/datasets/samples",
                "readonly": True,
                "description": "A small read-only dataset",
            }
        ],
        "storage_existing_create_datasets": True,
        # the role's default /tmp/carme-webui-wheel is shared by every account on the controller: root's demo
        # deploys on this host own it, and the controller account may not replace it
        "carme_webui_wheel_build_dir": f"{bed.WORK}/portal-wheel",
        # the controller's own copy of the sources (bed.snapshot_sources), not this checkout, which may change meanwhile
        "carme_runtime_source_dir": f"{bed.WORK}/source",
        "carme_webui_source_dir": f"{bed.WORK}/source",
    }


def write_inventory_edits() -> None:
    """The edits of docs/site-guide.md section 4: node addresses, hardware, the site's certificates."""
    files = {Path("group_vars/all/testbed.yml"): {**testbed_vars(), **tls_vars()}}
    for node in bed.NODES:
        files[Path("host_vars") / f"{node}.yml"] = {"ansible_host": bed.address(node)}
    for path, data in files.items():
        text = "---\n# The site scenario's edits (tests/site/inventory.py)\n" + yaml.safe_dump(data, sort_keys=False)
        bed.as_controller(["mkdir", "-p", str((SITE / path).parent)])
        bed.as_controller(["tee", str(SITE / path)], input_text=text)


def set_deploy_user(become_password: bool) -> None:
    """hosts.yml's ansible_user: deploy; with a sudo password, ansible_become_password from the vault."""
    hosts = SITE / "hosts.yml"
    data = yaml.safe_load(hosts.read_text())
    data["all"]["vars"]["ansible_user"] = bed.DEPLOY_USER
    if become_password:
        data["all"]["vars"]["ansible_become_password"] = "{{ vault_deploy_become_password }}"
    else:
        data["all"]["vars"].pop("ansible_become_password", None)
    bed.as_controller(["tee", str(hosts)], input_text="---\n" + yaml.safe_dump(data, sort_keys=False))


def deploy(timeout: float = 3000) -> Any:
    """The guide's ``carme deploy -i SITE/hosts.yml`` as the controller (the vault opened with SITE/.vault-pass,
    which ``carme`` finds next to the inventory)."""
    return bed.as_controller(guide_command("deploy"), timeout=timeout, check=False)


def vault_values() -> dict[str, str]:
    """The vault's secrets in clear (to look for them where they must not be)."""
    out = bed.as_controller([bed.PY, "-m", "ansible.cli.vault", "view", "--vault-password-file",
                             f"{SITE}/.vault-pass", f"{SITE}/group_vars/all/vault.yml"]).stdout  # fmt: skip
    return {str(k): str(v) for k, v in yaml.safe_load(out).items()}


def add_to_vault(name: str, value: str) -> None:
    """One more secret in the vault (decrypted and encrypted again by the controller, as ``ansible-vault edit``)."""
    text = yaml.safe_dump({**vault_values(), name: value})
    plain, vault = f"{bed.WORK}/vault.plain", f"{SITE}/group_vars/all/vault.yml"
    bed.as_controller(["sh", "-c", f"umask 077; cat > {plain}"], input_text="---\n" + text)
    try:
        bed.as_controller(["ansible-vault", "encrypt", "--vault-password-file", f"{SITE}/.vault-pass",
                           "--output", vault, plain])  # fmt: skip
    finally:
        bed.as_controller(["rm", "-f", plain])
