# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme upgrade``: move a cluster from Debian 12 / Slurm 22.05 to Debian 13 / Slurm 24.11 in stages, or roll it
back (docs/upgrade.md "Upgrade path").

Stages, in order: ``preflight`` (playbooks/upgrade_preflight.yml), ``drain`` (upgrade_drain.yml), ``backup`` (``carme
backup``'s code path with the set ``upgrade-<UTC time>``, named once and kept in the state), ``fetch``
(upgrade_fetch.yml: the set's manifest, usage record and job history to ``<project>/.artifacts/upgrade/<set>/``,
checked against the manifest's sha256), ``hosts`` (upgrade_hosts.yml), ``deploy`` (site.yml as ``carme deploy`` runs
it, holding the deploy lock, with ``slurm_usage_carryover`` = the fetched record) and ``finish``
(upgrade_finish.yml). The progress is in ``state.json`` (carme_admin/upgrade_state.py); a rerun starts at the first
stage not finished. ``--rollback`` (once the set is complete): upgrade_hosts.yml with
``carme_upgrade_direction=rollback``, site.yml, ``carme backup --restore SET``'s code path, then the finish without
the job-history archive.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from typing import TextIO

from carme_admin import backup
from carme_admin import check
from carme_admin import upgrade_state
from carme_admin.bundle_apt import sha256_of
from carme_admin.playbook import PlaybookRun
from carme_admin.playbook import UsageError
from carme_admin.playbook import split_extra_vars
from carme_admin.upgrade_state import State

PREFLIGHT_PLAYBOOK = "playbooks/upgrade_preflight.yml"
DRAIN_PLAYBOOK = "playbooks/upgrade_drain.yml"
FETCH_PLAYBOOK = "playbooks/upgrade_fetch.yml"
HOSTS_PLAYBOOK = "playbooks/upgrade_hosts.yml"
SITE_PLAYBOOK = "site.yml"
FINISH_PLAYBOOK = "playbooks/upgrade_finish.yml"
USAGE_FILE = "slurm-usage.json"
MANIFEST = "manifest.json"
FETCHED_PARTS = ("slurm-usage", "slurm-history")
SECRET_NAME = re.compile(r"pass|secret|token|key", re.IGNORECASE)  # -e values not written to state.json

Play = Callable[[PlaybookRun], bool]


def add_parser(commands: Any) -> None:
    """``carme upgrade [-i INV] [-e K=V]... | --rollback | --status [--json]``."""
    upgrade = commands.add_parser(
        "upgrade", help="upgrade the cluster to Debian 13 / Slurm 24.11 (in stages, resumable), or --rollback",
        description="Preflight, drain (notice, nodes drained, jobs ended), backup set upgrade-<UTC time>, fetch its "
        "usage record and job history, hosts upgraded (upgrade_hosts.yml), site.yml with the usage carried over, "
        "finish (job history for the portal, reservations, nodes resumed). Progress in .artifacts/upgrade/state.json: "
        "run it again after a failure or a kill and it goes on at the first stage not finished.",
    )  # fmt: skip
    mode = upgrade.add_mutually_exclusive_group()
    mode.add_argument("--rollback", action="store_true",
                      help="bring back the cluster of before from the upgrade's backup set")  # fmt: skip
    mode.add_argument("--status", action="store_true", help="print the stages and their times")
    upgrade.add_argument("--inventory", "-i", type=Path, help="inventory (default: the one the upgrade started with)")
    check.add_vault_option(upgrade)
    upgrade.add_argument(
        "-e", "--extra-vars", dest="extra_vars", action="append", default=[], metavar="K=V",
        help="extra variable for every playbook (repeatable), e.g. carme_upgrade_nodes=replace; kept for a rerun "
        "without -e (but for those naming a secret)",
    )  # fmt: skip
    upgrade.add_argument("--json", action="store_true", help="print the final stats (with --status: the state) as JSON")


@dataclass
class Upgrade:
    """One invocation: the project, the state, the playbook runner and where progress goes."""

    project: Path
    state: State
    args: argparse.Namespace
    play: Play
    stream: TextIO
    extravars: dict[str, Any] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)

    @property
    def set_id(self) -> str:
        return str(self.state["set"])

    @property
    def inventory(self) -> Path | None:
        return Path(self.state["inventory"]) if self.state.get("inventory") else None

    @property
    def local_dir(self) -> Path:
        return upgrade_state.upgrade_dir(self.project) / self.set_id

    def run(self, playbook: str, deploy_lock: bool = False, **extravars: Any) -> bool:
        """One playbook; site.yml (``deploy_lock``) with ``--flush-cache``: the hosts stage changed the hosts' release,
        and with ``gathering = smart`` the roles would otherwise get the cached facts of the release before."""
        return self.play(PlaybookRun(
            project=self.project, playbook=playbook, inventory=self.inventory,
            extravars={**self.extravars, "carme_upgrade_set": self.set_id, **extravars},
            extra_args=[*self.extra_args, *(["--flush-cache"] if deploy_lock else [])], deploy_lock=deploy_lock,
        ))  # fmt: skip

    def backup_args(self, restore: bool) -> argparse.Namespace:
        """``carme backup --set SET`` (or ``--restore SET``) as its parser would give them."""
        return argparse.Namespace(
            set_id=None if restore else self.set_id, restore=self.set_id if restore else None, only=[],
            inventory=self.inventory, vault_password_file=self.args.vault_password_file,
            extra_vars=self.args.extra_vars,
        )  # fmt: skip


