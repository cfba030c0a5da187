# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme backup``: one backup set of the cluster (``playbooks/backup.yml``), or ``--restore SET`` (``restore.yml``).

A set is named by the UTC time it starts (``20261127T150000Z``, or ``--set NAME``). Its parts stay on the hosts that
hold them, under ``carme_backup_dir/<set>/`` (``/var/backups/carme``), and ``manifest.json`` on the Slurm controller,
written last, lists them with their sizes and sha256 (docs/upgrade.md "Backups"). After the playbook succeeded this
command copies the admin machine's secrets directory (the inventory's ``.secrets/``, else the project's) into
``<project>/.artifacts/backups/<set>/secrets/`` (0700 directories, 0600 files) with ``secrets-manifest.json``, and
``--restore`` copies them back after the playbook restored the hosts' parts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from collections.abc import Callable
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any
from typing import TextIO

from carme_admin import check
from carme_admin.bundle_apt import sha256_of
from carme_admin.playbook import PlaybookRun
from carme_admin.playbook import UsageError
from carme_admin.playbook import artifacts_root
from carme_admin.playbook import split_extra_vars
from carme_admin.site import write_private

BACKUP_PLAYBOOK = "playbooks/backup.yml"
RESTORE_PLAYBOOK = "playbooks/restore.yml"
SECRETS_MANIFEST = "secrets-manifest.json"
#: the role's set ids (roles/carme_backup/filter_plugins: carme_backup_set_id_ok)
SET_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PART_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")


def add_parser(commands: Any) -> None:
    """``carme backup [--set NAME] | --restore SET [--only PART]... [-i INV] [-e K=V] [--json]``."""
    backup = commands.add_parser(
        "backup", help="back up the cluster (databases, Slurm state, LDAP, secrets), or --restore a set",
        description="Run the upgrade preflight, then write one backup set: slurmdbd's database, Slurm's "
        "StateSaveLocation, slapcat of LDAP, the portal's database (on their hosts, under /var/backups/carme/SET/), "
        "manifest.json on the Slurm controller, and a copy of .secrets/ here. --restore SET puts a set back.",
    )  # fmt: skip
    backup.add_argument("--set", dest="set_id", metavar="NAME", help="name the new set (default: the UTC time)")
    backup.add_argument("--restore", metavar="SET", help="restore set SET instead (stop, restore, start each part)")
    backup.add_argument("--only", action="append", default=[], metavar="PART",
                        help="with --restore: only this part (repeatable): slurmdbd, slurm-state, ldap, portal, "
                        "secrets")  # fmt: skip
    backup.add_argument("--inventory", "-i", type=Path, help="inventory (default: ansible.cfg's, the demo)")
    check.add_vault_option(backup)
    backup.add_argument(
        "-e", "--extra-vars", dest="extra_vars", action="append", default=[], metavar="K=V",
        help="extra variable (repeatable), e.g. carme_backup_dir=/srv/backups",
    )  # fmt: skip
    backup.add_argument("--json", action="store_true", help="print the final stats as JSON on stdout")


