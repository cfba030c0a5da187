# SPDX-License-Identifier: GPL-3.0-or-later
"""`carme backup`'s playbooks against real daemons on this host: playbooks/backup.yml, restore.yml and
upgrade_preflight.yml run with a local connection on an inventory whose one host is in every group, with
carme_backup_parts pointing at the host cluster's MariaDB (slurmdbd's real slurm_acct_db and a portal database
beside it), a copy of slurmctld's StateSaveLocation, and a slapd of the test's own configured through cn=config.

What is proven: the set holds each part with the manifest's sizes and sha256; the slurm-history part holds real jobs
(alice's 1-GPU job, bob's CPU job) as this Slurm's `sacct --json`, and the portal's archive reader gives each user
their own with the GPU-hours of the allocated gres/gpu; after accounts, rows, LDAP entries and
state files were changed or deleted, restore.yml brings each back (slapd's cn=config too when asked); a failed part
names itself and leaves no manifest; restore refuses a file whose sha256 changed and a set without a manifest; a
complete set is never written again; the preflight refuses a drained node (but not one drained for the
upgrade), a running deploy and too little disk. Not exercised here: stopping and starting the services through
systemd (no systemd on this host: carme_backup_service_manage is false and the test stops and starts slapd itself;
slurmdbd keeps running while its database is reloaded).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from carme_admin import commands
from carme_admin.project import PROJECT_ENV
from tests.fixtures.hostslurm import HostSlurm
from tests.fixtures.slapd import SlapdServer
from tests.fixtures.slapd import cn_config_slapd
from tests.fixtures.slapd import start_slapd
from tests.fixtures.slapd import stop_slapd
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env
from webui.history.archives import read_archive

pytestmark = pytest.mark.host

GROUPS = ("slurm_controller", "slurm_dbd", "ldap_server", "portal")
PORTAL_DB = "h_backup_portal"
SET = "20261127T150000Z"


@dataclass
class Bed:
    cluster: HostSlurm
    ldap: SlapdServer
    ldap_config: Path
    ldap_pidfile: Path
    state: Path
    root: Path

    @property
    def backup_dir(self) -> Path:
        return self.root / "backups"

    def parts(self) -> list[dict[str, Any]]:
        return [
            {"name": "slurmdbd", "kind": "mysql", "database": "slurm_acct_db", "services": ["slurmdbd"]},
            {"name": "slurm-state", "kind": "dir", "path": str(self.state), "services": ["slurmctld"]},
            {"name": "ldap", "kind": "slapd", "config_dir": str(self.ldap_config), "services": ["slapd"]},
            {"name": "portal", "kind": "mysql", "database": PORTAL_DB, "services": ["carme-webui.service"]},
            {"name": "slurm-history", "kind": "sacct", "services": []},
        ]

    def inventory(self) -> Path:
        inventory = self.root / "hosts.json"
        inventory.write_text(json.dumps({"all": {"children": {g: {"hosts": {"localhost": None}} for g in GROUPS}}}))
        return inventory

    def variables(self, **extra: Any) -> dict[str, Any]:
        return {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "ansible_become": False,  # root already; no sudo on this host
            "carme_backup_dir": str(self.backup_dir),
            "carme_backup_parts": self.parts(),
            "carme_backup_mysql_socket": str(self.cluster.mysql_socket),
            "carme_backup_environment": {"SLURM_CONF": str(self.cluster.slurm_conf)},
            "carme_backup_service_manage": False,
            "carme_backup_deploy_lock": str(self.root / "deploy.lock"),
            **extra,
        }

    def play(self, playbook: str, **extra: Any) -> subprocess.CompletedProcess[str]:
        argv = [_ansible_bin("ansible-playbook"), str(REPO_ROOT / "playbooks" / playbook), "-i", str(self.inventory())]
        argv += ["-e", json.dumps(self.variables(**extra))]
        return subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), timeout=300, check=False)

    def sql(self, statement: str, database: str = PORTAL_DB) -> str:
        argv = ["mariadb", "--no-defaults", f"--socket={self.cluster.mysql_socket}", "-uroot", "-N", "-B", database]
        proc = subprocess.run([*argv, "-e", statement], capture_output=True, text=True, timeout=60, check=True)
        return proc.stdout

    def ldap_uids(self) -> list[str]:
        argv = ["ldapsearch", "-x", "-LLL", "-H", self.ldap.uri, "-D", self.ldap.root_dn, "-w", self.ldap.root_password]
        argv += ["-b", f"ou=people,{self.ldap.base_dn}", "(uid=*)", "uid"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
        return sorted(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("uid: "))

    def accounts(self) -> set[str]:
        out = self.cluster.run(["sacctmgr", "-n", "-P", "show", "account", "format=account"]).stdout
        return set(out.split())


def _tree(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every file and directory under root: owner, group, mode and the file's sha256."""
    entries = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        entries[str(path.relative_to(root))] = (st.st_uid, st.st_gid, st.st_mode, digest)
    return entries


