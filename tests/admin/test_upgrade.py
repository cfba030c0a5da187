# SPDX-License-Identifier: GPL-3.0-or-later
"""`carme upgrade` (carme_admin/upgrade.py, upgrade_state.py): the stages in order and what each playbook is given,
a kill in each stage and a rerun that goes on there, the finished upgrade that does nothing, --status, --rollback and
its refusals, the state file and the times. No ansible run: a stub stands in for the cluster."""

from __future__ import annotations

import argparse
import gzip
import io
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from carme_admin import commands
from carme_admin import upgrade
from carme_admin import upgrade_state
from carme_admin.bundle_apt import sha256_of
from carme_admin.playbook import PlaybookRun
from carme_admin.playbook import UsageError
from carme_admin.project import PROJECT_ENV
from tests.admin.test_backup import make_secrets
from tests.admin.test_commands import make_project
from tests.roles.harness import REPO_ROOT

USAGE = {"format": 1, "month": "2026-11", "associations": {"bob@research": 60}}
ORDER = [
    "playbooks/upgrade_preflight.yml",
    "playbooks/upgrade_drain.yml",
    "playbooks/backup.yml",
    "playbooks/upgrade_fetch.yml",
    "playbooks/upgrade_hosts.yml",
    "site.yml",
    "playbooks/upgrade_finish.yml",
]
ROLLBACK_ORDER = ["playbooks/upgrade_hosts.yml", "site.yml", "playbooks/restore.yml", "playbooks/upgrade_finish.yml"]


class Killed(BaseException):
    """Stands in for a SIGKILL: nothing after it runs (not an Exception: no handler catches it)."""


class Cluster:
    """The playbook runs: recorded; backup.yml completes the set (and refuses a complete one, as the role does), the
    fetch copies the controller's files of a complete set; ``kill_at`` (playbook, "before"|"after") kills the run."""

    def __init__(self, kill_at: tuple[str, str] | None = None, fail: str | None = None) -> None:
        self.runs: list[PlaybookRun] = []
        self.complete: set[str] = set()
        self.kill_at, self.fail = kill_at, fail

    def __call__(self, run: PlaybookRun) -> bool:
        if self.kill_at == (run.playbook, "before"):
            self.kill_at = None
            raise Killed
        self.runs.append(run)
        ok = self._play(run)
        if self.kill_at == (run.playbook, "after"):
            self.kill_at = None
            raise Killed
        return ok and run.playbook != self.fail

    def _play(self, run: PlaybookRun) -> bool:
        extravars = dict(run.extravars or {})
        if run.playbook == "playbooks/backup.yml":
            if extravars["carme_backup_set"] in self.complete:
                return False
            self.complete.add(extravars["carme_backup_set"])
        if run.playbook == "playbooks/upgrade_fetch.yml":
            set_id = extravars["carme_upgrade_set"]
            if set_id not in self.complete:
                return bool(extravars.get("carme_upgrade_fetch_optional"))
            fetch_set(run.project / ".artifacts" / "upgrade" / set_id, set_id)
        return True

    def playbooks(self) -> list[str]:
        return [run.playbook for run in self.runs]

    def run_of(self, playbook: str) -> PlaybookRun:
        return next(run for run in self.runs if run.playbook == playbook)


def fetch_set(local: Path, set_id: str) -> None:
    """What upgrade_fetch.yml copies: the manifest and the controller's usage record and job history."""
    local.mkdir(parents=True, exist_ok=True)
    (local / "slurm-usage.json").write_text(json.dumps(USAGE))
    (local / "slurm-history.json.gz").write_bytes(gzip.compress(b'{"jobs": []}'))
    files = (("slurm-usage", "slurm-usage.json"), ("slurm-history", "slurm-history.json.gz"))
    parts = [{"name": name, "file": file, "host": "head", "sha256": sha256_of(local / file)} for name, file in files]
    ldap = {"name": "ldap", "file": "ldap.0.ldif.gz", "host": "head", "sha256": "x"}
    manifest = {"format": 1, "set": set_id, "complete": True, "controller": "head", "slurm_version": "22.05.8",
                "parts": [*parts, ldap]}  # fmt: skip
    (local / "manifest.json").write_text(json.dumps(manifest))


def parse(*argv: str) -> argparse.Namespace:
    return commands.build_parser().parse_args(["upgrade", *argv])


def project_with_secrets(tmp_path: Path) -> Path:
    project = make_project(tmp_path / "p")
    make_secrets(project)
    return project


def upgrade_cmd(project: Path, cluster: Cluster, *argv: str) -> tuple[int, str]:
    stream = io.StringIO()
    try:
        code = upgrade.cmd_upgrade(parse(*argv), project, cluster, stream)
    except Killed:
        code = -9
    return code, stream.getvalue()