# -- the stages -------------------------------------------------------------------------------------------------
def manifest(up: Upgrade) -> dict[str, Any] | None:
    """The fetched manifest when it names this set and is complete, else None."""
    try:
        found: dict[str, Any] = json.loads((up.local_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return found if found.get("set") == up.set_id and found.get("complete") is True else None


def fetched_parts(found: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's files the fetch stage copies: the controller's slurm-usage and slurm-history parts."""
    return [
        p for p in found.get("parts", []) if p.get("name") in FETCHED_PARTS and p.get("host") == found["controller"]
    ]


def fetch(up: Upgrade, optional: bool) -> bool:
    """upgrade_fetch.yml into the set's directory here (0700); ``optional``: a set without manifest is no error."""
    up.local_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    up.local_dir.chmod(0o700)
    return up.run(FETCH_PLAYBOOK, carme_upgrade_local_dir=str(up.local_dir), carme_upgrade_fetch_optional=optional)


def stage_backup(up: Upgrade) -> bool:
    """The set, once: when a run killed after ``backup.yml`` left it complete (the role refuses to write a complete
    set again), only the secrets are copied."""
    if upgrade_state.records(up.state, False).get("backup", {}).get("attempts", 0) > 1:
        if not fetch(up, optional=True):
            return False
        if manifest(up) is not None:
            up.stream.write(f"carme: set {up.set_id} is complete on the controller: copying the secrets only\n")
            set_dir = backup.local_set_dir(up.project, up.set_id)
            backup.save_secrets(backup.secrets_dir(up.project, up.inventory), set_dir, up.set_id)
            return True
    return backup.cmd_backup(up.backup_args(restore=False), up.project, up.play, up.stream) == 0


def stage_fetch(up: Upgrade) -> bool:
    """The set's manifest and records, here; each file's sha256 checked against the manifest."""
    if not fetch(up, optional=False):
        return False
    found = manifest(up)
    if found is None:
        up.stream.write(f"carme: {up.local_dir / MANIFEST} is not the complete manifest of set {up.set_id}\n")
        return False
    for part in fetched_parts(found):
        path = up.local_dir / part["file"]
        if not path.is_file() or sha256_of(path) != part["sha256"]:
            up.stream.write(f"carme: {path} is missing or differs from the set's manifest (sha256)\n")
            return False
    for path in up.local_dir.iterdir():
        path.chmod(0o600)
    return True


def usage_record(up: Upgrade) -> dict[str, Any] | None:
    path = up.local_dir / USAGE_FILE
    if not path.is_file():
        return None
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def stage_deploy(up: Upgrade, carryover: bool) -> bool:
    """site.yml as ``carme deploy`` runs it (the deploy lock held), the month's usage carried over."""
    record = usage_record(up) if carryover else None
    extravars = {"slurm_usage_carryover": record} if record is not None else {}
    return up.run(SITE_PLAYBOOK, deploy_lock=True, **extravars)


def stage_finish(up: Upgrade, history: bool) -> bool:
    """upgrade_finish.yml; with ``history``, the fetched job history named by the old Slurm version."""
    found = manifest(up)
    files = [p["file"] for p in fetched_parts(found or {"controller": None}) if p["name"] == "slurm-history"]
    if not history or found is None or not files:
        return up.run(FINISH_PLAYBOOK, carme_upgrade_history=False)
    archive = str(up.local_dir / files[0])
    version = str(found.get("slurm_version", ""))
    return up.run(FINISH_PLAYBOOK, carme_upgrade_history=True, carme_upgrade_history_file=archive,
                  carme_upgrade_history_version=version)  # fmt: skip


def run_stage(up: Upgrade, stage: str) -> bool:
    if stage == "preflight":
        return up.run(PREFLIGHT_PLAYBOOK)
    if stage == "drain":
        started = upgrade_state.records(up.state, False)["drain"]["started"]
        return up.run(DRAIN_PLAYBOOK, carme_upgrade_started=upgrade_state.epoch(started))
    if stage == "backup":
        return stage_backup(up)
    if stage == "fetch":
        return stage_fetch(up)
    if stage == "hosts":
        return up.run(HOSTS_PLAYBOOK, carme_upgrade_direction="upgrade")
    if stage == "deploy":
        return stage_deploy(up, carryover=True)
    return stage_finish(up, history=True)


def run_rollback_stage(up: Upgrade, stage: str) -> bool:
    if stage == "hosts":
        return up.run(HOSTS_PLAYBOOK, carme_upgrade_direction="rollback")
    if stage == "deploy":
        return stage_deploy(up, carryover=False)  # the restored accounting database holds the usage
    if stage == "restore":
        return backup.cmd_backup(up.backup_args(restore=True), up.project, up.play, up.stream) == 0
    return stage_finish(up, history=False)  # the restored accounting database holds the jobs


# -- the command ------------------------------------------------------------------------------------------------
def check_rollback(up: Upgrade) -> None:
    """Refuse a rollback without a complete set: its backup stage finished, its manifest (fetched, if it is not yet)
    complete, its secrets copy intact."""
    if not upgrade_state.records(up.state, False).get("backup", {}).get("finished"):
        raise UsageError(f"no complete backup set to roll back to: the backup stage of set {up.set_id} has not "
                         "finished (run carme upgrade again to go on)")  # fmt: skip
    if manifest(up) is None:
        fetch(up, optional=True)
    if manifest(up) is None:
        raise UsageError(f"set {up.set_id} has no complete manifest ({up.local_dir / MANIFEST}): no rollback")
    backup.verify_secrets(backup.local_set_dir(up.project, up.set_id))


def run_stages(up: Upgrade, rollback: bool) -> int:
    """Run the stages from the first not finished; the state saved before and after each."""
    names = upgrade_state.ROLLBACK_STAGES if rollback else upgrade_state.STAGES
    title = "rollback" if rollback else "upgrade"
    while (stage := upgrade_state.next_stage(up.state, rollback)) is not None:
        up.stream.write(f"carme upgrade: {title} stage {names.index(stage) + 1}/{len(names)} {stage} "
                        f"(set {up.set_id})\n")  # fmt: skip
        upgrade_state.mark(up.state, stage, "started", rollback)
        upgrade_state.save(up.project, up.state)
        ok = (run_rollback_stage if rollback else run_stage)(up, stage)
        upgrade_state.mark(up.state, stage, "finished" if ok else "failed", rollback)
        upgrade_state.save(up.project, up.state)
        if not ok:
            up.stream.write(f"carme: the {title} stage {stage} failed (see above); fix the cause and run carme "
                            f"upgrade{' --rollback' if rollback else ''} again: it goes on at {stage}\n")  # fmt: skip
            return 1
    found = upgrade_state.times(up.state)
    up.stream.write(f"carme: {title} with set {up.set_id} finished: " + ", ".join(
        f"{key} {found[key]} s" for key in ("total_seconds", "rollback_total_seconds", "sessions_blocked_seconds")
        if key in found) + "\n")  # fmt: skip
    return 0


def open_state(project: Path, args: argparse.Namespace, rollback: bool) -> State:
    """The saved state (its inventory must be the one given, if any), or a new one with a new set name."""
    state = upgrade_state.load(project)
    given = str(args.inventory.resolve()) if args.inventory is not None else None
    if state is None:
        if rollback:
            raise UsageError(f"no upgrade to roll back: {upgrade_state.state_path(project)} does not exist")
        return upgrade_state.new_state("upgrade-" + backup.new_set_id(), args.inventory)
    if given is not None and given != state.get("inventory"):
        raise UsageError(f"the upgrade of set {state['set']} runs with inventory {state.get('inventory')}, not {given}")
    return state


def kept_extra_vars(state: State, given: list[str], stream: TextIO) -> list[str]:
    """The ``-e`` values of this run: those given (kept in the state for the next run, but for secrets), or when none
    are given, those kept from the last run that gave some (a rerun after a kill must not lose
    ``carme_upgrade_nodes=replace``)."""
    kept: list[str] = list(state.get("extra_vars") or [])
    if not given:
        if kept:
            stream.write(f"carme: with the -e of the run before: {' '.join(kept)}\n")
        return kept
    secret = [value for value in given if SECRET_NAME.search(value.split("=", 1)[0])]
    state["extra_vars"] = [value for value in given if value not in secret]
    if secret:
        stream.write(f"carme: {len(secret)} -e value(s) naming a secret are not kept: give them again on a rerun\n")
    return list(given)


def cmd_upgrade(args: argparse.Namespace, project: Path, play: Play, stream: TextIO) -> int:
    """``carme upgrade``: 0 when every stage finished (now or before), 1 when a stage failed."""
    if args.status:
        state = upgrade_state.load(project)
        if state is None:
            stream.write("carme: no upgrade started in this project\n")
        elif args.json:
            stream.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
        else:
            stream.write("".join(line + "\n" for line in upgrade_state.status_lines(state)))
        return 0
    with upgrade_state.locked(project):
        state = open_state(project, args, args.rollback)
        args.extra_vars = kept_extra_vars(state, args.extra_vars, stream)
        extravars, extra_args = split_extra_vars(args.extra_vars)
        up = Upgrade(project, state, args, play, stream, extravars)
        up.extra_args = [*extra_args, *check.vault_args(up.inventory, args.vault_password_file)]
        if not args.rollback and state.get("rollback"):
            raise UsageError(f"set {up.set_id} was rolled back (carme upgrade --status); to upgrade again, move "
                             f"{upgrade_state.state_path(project)} aside")  # fmt: skip
        if not args.rollback and upgrade_state.next_stage(state) is None:
            stream.write(f"carme: the upgrade with set {up.set_id} has finished already; nothing to do\n")
            return 0
        if args.rollback and upgrade_state.next_stage(state, rollback=True) is None:
            stream.write(f"carme: the rollback to set {up.set_id} has finished already; nothing to do\n")
            return 0
        if args.rollback:
            check_rollback(up)
        return run_stages(up, args.rollback)
