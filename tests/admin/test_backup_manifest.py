# SPDX-License-Identifier: GPL-3.0-or-later
"""The carme_backup role's filters (roles/carme_backup/filter_plugins): the manifest of a set, the restore plan read
back from it, the slapd files of a part and the Slurm nodes that stop an upgrade."""

from __future__ import annotations

from typing import Any

import pytest

from tests.roles.harness import load_file

F = load_file("roles/carme_backup/filter_plugins/carme_backup_filters.py", "carme_backup_filters")
SHA = "a" * 64


def report(host: str, *files: str, started: str = "2026-11-27T15:00:00Z") -> dict[str, Any]:
    parts = [{"name": f.split(".")[0], "kind": "mysql", "file": f, "size": 10, "sha256": SHA} for f in files]
    return {"host": host, "started": started, "debian_version": "12.8", "slurm_version": "22.05.8", "parts": parts}


def test_manifest_lists_every_host_and_part_with_the_controllers_versions() -> None:
    reports = [report("head", "slurmdbd.sql.gz"), report("ldap1", "ldap.1.ldif.gz", started="2026-11-27T14:59:59Z"),
               {**report("portal1"), "debian_version": "13.1"}]  # fmt: skip
    manifest = F.carme_backup_manifest(reports, "20261127T150000Z", "head", "2026-11-27T15:01:00Z")
    assert manifest["complete"] is True and manifest["format"] == 1
    assert (manifest["slurm_version"], manifest["debian_version"]) == ("22.05.8", "12.8")
    assert manifest["created"] == "2026-11-27T14:59:59Z" and manifest["completed"] == "2026-11-27T15:01:00Z"
    assert sorted(manifest["hosts"]) == ["head", "ldap1", "portal1"]
    assert [(p["host"], p["file"]) for p in manifest["parts"]] == [
        ("head", "slurmdbd.sql.gz"),
        ("ldap1", "ldap.1.ldif.gz"),
    ]
    assert manifest["total_size"] == 20


