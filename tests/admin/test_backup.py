# SPDX-License-Identifier: GPL-3.0-or-later
"""`carme backup` (carme_admin/backup.py): the command line, the playbook runs it makes, the local copy of the
secrets and its restore, and the deploy lock `carme deploy` holds (no ansible run: the playbook is a stub)."""

from __future__ import annotations

import io
import json
import os
import stat
from datetime import UTC
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from carme_admin import backup
from carme_admin import commands
from carme_admin import playbook
from carme_admin.playbook import PlaybookRun
from carme_admin.playbook import UsageError
from carme_admin.project import PROJECT_ENV
from tests.admin.test_commands import make_project
from tests.roles.harness import REPO_ROOT


def parse(*argv: str) -> object:
    return commands.build_parser().parse_args(["backup", *argv])


def make_secrets(project: Path) -> Path:
    secrets = project / ".secrets" / "demo"
    (secrets / "ldap-ca").mkdir(parents=True)
    (secrets / "munge.key").write_bytes(b"k" * 96)
    (secrets / "ldap-ca" / "ca.key").write_text("ca key\n")
    return project / ".secrets"


class Plays:
    """Stands in for the playbook runs: records them, answers ``ok``."""

    def __init__(self, ok: bool = True) -> None:
        self.ok = ok
        self.runs: list[PlaybookRun] = []

    def __call__(self, run: PlaybookRun) -> bool:
        self.runs.append(run)
        return self.ok


def test_backup_runs_backup_yml_naming_the_set(tmp_path: Path) -> None:
    args = parse("-e", "carme_backup_dir=/srv/b", "--set", "before-24.11")
    run = backup.backup_run(tmp_path, args, "before-24.11")  # type: ignore[arg-type]
    assert run.playbook == "playbooks/backup.yml" and (REPO_ROOT / run.playbook).is_file()
    assert run.extravars == {"carme_backup_dir": "/srv/b", "carme_backup_set": "before-24.11"}


def test_restore_runs_restore_yml_with_the_parts_asked_for(tmp_path: Path) -> None:
    args = parse("--restore", "20261127T150000Z", "--only", "ldap", "--only", "secrets")
    run = backup.backup_run(tmp_path, args, "20261127T150000Z")  # type: ignore[arg-type]
    assert run.playbook == "playbooks/restore.yml" and (REPO_ROOT / run.playbook).is_file()
    assert run.extravars == {"carme_backup_set": "20261127T150000Z", "carme_backup_restore_only": ["ldap"]}


@pytest.mark.parametrize("argv", [["--only", "ldap"], ["--restore", "x", "--only", "Bad Name"]])
def test_only_needs_restore_and_part_names(tmp_path: Path, argv: list[str]) -> None:
    with pytest.raises(UsageError, match="--only"):
        backup.backup_run(tmp_path, parse(*argv), "x")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["../etc", "a/b", "", ".hidden", "x" * 65, "a..b"])
def test_bad_set_names_are_usage_errors(name: str) -> None:
    with pytest.raises(UsageError):
        backup.check_set_id(name)


def test_set_ids_are_the_utc_time() -> None:
    assert backup.new_set_id(datetime(2026, 11, 27, 15, 0, 1, tzinfo=UTC)) == "20261127T150001Z"
    assert len(backup.check_set_id(backup.new_set_id())) == 16


def test_main_backs_up_then_copies_the_secrets_root_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = make_project(tmp_path / "p")
    make_secrets(project)
    monkeypatch.setenv(PROJECT_ENV, str(project))
    plays = Plays()
    monkeypatch.setattr(commands, "_play", lambda _out, run: plays(run))
    assert commands.main(["backup", "--set", "s1"]) == 0
    assert [r.playbook for r in plays.runs] == ["playbooks/backup.yml"]
    set_dir = project / ".artifacts" / "backups" / "s1"
    manifest = json.loads((set_dir / "secrets-manifest.json").read_text())
    assert sorted(manifest["files"]) == ["demo/ldap-ca/ca.key", "demo/munge.key"]
    assert manifest["files"]["demo/munge.key"]["size"] == 96
    assert (set_dir / "secrets" / "demo" / "munge.key").read_bytes() == b"k" * 96
    for path in [set_dir, *set_dir.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), path
    assert "backup set s1 complete" in capsys.readouterr().out