@pytest.fixture(scope="module")
def bed(host_slurm: HostSlurm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    root = tmp_path_factory.mktemp("backup")
    state = root / "slurmctld-state"
    subprocess.run(["cp", "-a", str(host_slurm.root / "state"), str(state)], check=True)  # owners kept (slurm)
    host_slurm.create_database(PORTAL_DB, "h_backup_portal", "h-backup-pw")
    with cn_config_slapd(root / "ldap") as (server, config_dir, pidfile):
        bed = Bed(host_slurm, server, config_dir, pidfile, state, root)
        bed.sql("CREATE TABLE sessions (id INT PRIMARY KEY, owner VARCHAR(32)); "
                "INSERT INTO sessions VALUES (1, 'alice'), (2, 'bob');")  # fmt: skip
        yield bed
    host_slurm.drop_database(PORTAL_DB)
    host_slurm.run(["sacctmgr", "-i", "delete", "account", "h-backup-gone"], check=False)


@pytest.fixture(scope="module")
def history_jobs(bed: Bed) -> dict[str, int]:
    """Real jobs in Slurm's accounting before the backup: alice's on one (fake) GPU, bob's on CPUs only."""
    jobs = {"alice": bed.cluster.sbatch("alice", "sleep 3", "--gres=gpu:1", "--mem=100", "--job-name=h-history-gpu"),
            "bob": bed.cluster.sbatch("bob", "sleep 1", "--mem=100", "--job-name=h-history-cpu")}  # fmt: skip
    for job_id in jobs.values():
        assert bed.cluster.wait_job(job_id) == "COMPLETED"
        bed.cluster.sacct(job_id)  # slurmdbd has its final state
    return jobs


@pytest.fixture(scope="module")
def backup_set(bed: Bed, history_jobs: dict[str, int]) -> dict[str, Any]:
    run = bed.play("backup.yml", carme_backup_set=SET)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    manifest: dict[str, Any] = json.loads((bed.backup_dir / SET / "manifest.json").read_text())
    return manifest


def test_backup_writes_every_part_and_the_manifest_last(bed: Bed, backup_set: dict[str, Any]) -> None:
    set_dir = bed.backup_dir / SET
    files = {p["file"]: p for p in backup_set["parts"]}
    names = ["slurmdbd.sql.gz", "slurm-state.tar.gz", "ldap.0.ldif.gz", "ldap.1.ldif.gz", "portal.sql.gz"]
    assert sorted(files) == sorted([*names, "slurm-history.json.gz"])
    for name, part in files.items():
        data = (set_dir / name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (part["size"], part["sha256"]), name
        assert (set_dir / name).stat().st_mode & 0o777 == 0o600, name
    for path in (bed.backup_dir, set_dir):
        assert path.stat().st_mode & 0o777 == 0o700
    assert (set_dir / "manifest.json").stat().st_mode & 0o777 == 0o600
    assert backup_set["complete"] is True and backup_set["set"] == SET
    assert backup_set["slurm_version"].startswith(("22.05", "24.11")), backup_set["slurm_version"]
    assert backup_set["debian_version"] == Path("/etc/debian_version").read_text().strip()
    dump = gzip.decompress((set_dir / "slurmdbd.sql.gz").read_bytes()).decode()
    assert "CREATE DATABASE" in dump and "acct_table" in dump
    assert "uid=alice,ou=people" in gzip.decompress((set_dir / "ldap.1.ldif.gz").read_bytes()).decode()


def test_the_job_history_part_holds_every_users_jobs(
    bed: Bed, backup_set: dict[str, Any], history_jobs: dict[str, int]
) -> None:
    """slurm-history.json.gz is this Slurm's own `sacct --json` of every user, and the portal reads it as an archive:
    each user gets only their own jobs, GPU-hours from the allocated gres/gpu (GPUs x elapsed)."""
    path = bed.backup_dir / SET / "slurm-history.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    parser = doc["meta"]["plugin"].get("data_parser") or doc["meta"]["plugin"]["type"]
    assert parser.endswith(("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42")), doc["meta"]
    by_id = {j["job_id"]: j for j in doc["jobs"]}
    assert by_id[history_jobs["alice"]]["user"] == "alice" and by_id[history_jobs["bob"]]["user"] == "bob"
    archive = read_archive(path, 64 * 1024 * 1024)
    alice = {j.job_id: j for j in archive.jobs_by_user["alice"]}[history_jobs["alice"]]
    bob = {j.job_id: j for j in archive.jobs_by_user["bob"]}[history_jobs["bob"]]
    assert alice.user == "alice" and alice.state == "COMPLETED" and alice.gpus == 1 and alice.elapsed >= 3
    assert alice.gpu_hours == pytest.approx(alice.elapsed / 3600) and bob.gpus == 0 and bob.gpu_hours == 0
    assert history_jobs["bob"] not in {j.job_id for j in archive.jobs_by_user["alice"]}
    assert archive.label.startswith("Before the upgrade (Slurm ") and backup_set["slurm_version"] in archive.label
    [part] = [p for p in backup_set["parts"] if p["name"] == "slurm-history"]
    assert part["since"] == "2000-01-01" and part["kind"] == "sacct"


def test_restore_brings_back_what_was_changed_or_deleted(bed: Bed, backup_set: dict[str, Any]) -> None:
    state_before = _tree(bed.state)
    bed.cluster.sacctmgr("add", "account", "h-backup-gone", "Description=after the backup", "Organization=carme")
    bed.sql("DELETE FROM sessions WHERE id = 2; CREATE TABLE after_backup (x INT);")
    ldap_auth = ["-x", "-H", bed.ldap.uri, "-D", bed.ldap.root_dn, "-w", bed.ldap.root_password]
    subprocess.run(["ldapdelete", *ldap_auth, f"uid=bob,ou=people,{bed.ldap.base_dn}"], check=True, timeout=30)
    victim = next(p for p in sorted(bed.state.rglob("*")) if p.is_file())
    victim.unlink()
    (bed.state / "left-after-backup").write_text("x")
    assert "h-backup-gone" in bed.accounts() and "bob" not in bed.ldap_uids()

    stop_slapd(bed.ldap_pidfile)  # what carme_backup_service_manage does through systemd on a real host
    try:
        run = bed.play("restore.yml", carme_backup_set=SET)
    finally:
        start_slapd(["-F", str(bed.ldap_config)], port=int(bed.ldap.uri.rsplit(":", 1)[1]))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "h-backup-gone" not in bed.accounts() and bed.cluster.account in bed.accounts()
    assert bed.sql("SELECT id, owner FROM sessions ORDER BY id").split() == ["1", "alice", "2", "bob"]
    assert "after_backup" not in bed.sql("SHOW TABLES").split()
    assert bed.ldap_uids() == sorted(bed.ldap.users)
    assert _tree(bed.state) == state_before


def test_restore_of_ldap_with_its_cn_config(bed: Bed, backup_set: dict[str, Any]) -> None:
    (bed.ldap_config / "left-after-backup").write_text("x")  # gone once the config directory was rebuilt
    subprocess.run(["ldapdelete", "-x", "-H", bed.ldap.uri, "-D", bed.ldap.root_dn, "-w", bed.ldap.root_password,
                    f"uid=carol,ou=people,{bed.ldap.base_dn}"], check=True, timeout=30)  # fmt: skip
    stop_slapd(bed.ldap_pidfile)
    try:
        run = bed.play("restore.yml", carme_backup_set=SET, carme_backup_restore_only=["ldap"],
                       carme_backup_ldap_restore_config=True)  # fmt: skip
    finally:
        start_slapd(["-F", str(bed.ldap_config)], port=int(bed.ldap.uri.rsplit(":", 1)[1]))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert not (bed.ldap_config / "left-after-backup").exists()
    assert (bed.ldap_config / "cn=config" / "olcDatabase={1}mdb.ldif").is_file()
    assert bed.ldap_uids() == sorted(bed.ldap.users)


def test_carme_backup_and_restore_through_the_cli(
    bed: Bed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`carme backup` and `carme backup --restore SET --only portal` through ansible-runner, as an admin runs them."""
    project = bed.root / "project"
    (project / ".secrets" / "h").mkdir(parents=True)
    (project / ".secrets" / "h" / "munge.key").write_text("key\n")
    (project / "ansible.cfg").write_text(f"[defaults]\nroles_path = {REPO_ROOT / 'roles'}\ngathering = explicit\n")
    (project / "site.yml").write_text("---\n")
    (project / "playbooks").symlink_to(REPO_ROOT / "playbooks")
    monkeypatch.setenv(PROJECT_ENV, str(project))
    options = ["-i", str(bed.inventory()), "-e", json.dumps(bed.variables())]
    assert commands.main(["backup", "--set", "h-cli", *options]) == 0, capsys.readouterr()
    assert json.loads((bed.backup_dir / "h-cli" / "manifest.json").read_text())["complete"] is True
    assert (project / ".artifacts" / "backups" / "h-cli" / "secrets" / "h" / "munge.key").read_text() == "key\n"
    bed.sql("DELETE FROM sessions")
    bed.cluster.sacctmgr("add", "account", "h-backup-kept", "Description=restore only the portal", "Organization=c")
    assert commands.main(["backup", "--restore", "h-cli", "--only", "portal", *options]) == 0, capsys.readouterr()
    assert bed.sql("SELECT id FROM sessions ORDER BY id").split() == ["1", "2"]
    assert "h-backup-kept" in bed.accounts()  # slurmdbd's part was not restored
    bed.cluster.sacctmgr("delete", "account", "h-backup-kept")
    assert "set h-cli restored" in capsys.readouterr().out


def test_restore_refuses_a_file_changed_since_the_backup(bed: Bed, backup_set: dict[str, Any]) -> None:
    copy = bed.backup_dir / "20261127T150001Z"
    shutil.copytree(bed.backup_dir / SET, copy)
    with (copy / "portal.sql.gz").open("ab") as fh:
        fh.write(b"\0")
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "set": copy.name}))
    bed.sql("INSERT INTO sessions VALUES (3, 'carol')")
    run = bed.play("restore.yml", carme_backup_set=copy.name)
    assert run.returncode != 0
    assert "part portal" in run.stdout and "changed (sha256 differs from the manifest)" in run.stdout
    assert "3" in bed.sql("SELECT id FROM sessions").split()  # nothing was restored
    bed.sql("DELETE FROM sessions WHERE id = 3")


def test_a_failed_part_is_named_and_leaves_no_manifest(bed: Bed) -> None:
    parts = [*bed.parts()[:1], {"name": "portal", "kind": "mysql", "database": "h_backup_no_such_db"}]
    run = bed.play("backup.yml", carme_backup_set="h-failed", carme_backup_parts=parts)
    assert run.returncode != 0
    assert "backup part portal (mysql) on localhost failed" in run.stdout
    set_dir = bed.backup_dir / "h-failed"
    assert (set_dir / "slurmdbd.sql.gz").exists() and not (set_dir / "manifest.json").exists()
    assert not list(set_dir.glob("*.part"))
    run = bed.play("restore.yml", carme_backup_set="h-failed")
    assert run.returncode != 0 and "h-failed/manifest.json" in run.stdout  # an incomplete set is not restored


def test_a_complete_set_is_never_written_again(bed: Bed, backup_set: dict[str, Any]) -> None:
    run = bed.play("backup.yml", carme_backup_set=SET)
    assert run.returncode != 0 and f"set {SET} is complete already" in run.stdout
    assert json.loads((bed.backup_dir / SET / "manifest.json").read_text()) == backup_set


def test_preflight_refuses_a_drained_node_but_not_carmes_own_drain(bed: Bed) -> None:
    node = bed.cluster.node
    try:
        bed.cluster.run(["scontrol", "update", f"nodename={node}", "state=drain", "reason=h-backup broken fan"])
        run = bed.play("upgrade_preflight.yml")
        assert run.returncode != 0
        assert f"Slurm nodes down, drained or failed: {node} (" in run.stdout and "h-backup broken fan" in run.stdout
        bed.cluster.run(["scontrol", "update", f"nodename={node}", "reason=carme-upgrade: draining for 24.11"])
        run = bed.play("upgrade_preflight.yml")
        assert run.returncode == 0, run.stdout[-3000:]
    finally:
        bed.cluster.run(["scontrol", "update", f"nodename={node}", "state=resume"])


def test_preflight_refuses_a_running_deploy_and_too_little_disk(bed: Bed) -> None:
    lock = bed.root / "deploy.lock"
    lock.write_text(f"{os.getpid()}\n2026-11-27T15:00:00Z\ncarme deploy\n")
    run = bed.play("upgrade_preflight.yml")
    assert run.returncode != 0 and f"a deploy is running (`carme deploy`, pid {os.getpid()}" in run.stdout
    lock.write_text("999999999\n2026-11-27T15:00:00Z\ncarme deploy\n")  # killed: its pid is gone
    assert bed.play("upgrade_preflight.yml").returncode == 0
    run = bed.play("upgrade_preflight.yml", carme_backup_space_factor=10**12)
    assert run.returncode != 0 and "not enough disk: " in run.stdout and "bytes x 1000000000000" in run.stdout
