# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme site init DIR``: a site inventory made from ``inventories/example`` and a vault with every secret generated.

The example is the template: its files are copied and only the names the options give are filled in (hosts.yml's
groups, the GPU node group in slurm.yml, the domain, the storage backend, the container runtime), so the example
cannot fall behind the roles without this command's test failing. Every ``vault_*`` variable is generated
(kolla-genpwd's model: :func:`secrets.token_urlsafe`, the munge key as base64 of random bytes, the Zabbix PSK in hex)
into ``DIR/group_vars/all/vault.yml``, encrypted with ansible-vault under the password in ``DIR/.vault-pass``
(0600, generated) or ``--vault-password-file``. Slurm's JWT key is not here: the slurm role makes it on the controller
node (docs/secrets.md).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from carme_admin.playbook import UsageError
from carme_admin.project import find_project_dir

EXAMPLE = Path("inventories") / "example"
VAULT = Path("group_vars") / "all" / "vault.yml"
PASSWORD_FILE = ".vault-pass"
GPU_GROUP = "gpu"
HEAD_IN_EXAMPLE = "head01"

#: every secret of the vault and how it is made
SECRETS: dict[str, Callable[[], str]] = {
    "vault_munge_key": lambda: base64.b64encode(secrets.token_bytes(96)).decode(),
    "vault_slurm_dbd_storage_password": lambda: secrets.token_urlsafe(32),
    "vault_beegfs_conn_auth_secret": lambda: secrets.token_urlsafe(48),
    "vault_ldap_admin_password": lambda: secrets.token_urlsafe(32),
    "vault_portal_secret_key": lambda: secrets.token_urlsafe(48),
    "vault_portal_db_password": lambda: secrets.token_urlsafe(32),
    "vault_zabbix_server_db_password": lambda: secrets.token_urlsafe(32),
    "vault_zabbix_server_admin_password": lambda: secrets.token_urlsafe(32),
    "vault_zabbix_server_api_password": lambda: secrets.token_urlsafe(32),
    "vault_zabbix_agent_psk": lambda: secrets.token_hex(32),
}


def add_parser(commands: Any) -> None:
    """``carme site init DIR [--head H] [--login L] [--gpu-nodes N] [--domain D] [--storage S] [--runtime R] ...``."""
    site = commands.add_parser("site", help="start a real site's inventory (carme site init DIR)")
    actions = site.add_subparsers(dest="site_command", metavar="ACTION", required=True)
    init = actions.add_parser(
        "init", help="write a site inventory from inventories/example and a vault with every secret generated",
        description="Copy inventories/example into DIR with the given host names, domain, storage backend and "
        "container runtime, and write DIR/group_vars/all/vault.yml with every secret generated, encrypted with "
        "ansible-vault (password in DIR/.vault-pass, 0600, unless --vault-password-file).",
    )  # fmt: skip
    init.add_argument("dir", type=Path, metavar="DIR", help="the site's inventory directory")
    init.add_argument("--name", help="cluster name (default: DIR's name)")
    init.add_argument("--head", default="head01", help="the head node (controller, slurmdbd, LDAP, portal, Zabbix)")
    init.add_argument("--login", default="login01", help="login nodes: login[01-02] or a comma list; '' for none")
    init.add_argument("--gpu-nodes", default="gpu[01-04]", help="GPU nodes: node[01-04] or a comma list")
    init.add_argument("--domain", default="cluster.example.org", help="DNS domain (portal.DOMAIN, the LDAP suffix)")
    init.add_argument("--storage", choices=("beegfs", "existing"), default="beegfs", help="shared storage backend")
    init.add_argument("--runtime", choices=("apptainer", "charliecloud"), default="apptainer",
                      help="container runtime of the sessions")  # fmt: skip
    init.add_argument("--vault-password-file", type=Path, metavar="FILE",
                      help="encrypt with this password file (default: generate DIR/.vault-pass)")  # fmt: skip
    init.add_argument(
        "--force", action="store_true", help="overwrite DIR's files (new secrets: a deployed site breaks)"
    )
    init.add_argument("--json", action="store_true", help="print what was written as JSON")


def expand_hosts(spec: str) -> list[str]:
    """``node[01-04]``, ``a,b`` and ``n[1-2,7]`` (ranges keep their zero padding) to host names."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", spec):
        match = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", part.strip())
        if not match:
            names += [part.strip()] if part.strip() else []
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise UsageError(f"bad host range {part!r}: expected e.g. node[01-04]")
            width = len(low)
            names += [f"{prefix}{n:0{width}d}{suffix}" for n in range(int(low), int(high or low) + 1)]
    for name in names:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", name):
            raise UsageError(f"bad host name {name!r}")
    return names


def _hosts(names: list[str]) -> dict[str, Any]:
    return {"hosts": dict.fromkeys(names)}


def fill_hosts(data: dict[str, Any], head: str, logins: list[str], gpus: list[str], storage: str) -> dict[str, Any]:
    """The example's hosts.yml with the site's names: the head everywhere the example has head01."""
    groups = data["all"]["children"]
    carme = groups["carme"]["children"]
    for tree in (carme, groups):
        for group in tree.values():
            if isinstance(group, dict) and HEAD_IN_EXAMPLE in (group.get("hosts") or {}):
                group["hosts"] = {head: None}
    carme["slurm_login"] = _hosts(logins)
    carme["slurm_compute"] = {"children": {GPU_GROUP: _hosts(gpus)}}
    if storage == "existing":  # no BeeGFS servers
        for name in ("beegfs_meta", "beegfs_storage"):
            groups[name] = {"hosts": {}}
    return data


def fill_slurm(data: dict[str, Any]) -> dict[str, Any]:
    """One GPU node group (the example's first, to edit) in every partition open to all accounts."""
    group = {**data["slurm_node_groups"][0], "name": GPU_GROUP, "hosts": f"{{{{ groups['{GPU_GROUP}'] }}}}"}
    data["slurm_node_groups"] = [group]
    open_partitions = [p for p in data["slurm_partitions"] if "AllowAccounts" not in p.get("config", {})]
    data["slurm_partitions"] = [{**p, "node_groups": [GPU_GROUP]} for p in open_partitions]
    return data


def set_key(text: str, key: str, value: str) -> str:
    """Replace the top-level ``key: ...`` line of a YAML file, keeping its comments."""
    line = yaml.safe_dump({key: value}, default_flow_style=False, width=1000).strip()
    new, count = re.subn(rf"^{re.escape(key)}:.*$", lambda _m: line, text, flags=re.MULTILINE)
    if count != 1:
        raise UsageError(f"the example has no single top-level {key}: (inventories/example changed?)")
    return new


def _dump(header: str, data: Any) -> str:
    text = yaml.safe_dump(data, sort_keys=False, width=120, default_flow_style=False)
    return header + text.replace(": null\n", ":\n")  # a host without variables


NOTE = "# Made by `carme site init` from inventories/example/{} (the comments are there). Edit freely.\n"
EDIT_GPUS = "# EDIT the GPU node group's cpus, real_memory, gpus and gpu_files (`slurmd -C` on a node prints them).\n"


def _fill_structure(files: dict[Path, str], args: argparse.Namespace) -> None:
    """hosts.yml and slurm.yml, rewritten from their data: the site's host names and its one GPU node group."""
    head, logins, gpus = expand_hosts(args.head), expand_hosts(args.login), expand_hosts(args.gpu_nodes)
    if len(head) != 1 or not gpus:
        raise UsageError("--head names one host and --gpu-nodes at least one")
    hosts = fill_hosts(yaml.safe_load(files[Path("hosts.yml")]), head[0], logins, gpus, args.storage)
    files[Path("hosts.yml")] = _dump("---\n" + NOTE.format("hosts.yml"), hosts)
    slurm = Path("group_vars/all/slurm.yml")
    files[slurm] = _dump("---\n" + NOTE.format(slurm) + EDIT_GPUS, fill_slurm(yaml.safe_load(files[slurm])))


def _fill_values(files: dict[Path, str], args: argparse.Namespace) -> None:
    """Single values set in place (the files keep their comments)."""
    name = args.name or re.sub(r"[^a-z0-9_]", "_", args.dir.resolve().name.lower())
    base_dn = ",".join(f"dc={part}" for part in args.domain.split("."))
    values = {
        "cluster.yml": {"carme_cluster_name": name, "carme_domain": args.domain},
        "ldap.yml": {"carme_ldap_base_dn": base_dn},
        "storage.yml": {"carme_storage_backend": args.storage},
        "containers.yml": {"carme_container_runtime": args.runtime},
    }
    for file, pairs in values.items():
        path = Path("group_vars/all") / file
        for key, value in pairs.items():
            files[path] = set_key(files[path], key, value)


def render(example: Path, args: argparse.Namespace) -> dict[Path, str]:
    """The site's files (relative path -> text), from the example's, filled from the options."""
    files = {p.relative_to(example): p.read_text() for p in sorted(example.rglob("*")) if p.is_file()}
    files.pop(VAULT.with_name("vault.yml.example"))
    _fill_structure(files, args)
    _fill_values(files, args)
    files[Path(".gitignore")] = f"{PASSWORD_FILE}\n.secrets/\n"
    return files


def vault_text(names: list[str] | None = None) -> str:
    """The vault's plain text: every secret generated."""
    values = {name: SECRETS[name]() for name in names or SECRETS}
    return (
        "---\n# Generated by `carme site init` (docs/secrets.md). Edit: ansible-vault edit this file.\n"
        + yaml.safe_dump(values)
    )


def encrypt(plain: str, password_file: Path) -> str:
    """ansible-vault encryption with the password file (a plain file, or an executable script, as ansible takes it)."""
    from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]  # lazy: ansible is large
    from ansible.parsing.vault import VaultLib  # type: ignore[import-untyped]
    from ansible.parsing.vault import get_file_vault_secret

    secret = get_file_vault_secret(filename=str(password_file), loader=DataLoader())
    secret.load()
    return str(VaultLib([("default", secret)]).encrypt(plain.encode()).decode())


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, 0600 from its creation (its parent made when missing), atomically and durably: a
    temporary file beside it is written and synced, then renamed over ``path`` and the directory synced, so a kill or
    a power loss at any point leaves the old content or the new one, never a part of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.chmod(0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def init(args: argparse.Namespace, project: Path) -> dict[str, Any]:
    """Write the site's files; refuses to overwrite any without --force."""
    files = render(project / EXAMPLE, args)
    own_password = args.vault_password_file is None
    targets = [*files, VAULT] + ([Path(PASSWORD_FILE)] if own_password else [])
    existing = [str(args.dir / path) for path in targets if (args.dir / path).exists()]
    if existing and not args.force:
        raise UsageError(
            f"{len(existing)} file(s) exist, e.g. {existing[0]}: use another DIR, or --force (new secrets)"
        )
    for path, text in files.items():
        (args.dir / path).parent.mkdir(parents=True, exist_ok=True)
        (args.dir / path).write_text(text)
    password_file = args.dir / PASSWORD_FILE if own_password else args.vault_password_file
    if own_password:
        write_private(password_file, secrets.token_urlsafe(48) + "\n")
    write_private(args.dir / VAULT, encrypt(vault_text(), password_file))
    return {"dir": str(args.dir.resolve()), "files": sorted(str(p) for p in targets), "vault": str(args.dir / VAULT),
            "vault_password_file": str(password_file), "secrets": sorted(SECRETS)}  # fmt: skip


def cmd_site(args: argparse.Namespace) -> int:
    done = init(args, find_project_dir())
    if args.json:
        sys.stdout.write(json.dumps(done, indent=2, sort_keys=True) + "\n")
        return 0
    inv = args.dir
    print(f"Wrote {len(done['files'])} files into {done['dir']}; {len(done['secrets'])} secrets in {done['vault']}")
    print(f"Vault password: {done['vault_password_file']} (keep it safe, never commit it)")
    print("Next: edit the hosts and the GPU node group, then")
    print(f"  carme check -i {inv}/hosts.yml")
    print(f"  carme deploy -i {inv}/hosts.yml")
    return 0
