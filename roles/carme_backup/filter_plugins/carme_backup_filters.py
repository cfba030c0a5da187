# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the carme_backup role: the backup set's manifest, the restore plan read from it, and the Slurm nodes
that stop an upgrade. Pure functions (tests/admin/test_backup_manifest.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from ansible.errors import AnsibleFilterError  # type: ignore[import-untyped]

MANIFEST_FORMAT = 1
#: slapd database types whose content slapcat dumps (and slapadd loads)
SLAPCAT_TYPES = frozenset({"config", "mdb", "hdb", "bdb", "ldif"})
#: what a set id looks like: the UTC time the CLI names it with (20261127T150000Z), or an admin's own name
SET_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PART_KEYS = ("name", "kind", "file", "size", "sha256")
#: node states that stop an upgrade, as scontrol prints them (State=IDLE+DRAIN, DOWN*, FAIL, ...)
BAD_STATES = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING")
#: the order a host's parts are put back in (others after these, as the manifest lists them): LDAP first (the users),
#: slurmdbd's database before StateSaveLocation, since slurmctld, started again with the latter, loads the associations
#: from slurmdbd and keys the usage it saved by their ids (in the other order a rollback loses this month's usage of
#: every budget); the portal last, as it reads Slurm
RESTORE_ORDER = ("ldap", "slurmdbd", "slurm-state", "slurm-history", "slurm-usage", "portal")


def carme_backup_set_id_ok(set_id: object) -> bool:
    return isinstance(set_id, str) and SET_ID.fullmatch(set_id) is not None and ".." not in set_id


def carme_backup_part_target(part: Mapping[str, Any], since: str = "2000-01-01") -> str:
    """``KIND=TARGET`` of a part (files/estimate.sh's arguments); a sacct part's target is its ``--starttime``."""
    if part["kind"] == "sacct":
        return f"sacct={since}"
    if part["kind"] == "slurm_usage":  # a JSON record, a line per association (carme_backup_usage.py)
        return "slurm_usage=-"
    key = {"mysql": "database", "dir": "path", "slapd": "config_dir"}[str(part["kind"])]
    return f"{part['kind']}={part[key]}"


def carme_backup_slapd_files(config_files: Sequence[str], part: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The slapcat files of a slapd part, one per database of its cn=config that slapcat can read
    (``olcDatabase={N}<type>.ldif`` with N >= 0 and a type in SLAPCAT_TYPES: cn=config itself and the data; not the
    frontend -1 nor a monitor database), in database order."""
    found = (re.search(r"olcDatabase=\{(\d+)\}(\w+)\.ldif$", str(f)) for f in config_files)
    numbers = sorted({int(m.group(1)) for m in found if m and m.group(2) in SLAPCAT_TYPES})
    return [{"file": f"{part['name']}.{n}.ldif.gz", "database": n, "config_dir": str(part["config_dir"])}
            for n in numbers]  # fmt: skip


def carme_backup_file_record(pair: Sequence[Mapping[str, Any]], part: Mapping[str, Any]) -> dict[str, Any]:
    """One file's manifest entry from (its description, ansible's stat of it) and its part."""
    described, stat = pair
    if not stat.get("exists"):
        raise AnsibleFilterError(f"part {part['name']}: {described.get('file')} was not written")
    return {**dict(described), "name": str(part["name"]), "kind": str(part["kind"]),
            "services": list(part.get("services") or []), "size": int(stat["size"]),
            "sha256": str(stat["checksum"])}  # fmt: skip


def carme_backup_manifest(
    reports: Sequence[Mapping[str, Any]], set_id: str, controller: str, completed: str
) -> dict[str, Any]:
    """The manifest of a complete set from every host's report (``{host, started, debian_version, slurm_version,
    parts}``, each part file ``{name, kind, file, size, sha256, ...}``); raises when a report or part is incomplete,
    when a file is listed twice for one host or when no part was backed up at all."""
    if not carme_backup_set_id_ok(set_id):
        raise AnsibleFilterError(f"not a valid backup set id: {set_id!r}")
    hosts: dict[str, dict[str, str]] = {}
    parts: list[dict[str, Any]] = []
    for report in reports:
        host = str(report.get("host") or "")
        if not host:
            raise AnsibleFilterError(f"a host report without a host name: {dict(report)!r}")
        hosts[host] = {"debian_version": str(report.get("debian_version", "")),
                       "slurm_version": str(report.get("slurm_version", ""))}  # fmt: skip
        for part in report.get("parts") or []:
            missing = [key for key in PART_KEYS if part.get(key) in (None, "")]
            if missing:
                raise AnsibleFilterError(f"part {part.get('name', '?')} on {host} lacks {', '.join(missing)}")
            if any(p["host"] == host and p["file"] == part["file"] for p in parts):
                raise AnsibleFilterError(f"file {part['file']} twice on {host}")
            parts.append({**dict(part), "host": host, "size": int(part["size"])})
    if not parts:
        raise AnsibleFilterError("no part was backed up: nothing would be restorable from this set")
    head = hosts.get(controller, {})
    started = sorted(str(r["started"]) for r in reports if r.get("started"))
    return {
        "format": MANIFEST_FORMAT,
        "set": set_id,
        "complete": True,
        "controller": controller,
        "created": started[0] if started else completed,
        "completed": completed,
        "slurm_version": head.get("slurm_version", ""),
        "debian_version": head.get("debian_version", ""),
        "hosts": hosts,
        "parts": sorted(parts, key=lambda p: (p["host"], p["name"], p["file"])),
        "total_size": sum(p["size"] for p in parts),
    }


def carme_backup_host_parts(manifest: Mapping[str, Any], host: str, only: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The parts of ``host`` to restore from ``manifest`` (all, or those named in ``only``); raises when the manifest
    is not a complete set of this format or names a part ``only`` asks for on no host."""
    if manifest.get("format") != MANIFEST_FORMAT or manifest.get("complete") is not True:
        raise AnsibleFilterError(f"set {manifest.get('set', '?')} is not a complete backup set (manifest format "
                                 f"{manifest.get('format')!r}, complete {manifest.get('complete')!r})")  # fmt: skip
    all_parts: list[dict[str, Any]] = list(manifest.get("parts") or [])
    unknown = sorted(set(only) - {p["name"] for p in all_parts})
    if unknown:
        raise AnsibleFilterError(f"set {manifest.get('set')} has no part {', '.join(unknown)}")
    mine = [p for p in all_parts if p["host"] == host and (not only or p["name"] in only)]
    return sorted(
        mine, key=lambda p: RESTORE_ORDER.index(p["name"]) if p["name"] in RESTORE_ORDER else len(RESTORE_ORDER)
    )