def state(project: Path) -> dict[str, Any]:
    found = upgrade_state.load(project)
    assert found is not None
    return found


def test_the_stages_run_in_order_with_their_variables(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    (project / "hosts.yml").write_text("all: {}\n")
    cluster = Cluster()
    code, out = upgrade_cmd(project, cluster, "-i", str(project / "hosts.yml"), "-e", "carme_upgrade_nodes=replace")
    assert code == 0, out
    assert cluster.playbooks() == ORDER
    assert all((REPO_ROOT / p).is_file() for p in ORDER if p != ORDER[4])  # upgrade_hosts.yml: issue 34's hosts stage
    set_id = state(project)["set"]
    assert set_id.startswith("upgrade-") and len(set_id) == len("upgrade-20261127T150000Z")
    for run in cluster.runs:  # the inventory and the admin's -e go to every playbook
        assert run.inventory == (project / "hosts.yml").resolve()
        assert (run.extravars or {})["carme_upgrade_nodes"] == "replace"
    assert cluster.run_of(ORDER[1]).extravars["carme_upgrade_started"] > 1_700_000_000  # type: ignore[index]
    assert cluster.run_of(ORDER[2]).extravars["carme_backup_set"] == set_id  # type: ignore[index]
    assert cluster.run_of(ORDER[4]).extravars["carme_upgrade_direction"] == "upgrade"  # type: ignore[index]
    deploy = cluster.run_of("site.yml")
    assert deploy.deploy_lock and deploy.extravars["slurm_usage_carryover"] == USAGE  # type: ignore[index]
    # the hosts' release changed: the facts cached before it (gathering = smart) are not used
    assert "--flush-cache" in deploy.extra_args and "--flush-cache" not in cluster.run_of(ORDER[0]).extra_args
    local = project / ".artifacts" / "upgrade" / set_id
    assert cluster.run_of(ORDER[3]).extravars["carme_upgrade_local_dir"] == str(local)  # type: ignore[index]
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in [local, *local.iterdir()]} == {
        set_id: 0o700, "manifest.json": 0o600, "slurm-usage.json": 0o600, "slurm-history.json.gz": 0o600}  # fmt: skip
    finish = cluster.run_of(ORDER[-1]).extravars or {}
    assert finish["carme_upgrade_history"] is True and finish["carme_upgrade_history_version"] == "22.05.8"
    assert finish["carme_upgrade_history_file"] == str(local / "slurm-history.json.gz")
    assert all((run.extravars or {})["carme_upgrade_set"] == set_id for run in cluster.runs if run.playbook != ORDER[2])
    secrets = project / ".artifacts" / "backups" / set_id / "secrets-manifest.json"
    assert secrets.is_file()  # carme backup's secrets copy
    path = upgrade_state.state_path(project)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and [p.name for p in path.parent.glob(".state*")] == []
    recorded = state(project)
    assert recorded["inventory"] == str((project / "hosts.yml").resolve())
    assert all(recorded["stages"][name]["finished"] for name in upgrade_state.STAGES)
    assert "total_seconds" in recorded["times"] and "sessions_blocked_seconds" in recorded["times"]
    assert "upgrade with set " + set_id + " finished" in out


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("index", range(len(ORDER)))
def test_a_kill_in_a_stage_and_a_rerun_goes_on_there(tmp_path: Path, index: int, when: str) -> None:
    project = project_with_secrets(tmp_path)
    cluster = Cluster(kill_at=(ORDER[index], when))
    assert upgrade_cmd(project, cluster)[0] == -9
    killed = upgrade_state.STAGES[index]
    assert upgrade_state.next_stage(state(project)) == killed  # started, not finished
    set_id = state(project)["set"]
    cluster.runs.clear()
    code, out = upgrade_cmd(project, cluster)
    assert code == 0, out
    rerun = cluster.playbooks()
    if killed == "backup" and when == "after":  # the set is complete: not written again, the secrets copied
        assert rerun == ["playbooks/upgrade_fetch.yml", *ORDER[3:]] and "copying the secrets only" in out
        assert (project / ".artifacts" / "backups" / set_id / "secrets-manifest.json").is_file()
    elif killed == "backup":  # a second try of the stage looks for a complete set first
        assert rerun == ["playbooks/upgrade_fetch.yml", *ORDER[index:]]
    else:
        assert rerun == ORDER[index:]
    assert state(project)["set"] == set_id and state(project)["stages"][killed]["attempts"] == 2