def test_a_failed_backup_copies_no_secrets(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    make_secrets(project)
    stream = io.StringIO()
    assert backup.cmd_backup(parse("--set", "s2"), project, Plays(ok=False), stream) == 1  # type: ignore[arg-type]
    assert not (project / ".artifacts" / "backups" / "s2").exists()
    assert "backing up set s2 failed" in stream.getvalue()


def test_restore_puts_the_secrets_back_after_the_hosts(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    secrets = make_secrets(project)
    assert backup.cmd_backup(parse("--set", "s3"), project, Plays(), io.StringIO()) == 0  # type: ignore[arg-type]
    (secrets / "demo" / "munge.key").write_bytes(b"new")
    (secrets / "demo" / "ldap-ca" / "ca.key").unlink()
    plays, stream = Plays(), io.StringIO()
    assert backup.cmd_backup(parse("--restore", "s3"), project, plays, stream) == 0  # type: ignore[arg-type]
    assert [r.playbook for r in plays.runs] == ["playbooks/restore.yml"]
    assert (secrets / "demo" / "munge.key").read_bytes() == b"k" * 96
    assert (secrets / "demo" / "ldap-ca" / "ca.key").read_text() == "ca key\n"
    assert "2 secret file(s) restored" in stream.getvalue()


def test_restore_refuses_a_changed_secrets_copy_when_asked_for_it(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    make_secrets(project)
    backup.cmd_backup(parse("--set", "s4"), project, Plays(), io.StringIO())  # type: ignore[arg-type]
    (project / ".artifacts" / "backups" / "s4" / "secrets" / "demo" / "munge.key").write_bytes(b"tampered")
    plays = Plays()
    with pytest.raises(UsageError, match="missing or changed"):
        backup.cmd_backup(parse("--restore", "s4", "--only", "secrets"), project, plays, io.StringIO())  # type: ignore[arg-type]
    assert plays.runs == []  # refused before anything ran
    stream = io.StringIO()  # without --only: the hosts are restored, the secrets are not
    assert backup.cmd_backup(parse("--restore", "s4"), project, plays, stream) == 0  # type: ignore[arg-type]
    assert "the secrets are not restored" in stream.getvalue() and len(plays.runs) == 1


def test_secrets_dir_is_the_sites_beside_its_inventory(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / ".secrets").mkdir(parents=True)
    (site / "hosts.yml").write_text("all: {}\n")
    assert backup.secrets_dir(tmp_path / "p", site / "hosts.yml") == site / ".secrets"
    assert backup.secrets_dir(tmp_path / "p", None) == tmp_path / "p" / ".secrets"


def test_deploy_holds_the_lock_the_preflight_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    class Runner:
        status, rc = "successful", 0
        config = type("Config", (), {"artifact_dir": str(tmp_path / "a")})

    def fake_run(**_kwargs: object) -> Runner:
        seen.append(playbook.deploy_lock_path(tmp_path).read_text())
        return Runner()

    monkeypatch.setitem(__import__("sys").modules, "ansible_runner", type("M", (), {"run": staticmethod(fake_run)}))
    make_project(tmp_path)
    monkeypatch.setenv(PROJECT_ENV, str(tmp_path))
    assert commands.main(["deploy"]) == 0
    assert seen and seen[0].split("\n")[0] == str(os.getpid()) and "carme" in seen[0].split("\n")[2]
    assert not playbook.deploy_lock_path(tmp_path).exists()  # removed when the deploy ended
    preflight = yaml.safe_load((REPO_ROOT / "playbooks" / "upgrade_preflight.yml").read_text())
    default = preflight[0]["vars"]["carme_backup_deploy_lock"]
    assert default == "{{ playbook_dir }}/../" + str(playbook.deploy_lock_path(Path("project")).relative_to("project"))


def test_a_second_deploy_is_refused_while_one_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two terminals, two ``carme deploy``: the second says which one runs and starts nothing; a lock file left by a
    killed deploy (no process holds it) does not stop the next one."""
    runs: list[int] = []

    class Runner:
        status, rc = "successful", 0
        config = type("Config", (), {"artifact_dir": str(tmp_path / "a")})

    def fake_run(**_kwargs: object) -> Runner:
        runs.append(1)
        if len(runs) == 1:  # while the first deploy runs, a second starts
            assert commands.main(["deploy"]) == 2
        return Runner()

    monkeypatch.setitem(__import__("sys").modules, "ansible_runner", type("M", (), {"run": staticmethod(fake_run)}))
    make_project(tmp_path)
    monkeypatch.setenv(PROJECT_ENV, str(tmp_path))
    assert commands.main(["deploy"]) == 0 and len(runs) == 1
    assert f"another deploy runs from this checkout (pid {os.getpid()}" in capsys.readouterr().err
    playbook.deploy_lock_path(tmp_path).write_text("999999\n2026-01-01T00:00:00Z\ncarme deploy\n")  # a killed one's
    assert commands.main(["deploy"]) == 0 and len(runs) == 2