def _node_fields(line: str) -> dict[str, str]:
    """``scontrol show node -o`` line as key -> value; Reason= runs to the end of the line (it has spaces)."""
    head, sep, reason = line.partition(" Reason=")
    fields = dict(token.split("=", 1) for token in head.split() if "=" in token)
    if sep:
        fields["Reason"] = re.sub(r"\s*\[[^\]]*\]\s*$", "", reason).strip()
    return fields


def carme_backup_node_problems(scontrol_output: str, drain_reason: str) -> list[str]:
    """Nodes that are DOWN, DRAIN(ED/ING), FAIL(ING) or not responding, as ``NODE (STATE: REASON)``; a node drained
    (and only drained) with a reason starting with ``drain_reason`` is Carme's own drain for the upgrade, not one."""
    problems: list[str] = []
    for line in scontrol_output.splitlines():
        fields = _node_fields(line)
        name, state = fields.get("NodeName", ""), fields.get("State", "").upper()
        flags = {flag for flag in re.split(r"[+*]", state) if flag} | ({"NOT_RESPONDING"} if "*" in state else set())
        bad = {flag for flag in flags if flag.startswith(BAD_STATES)}
        if not name or not bad:
            continue
        reason = fields.get("Reason", "")
        ours = bool(drain_reason) and reason.startswith(drain_reason)
        if ours and all(flag.startswith("DRAIN") for flag in bad):
            continue
        problems.append(f"{name} ({state}: {reason or 'no reason given'})")
    return problems


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "carme_backup_set_id_ok": carme_backup_set_id_ok,
            "carme_backup_part_target": carme_backup_part_target,
            "carme_backup_slapd_files": carme_backup_slapd_files,
            "carme_backup_file_record": carme_backup_file_record,
            "carme_backup_manifest": carme_backup_manifest,
            "carme_backup_host_parts": carme_backup_host_parts,
            "carme_backup_node_problems": carme_backup_node_problems,
        }
