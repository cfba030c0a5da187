# SPDX-License-Identifier: GPL-3.0-or-later
"""Invalid user/group declarations fail before anything is written, naming the entry (issue 4).

Runs the ldap_users module through real Ansible in its validate-only mode (the role's assert step).
"""

from __future__ import annotations

from tests.roles.harness import run_module

GROUPS = [{"name": "research", "gid": 20000}]


def validate(users: list[dict[str, object]], groups: list[dict[str, object]]) -> tuple[int, str]:
    run = run_module("ldap_users", "ldap_users", {"users": users, "groups": groups, "validate_only": True})
    return run.rc, run.output


def test_valid_declaration_passes() -> None:
    rc, out = validate([{"name": "alice", "uid": 20001, "group": "research"}], GROUPS)
    assert rc == 0, out


def test_duplicate_uid_is_named() -> None:
    users = [{"name": "alice", "uid": 20001, "group": "research"}, {"name": "dave", "uid": 20001, "group": "research"}]
    rc, out = validate(users, GROUPS)
    assert rc != 0
    assert "users[1] (dave): duplicate uid 20001" in out


def test_unknown_group_is_named() -> None:
    rc, out = validate([{"name": "erin", "uid": 20005, "group": "nosuch"}], GROUPS)
    assert rc != 0
    assert "users[0] (erin): unknown group 'nosuch'" in out


def test_duplicate_and_bad_gids_are_named() -> None:
    groups = [{"name": "research", "gid": 20000}, {"name": "admins", "gid": 20000}, {"name": "low", "gid": 12}]
    rc, out = validate([{"name": "alice", "uid": 20001, "group": "research"}], groups)
    assert rc != 0
    assert "groups[1] (admins): duplicate gid 20000, also groups[0] (research)" in out
    assert "groups[2] (low): gid must be an integer >= 1000, got 12" in out