def new_set_id(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")


def check_set_id(set_id: str) -> str:
    if not SET_ID.fullmatch(set_id) or ".." in set_id:
        raise UsageError(f"{set_id!r} is not a set name (letters, digits, '.', '_', '-'; at most 64 characters)")
    return set_id


def backup_run(project: Path, args: argparse.Namespace, set_id: str) -> PlaybookRun:
    """The playbook run: backup.yml naming the set, or restore.yml with the set and the parts asked for."""
    bad = [part for part in args.only if not PART_NAME.fullmatch(part)]
    if bad or (args.only and not args.restore):
        raise UsageError(f"--only takes part names and needs --restore (got {', '.join(args.only)})")
    extravars: dict[str, Any]
    extravars, extra_args = split_extra_vars(args.extra_vars)
    extravars = {**extravars, "carme_backup_set": set_id}
    if args.restore:
        extravars["carme_backup_restore_only"] = [part for part in args.only if part != "secrets"]
    return PlaybookRun(
        project=project,
        playbook=RESTORE_PLAYBOOK if args.restore else BACKUP_PLAYBOOK,
        inventory=args.inventory,
        extravars=extravars,
        extra_args=[*extra_args, *check.vault_args(args.inventory, args.vault_password_file)],
    )


def secrets_dir(project: Path, inventory: Path | None) -> Path:
    """The admin machine's secrets: ``.secrets/`` beside the inventory (a site), else the project's (the demo)."""
    if inventory is not None:
        base = inventory if inventory.is_dir() else inventory.parent
        if (base / ".secrets").is_dir():
            return base / ".secrets"
    return project / ".secrets"


def local_set_dir(project: Path, set_id: str) -> Path:
    return artifacts_root(project) / "backups" / set_id


def _copy_tree(src: Path, dest: Path) -> dict[str, dict[str, Any]]:
    """Copy files (not links) from ``src`` into ``dest``: directories 0700, files 0600; their sizes and sha256."""
    files: dict[str, dict[str, Any]] = {}
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    dest.chmod(0o700)
    for path in sorted(src.rglob("*")):
        target = dest / path.relative_to(src)
        if path.is_dir() and not path.is_symlink():
            target.mkdir(mode=0o700, exist_ok=True)
            target.chmod(0o700)
        elif path.is_file() and not path.is_symlink():
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out, path.open("rb") as inp:
                shutil.copyfileobj(inp, out)
            target.chmod(0o600)
            files[str(path.relative_to(src))] = {"size": target.stat().st_size, "sha256": sha256_of(target)}
    return files


def save_secrets(src: Path, set_dir: Path, set_id: str) -> Path:
    """Copy the secrets into the local set; its manifest is written last (a set without one is incomplete)."""
    for path in (set_dir.parent, set_dir):
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.chmod(0o700)
    files = _copy_tree(src, set_dir / "secrets") if src.is_dir() else {}
    manifest = {"set": set_id, "source": str(src.resolve()), "files": files,
                "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}  # fmt: skip
    path = set_dir / SECRETS_MANIFEST
    write_private(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


def verify_secrets(set_dir: Path) -> dict[str, Any]:
    """The local set's secrets manifest once every file in it matches its sha256; UsageError otherwise."""
    try:
        manifest: dict[str, Any] = json.loads((set_dir / SECRETS_MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"no complete secrets copy in {set_dir} ({exc})") from exc
    saved = set_dir / "secrets"
    for name, meta in manifest["files"].items():
        if not (saved / name).is_file() or sha256_of(saved / name) != meta["sha256"]:
            raise UsageError(f"{saved / name} is missing or changed since the backup")
    return manifest


def restore_secrets(set_dir: Path, dest: Path) -> int:
    """Copy the verified secrets of the local set back over ``dest``; the number of files."""
    manifest = verify_secrets(set_dir)
    if manifest["files"]:
        _copy_tree(set_dir / "secrets", dest)
    return len(manifest["files"])


def _secrets_wanted(args: argparse.Namespace, set_dir: Path, stream: TextIO) -> bool:
    """Restore: whether to put the secrets back; a missing copy is an error only when --only secrets asks for it."""
    if args.only and "secrets" not in args.only:
        return False
    try:
        verify_secrets(set_dir)
    except UsageError as exc:
        if "secrets" in args.only:
            raise
        stream.write(f"carme: the secrets are not restored: {exc}\n")
        return False
    return True


def cmd_backup(args: argparse.Namespace, project: Path, play: Callable[[PlaybookRun], bool], stream: TextIO) -> int:
    """Run the playbook, then save (or restore) the secrets; 0, or 1 when the playbook failed."""
    set_id = check_set_id(args.restore or args.set_id or new_set_id())
    run = backup_run(project, args, set_id)
    secrets = secrets_dir(project, args.inventory)
    set_dir = local_set_dir(project, set_id)
    with_secrets = bool(args.restore) and _secrets_wanted(args, set_dir, stream)
    hosts = args.only != ["secrets"]  # --only needs --restore
    if hosts and not play(run):
        stream.write(f"carme: {'restoring' if args.restore else 'backing up'} set {set_id} failed (see above)\n")
        return 1
    if args.restore:
        if with_secrets:
            stream.write(f"carme: {restore_secrets(set_dir, secrets)} secret file(s) restored into {secrets}\n")
        stream.write(f"carme: set {set_id} restored\n")
        return 0
    save_secrets(secrets, set_dir, set_id)
    stream.write(f"carme: backup set {set_id} complete (secrets copied to {set_dir})\n")
    return 0