def test_a_finished_upgrade_does_nothing(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    assert upgrade_cmd(project, Cluster())[0] == 0
    cluster = Cluster()
    code, out = upgrade_cmd(project, cluster)
    assert code == 0 and cluster.runs == [] and "has finished already; nothing to do" in out


def test_a_failed_stage_stops_and_is_run_again(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    code, out = upgrade_cmd(project, Cluster(fail="playbooks/upgrade_hosts.yml"))
    assert code == 1 and "stage hosts failed" in out and "it goes on at hosts" in out
    assert state(project)["stages"]["hosts"]["failed"]
    cluster = Cluster()
    assert upgrade_cmd(project, cluster)[0] == 0 and cluster.playbooks() == ORDER[4:]


def test_the_fetch_checks_the_files_against_the_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = project_with_secrets(tmp_path)
    original = fetch_set

    def changed(local: Path, set_id: str) -> None:
        original(local, set_id)
        (local / "slurm-usage.json").write_text("{}")

    monkeypatch.setattr(sys.modules[__name__], "fetch_set", changed)
    code, out = upgrade_cmd(project, Cluster())
    assert code == 1 and "slurm-usage.json is missing or differs" in out and "stage fetch failed" in out


def test_another_inventory_is_refused_and_the_recorded_one_used(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    for name in ("a.yml", "b.yml"):
        (project / name).write_text("all: {}\n")
    upgrade_cmd(project, Cluster(kill_at=("playbooks/upgrade_drain.yml", "before")), "-i", str(project / "a.yml"))
    with pytest.raises(UsageError, match="runs with inventory"):
        upgrade_cmd(project, Cluster(), "-i", str(project / "b.yml"))
    cluster = Cluster()
    assert upgrade_cmd(project, cluster)[0] == 0
    assert {run.inventory for run in cluster.runs} == {(project / "a.yml").resolve()}


def test_status_prints_the_stages(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    assert "no upgrade started" in upgrade_cmd(project, Cluster(), "--status")[1]
    upgrade_cmd(project, Cluster(kill_at=("playbooks/upgrade_fetch.yml", "before")))
    code, out = upgrade_cmd(project, Cluster(), "--status")
    assert code == 0 and f"set {state(project)['set']}" in out
    assert "drain" in out and "finished 20" in out
    assert "fetch      started" in out and "not finished" in out and "next: fetch" in out
    code, out = upgrade_cmd(project, Cluster(), "--status", "--json")
    assert json.loads(out)["set"] == state(project)["set"]


def test_rollback_is_refused_without_a_complete_set(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    with pytest.raises(UsageError, match="no upgrade to roll back"):
        upgrade_cmd(project, Cluster(), "--rollback")
    upgrade_cmd(project, Cluster(kill_at=("playbooks/backup.yml", "before")))
    cluster = Cluster()
    with pytest.raises(UsageError, match=r"backup stage of set \S+ has not finished"):
        upgrade_cmd(project, cluster, "--rollback")
    assert cluster.runs == []


def test_rollback_is_refused_when_the_set_has_no_manifest(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    upgrade_cmd(project, Cluster(kill_at=("playbooks/upgrade_fetch.yml", "before")))
    cluster = Cluster()  # a cluster that holds no complete set (the manifest is gone)
    with pytest.raises(UsageError, match="no complete manifest"):
        upgrade_cmd(project, cluster, "--rollback")
    assert cluster.playbooks() == ["playbooks/upgrade_fetch.yml"]


def test_rollback_runs_hosts_site_restore_finish(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    upgrade_cmd(project, Cluster(kill_at=("playbooks/upgrade_hosts.yml", "after")))
    secrets = project / ".secrets" / "demo" / "munge.key"
    secrets.write_bytes(b"changed")
    cluster = Cluster()
    code, out = upgrade_cmd(project, cluster, "--rollback")
    assert code == 0, out
    assert cluster.playbooks() == ROLLBACK_ORDER
    set_id = state(project)["set"]
    assert cluster.run_of(ROLLBACK_ORDER[0]).extravars["carme_upgrade_direction"] == "rollback"  # type: ignore[index]
    site = cluster.run_of("site.yml")
    assert (
        site.deploy_lock
        and "slurm_usage_carryover" not in (site.extravars or {})
        and "--flush-cache" in site.extra_args
    )
    assert cluster.run_of("playbooks/restore.yml").extravars == {  # carme backup --restore SET: every part
        "carme_backup_set": set_id, "carme_backup_restore_only": []}  # fmt: skip
    assert secrets.read_bytes() == b"k" * 96  # the secrets of the set are back
    assert cluster.run_of(ROLLBACK_ORDER[-1]).extravars["carme_upgrade_history"] is False  # type: ignore[index]
    found = state(project)
    assert all(found["rollback"][name]["finished"] for name in upgrade_state.ROLLBACK_STAGES)
    assert "rollback_total_seconds" in found["times"] and "sessions_blocked_seconds" in found["times"]
    again = Cluster()
    assert upgrade_cmd(project, again, "--rollback")[0] == 0 and again.runs == []
    with pytest.raises(UsageError, match="was rolled back"):
        upgrade_cmd(project, again)


def test_a_killed_rollback_goes_on_where_it_stopped(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    upgrade_cmd(project, Cluster())
    assert upgrade_cmd(project, Cluster(kill_at=("playbooks/restore.yml", "before")), "--rollback")[0] == -9
    cluster = Cluster()
    assert upgrade_cmd(project, cluster, "--rollback")[0] == 0
    assert cluster.playbooks() == ROLLBACK_ORDER[2:]


def test_one_upgrade_at_a_time(tmp_path: Path) -> None:
    project = project_with_secrets(tmp_path)
    with upgrade_state.locked(project), pytest.raises(UsageError, match="another carme upgrade"):
        upgrade_cmd(project, Cluster())


def test_the_times(tmp_path: Path) -> None:
    recorded = upgrade_state.new_state("upgrade-20261127T150000Z", None)
    for index, name in enumerate(upgrade_state.STAGES):
        upgrade_state.mark(recorded, name, "started", now=f"2026-11-27T15:{index:02d}:00Z")
        upgrade_state.mark(recorded, name, "finished", now=f"2026-11-27T15:{index:02d}:30Z")
    dest = tmp_path / "bench" / "results" / "upgrade.json"
    upgrade_state.write_times(recorded, dest)
    found = json.loads(dest.read_text())
    assert found["total_seconds"] == 6 * 60 + 30  # preflight's start to finish's end
    assert found["sessions_blocked_seconds"] == 5 * 60 + 30  # drain's start to finish's end
    assert found["sessions_blocked"] == {"from": "2026-11-27T15:01:00Z", "to": "2026-11-27T15:06:30Z"}
    assert found["stages"]["backup"] == 30
    assert upgrade_state.epoch("2026-11-27T15:00:00Z") == 1_795_791_600


def test_main_runs_the_upgrade_and_its_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = project_with_secrets(tmp_path)
    monkeypatch.setenv(PROJECT_ENV, str(project))
    cluster = Cluster()
    monkeypatch.setattr(commands, "_play", lambda _out, run: cluster(run))
    assert commands.main(["upgrade"]) == 0 and cluster.playbooks() == ORDER
    assert commands.main(["upgrade", "--status"]) == 0
    assert "upgrade finished" in capsys.readouterr().out
    assert commands.main(["upgrade", "--status", "--rollback"]) == 2  # one mode at a time


def test_a_rerun_without_e_keeps_the_variables_of_the_start_but_not_secrets(tmp_path: Path) -> None:
    """A sysadmin reruns after a kill and forgets ``-e carme_upgrade_nodes=replace``: the kept value is used again;
    a value naming a password is never written to state.json."""
    project = project_with_secrets(tmp_path)
    argv = ("-e", "carme_upgrade_nodes=replace", "-e", "ansible_become_password=hunter2")
    code, out = upgrade_cmd(project, Cluster(kill_at=("playbooks/upgrade_hosts.yml", "before")), *argv)
    assert code == -9 and "1 -e value(s) naming a secret are not kept" in out
    assert state(project)["extra_vars"] == ["carme_upgrade_nodes=replace"]
    assert "hunter2" not in upgrade_state.state_path(project).read_text()
    cluster = Cluster()
    code, out = upgrade_cmd(project, cluster)
    assert code == 0 and "with the -e of the run before: carme_upgrade_nodes=replace" in out, out
    hosts = cluster.run_of("playbooks/upgrade_hosts.yml")
    assert (hosts.extravars or {}).get("carme_upgrade_nodes") == "replace", hosts.extravars
    # a rerun that gives -e again uses (and keeps) the new values
    project2 = project_with_secrets(tmp_path / "2")
    upgrade_cmd(
        project2, Cluster(kill_at=("playbooks/upgrade_hosts.yml", "before")), "-e", "carme_upgrade_nodes=replace"
    )
    cluster = Cluster()
    assert upgrade_cmd(project2, cluster, "-e", "carme_upgrade_nodes=in_place")[0] == 0
    assert (cluster.run_of("playbooks/upgrade_hosts.yml").extravars or {})["carme_upgrade_nodes"] == "in_place"
    assert state(project2)["extra_vars"] == ["carme_upgrade_nodes=in_place"]