@pytest.mark.parametrize(
    ("reports", "message"),
    [
        ([report("head")], "no part was backed up"),
        (
            [{**report("head", "a.sql.gz"), "parts": [{"name": "a", "file": "a.sql.gz", "size": 1}]}],
            "lacks kind, sha256",
        ),
        ([report("head", "a.sql.gz", "a.sql.gz")], "twice on head"),
        ([{"parts": []}], "without a host"),
    ],
)
def test_manifest_refuses_an_incomplete_report(reports: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(F.AnsibleFilterError, match=message):
        F.carme_backup_manifest(reports, "s1", "head", "t")


def test_restore_plan_is_the_hosts_parts_of_a_complete_set() -> None:
    reports = [report("head", "slurmdbd.sql.gz", "portal.sql.gz"), report("ldap1", "ldap.1.ldif.gz")]
    manifest = F.carme_backup_manifest(reports, "s1", "head", "t")
    # slurmdbd's database before the portal's (and before StateSaveLocation: tests below), whatever the manifest's order
    assert [p["file"] for p in F.carme_backup_host_parts(manifest, "head")] == ["slurmdbd.sql.gz", "portal.sql.gz"]
    assert [p["file"] for p in F.carme_backup_host_parts(manifest, "head", ["portal"])] == ["portal.sql.gz"]
    assert F.carme_backup_host_parts(manifest, "head", ["ldap"]) == []  # on another host
    with pytest.raises(F.AnsibleFilterError, match="has no part nope"):
        F.carme_backup_host_parts(manifest, "head", ["nope"])
    with pytest.raises(F.AnsibleFilterError, match="not a complete backup set"):
        F.carme_backup_host_parts({**manifest, "complete": False}, "head")


def test_restore_puts_slurmdbd_back_before_the_state_ldap_first_the_portal_last() -> None:
    names = ["portal", "slurm-usage", "slurm-state", "slurmdbd", "zz-site-part", "slurm-history", "ldap"]
    parts = [{"name": n, "host": "head", "file": f"{n}.gz"} for n in names]
    manifest = {"format": F.MANIFEST_FORMAT, "complete": True, "set": "s1", "parts": parts}
    assert [p["name"] for p in F.carme_backup_host_parts(manifest, "head")] == [
        "ldap", "slurmdbd", "slurm-state", "slurm-history", "slurm-usage", "portal", "zz-site-part"
    ]  # fmt: skip


def test_slapd_files_are_one_per_database_but_the_frontend_and_monitor() -> None:
    config = ["/c/cn=config/olcDatabase={-1}frontend.ldif", "/c/cn=config/olcDatabase={1}mdb.ldif",
              "/c/cn=config/olcDatabase={0}config.ldif", "/c/cn=config/olcDatabase={2}mdb.ldif",
              "/c/cn=config/olcDatabase={3}monitor.ldif"]  # fmt: skip
    files = F.carme_backup_slapd_files(config, {"name": "ldap", "config_dir": "/c"})
    assert [(f["file"], f["database"]) for f in files] == [
        ("ldap.0.ldif.gz", 0),
        ("ldap.1.ldif.gz", 1),
        ("ldap.2.ldif.gz", 2),
    ]


def test_part_targets_for_the_estimate() -> None:
    """files/estimate.sh's KIND=TARGET: a sacct part's target is its --starttime (the jobs since then are counted)."""
    assert F.carme_backup_part_target({"name": "slurm-history", "kind": "sacct"}, "2024-01-01") == "sacct=2024-01-01"
    assert F.carme_backup_part_target({"name": "db", "kind": "mysql", "database": "x"}, "2024-01-01") == "mysql=x"
    assert F.carme_backup_part_target({"name": "slurm-usage", "kind": "slurm_usage"}) == "slurm_usage=-"  # 1 MiB


def test_file_record_takes_size_and_checksum_from_the_stat() -> None:
    part = {"name": "portal", "kind": "mysql", "database": "carme_webui", "services": ["carme-webui.service"]}
    record = F.carme_backup_file_record(({"file": "portal.sql.gz", "database": "carme_webui"},
                                         {"exists": True, "size": 5, "checksum": SHA}), part)  # fmt: skip
    assert record == {"file": "portal.sql.gz", "database": "carme_webui", "name": "portal", "kind": "mysql",
                      "services": ["carme-webui.service"], "size": 5, "sha256": SHA}  # fmt: skip
    with pytest.raises(F.AnsibleFilterError, match="was not written"):
        F.carme_backup_file_record(({"file": "portal.sql.gz"}, {"exists": False}), part)


NODES = """\
NodeName=node1 Arch=x86_64 CoresPerSocket=2 State=IDLE ThreadsPerBoard=2 Partitions=gpu
NodeName=node2 Arch=x86_64 State=IDLE+DRAIN Partitions=gpu Reason=fan broken [root@2026-11-27T14:00:00]
NodeName=node3 Arch=x86_64 State=MIXED+DRAIN Partitions=gpu Reason=carme-upgrade: to 24.11 [root@2026-11-27T14:00:00]
NodeName=node4 Arch=x86_64 State=DOWN+DRAIN+NOT_RESPONDING Partitions=gpu Reason=carme-upgrade: x [slurm@2026-11-27]
NodeName=node5 Arch=x86_64 State=DOWN* Partitions=gpu Reason=Not responding [slurm@2026-11-27T14:00:00]
NodeName=node6 Arch=x86_64 State=IDLE+FAIL Partitions=gpu
NodeName=node7 Arch=x86_64 State=ALLOCATED+COMPLETING Partitions=gpu
"""


def test_node_problems_are_down_drained_failed_but_not_carmes_own_drain() -> None:
    assert F.carme_backup_node_problems(NODES, "carme-upgrade") == [
        "node2 (IDLE+DRAIN: fan broken)",
        "node4 (DOWN+DRAIN+NOT_RESPONDING: carme-upgrade: x)",  # down: not just Carme's drain
        "node5 (DOWN*: Not responding)",
        "node6 (IDLE+FAIL: no reason given)",
    ]
    assert "node3 (MIXED+DRAIN: carme-upgrade: to 24.11)" in F.carme_backup_node_problems(NODES, "")


@pytest.mark.parametrize(("name", "ok"), [("20261127T150000Z", True), ("before-24.11", True), ("../x", False),
                                          ("a..b", False), ("", False), (None, False)])  # fmt: skip
def test_set_ids(name: object, ok: bool) -> None:
    assert F.carme_backup_set_id_ok(name) is ok
