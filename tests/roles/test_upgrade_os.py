# SPDX-License-Identifier: GPL-3.0-or-later
"""Role carme_upgrade_os and playbooks/upgrade_hosts.yml (docs/upgrade.md "Hosts: Debian and Slurm").

The filters as functions; the play for real on this host (Debian 12) with a local connection and a backup set in a
temporary directory: a missing, an incomplete and a damaged set are refused before anything changes, a rollback on a
Debian 12 host puts StateSaveLocation of before back (and again changes nothing), a host not on the old release is
named; the apt sources step on a copy of apt's directory. No apt run and no Slurm unit is touched here
(carme_upgrade_os_slurm_units is empty): the in-place upgrade was measured in a container (docs/upgrade.md).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env
from tests.roles.harness import load_file

filters = load_file("roles/carme_upgrade_os/filter_plugins/carme_upgrade_os_filters.py", "carme_upgrade_os_filters")
backup_filters = load_file("roles/carme_backup/filter_plugins/carme_backup_filters.py", "carme_backup_filters_t")
SET = "before-24.11"

DEB822 = """Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites:
 bookworm-security
Components: main
"""
ONE_LINE = """# a comment naming bookworm stays
deb [arch=amd64 signed-by=/usr/share/keyrings/site.gpg] http://bookworm.mirror.example/debian bookworm main contrib
deb-src http://mirror.example/debian bookworm-updates main
deb http://mirror.example/debian stable main
"""


def test_sources_deb822() -> None:
    moved = filters.carme_upgrade_os_sources(DEB822, "bookworm", "trixie")
    assert "Suites: trixie trixie-updates\n" in moved and "\n trixie-security\n" in moved
    assert "bookworm" not in moved.replace("archive/debian/2025", "")
    assert "URIs: http://mirror.example/debian-security" in moved  # the site's mirror stays


def test_sources_one_line() -> None:
    moved = filters.carme_upgrade_os_sources(ONE_LINE, "bookworm", "trixie")
    assert moved.splitlines() == [
        "# a comment naming bookworm stays",
        "deb [arch=amd64 signed-by=/usr/share/keyrings/site.gpg] http://bookworm.mirror.example/debian trixie"
        " main contrib",
        "deb-src http://mirror.example/debian trixie-updates main",
        "deb http://mirror.example/debian stable main",
    ]
    assert filters.carme_upgrade_os_sources(moved, "bookworm", "trixie") == moved  # a rerun changes nothing


def test_major_and_db_name() -> None:
    assert filters.carme_upgrade_os_major("12.15\n") == "12"
    assert filters.carme_upgrade_os_major("trixie/sid") == "13"
    assert filters.carme_upgrade_os_major("") == ""
    assert filters.carme_upgrade_os_db_name("slurm_acct_db", SET) == "slurm_acct_db_pre_upgrade_before_24_11"
    with pytest.raises(ValueError, match="64"):
        filters.carme_upgrade_os_db_name("slurm_acct_db", "x" * 60)


def _manifest(set_dir: Path, state_dir: Path) -> dict[str, Any]:
    """A complete set with a slurm-state part of localhost (its archive: any file, checked by sha256 only)."""
    archive = set_dir / "slurm-state.tar.gz"
    archive.write_bytes(b"state archive")
    part = {"name": "slurm-state", "kind": "dir", "file": archive.name, "path": str(state_dir),
            "services": ["slurmctld"], "size": archive.stat().st_size,
            "sha256": hashlib.sha256(archive.read_bytes()).hexdigest()}  # fmt: skip
    report = {"host": "localhost", "started": "2026-11-27T19:00:00Z", "debian_version": "12.15", "parts": [part]}
    manifest: dict[str, Any] = backup_filters.carme_backup_manifest([report], SET, "localhost", "2026-11-27T19:01:00Z")
    return manifest


def _play(tmp_path: Path, **extra: Any) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    ansible_connection: local\n    ansible_become: false\n  children:\n    carme:\n"
        "      children:\n        slurm_controller:\n          hosts:\n            localhost:\n"
        "        slurm_compute:\n          hosts: {}\n"
    )
    variables = {"carme_upgrade_set": SET, "carme_backup_dir": str(tmp_path / "sets"),
                 "carme_upgrade_os_slurm_units": [], "carme_upgrade_os_apt_dir": str(tmp_path / "no-apt"),
                 "ansible_python_interpreter": str(Path(_ansible_bin("python3"))), **extra}  # fmt: skip
    argv = [_ansible_bin("ansible-playbook"), str(REPO_ROOT / "playbooks" / "upgrade_hosts.yml"),
            "-i", str(inventory), "-e", json.dumps(variables)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), timeout=300, check=False)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """StateSaveLocation moved aside by an upgrade (<dir>.pre-upgrade-<set>) and a newer one in its place."""
    state_dir = tmp_path / "slurmctld"
    (tmp_path / f"slurmctld.pre-upgrade-{SET}").mkdir()
    (tmp_path / f"slurmctld.pre-upgrade-{SET}" / "node_state").write_text("22.05")
    state_dir.mkdir()
    (state_dir / "node_state").write_text("24.11")
    set_dir = tmp_path / "sets" / SET
    set_dir.mkdir(parents=True)
    (set_dir / "manifest.json").write_text(json.dumps(_manifest(set_dir, state_dir)))
    return state_dir


def test_missing_set_refused(tmp_path: Path) -> None:
    run = _play(tmp_path)
    assert run.returncode != 0
    assert f"backup set {SET} has no complete manifest.json on localhost" in run.stdout
    assert "nothing was changed" in run.stdout


def test_incomplete_set_refused(tmp_path: Path, state: Path) -> None:
    manifest_file = tmp_path / "sets" / SET / "manifest.json"
    manifest_file.write_text(json.dumps({**json.loads(manifest_file.read_text()), "complete": False}))
    run = _play(tmp_path, carme_upgrade_direction="rollback")
    assert run.returncode != 0 and "has no complete manifest.json" in run.stdout
    assert (state / "node_state").read_text() == "24.11"  # nothing moved


def test_damaged_part_refused(tmp_path: Path, state: Path) -> None:
    (tmp_path / "sets" / SET / "slurm-state.tar.gz").write_bytes(b"changed")
    run = _play(tmp_path, carme_upgrade_direction="rollback")
    assert run.returncode != 0
    assert "part slurm-state on localhost" in run.stdout and "sha256 differs" in run.stdout
    assert (state / "node_state").read_text() == "24.11"


def test_rollback_puts_the_old_state_back(tmp_path: Path, state: Path) -> None:
    run = _play(tmp_path, carme_upgrade_direction="rollback")
    assert run.returncode == 0, run.stdout + run.stderr
    assert (state / "node_state").read_text() == "22.05"
    assert (tmp_path / f"slurmctld.post-upgrade-{SET}" / "node_state").read_text() == "24.11"
    assert not (tmp_path / f"slurmctld.pre-upgrade-{SET}").exists()
    again = _play(tmp_path, carme_upgrade_direction="rollback")
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout
    assert (state / "node_state").read_text() == "22.05"


def test_rollback_names_a_host_not_on_the_old_release(tmp_path: Path, state: Path) -> None:
    # this host runs Debian 12: told that the old release is Debian 11, it is the host a rollback must refuse
    releases = {"bookworm": "11", "trixie": "13"}
    run = _play(tmp_path, carme_upgrade_direction="rollback", carme_upgrade_os_releases=releases)
    assert run.returncode != 0
    assert "apt cannot downgrade Debian 13 to 12 in place" in run.stdout
    assert "Not on Debian 12: localhost (Debian 12." in run.stdout
    assert (state / "node_state").read_text() == "24.11"  # nothing rolled back


def _sources_play(tmp_path: Path, apt: Path) -> subprocess.CompletedProcess[str]:
    variables = {"carme_upgrade_os_set": SET, "carme_upgrade_os_apt_dir": str(apt),
                 "carme_upgrade_os_keep_dir": str(tmp_path / "keep"), "ansible_connection": "local"}  # fmt: skip
    argv = [_ansible_bin("ansible-playbook"), str(REPO_ROOT / "tests" / "roles" / "upgrade_sources.yml"),
            "-i", "localhost,", "-e", json.dumps(variables)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), timeout=300, check=False)


def test_sources_step(tmp_path: Path) -> None:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list").write_text(ONE_LINE)
    (apt / "sources.list.d" / "debian.sources").write_text(DEB822)
    run = _sources_play(tmp_path, apt)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "trixie main contrib" in (apt / "sources.list").read_text()
    assert "Suites: trixie trixie-updates" in (apt / "sources.list.d" / "debian.sources").read_text()
    kept = tmp_path / "keep" / SET / "apt" / "sources.list.d" / "debian.sources"
    assert kept.read_text() == DEB822  # the copy of before
    again = _sources_play(tmp_path, apt)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout


@pytest.mark.parametrize("release", ["bookworm", "trixie"])
def test_offline_bundle_must_be_of_the_new_release(tmp_path: Path, release: str) -> None:
    apt, bundle = tmp_path / "apt", tmp_path / "bundle"
    (apt / "sources.list.d").mkdir(parents=True)
    (bundle / "apt").mkdir(parents=True)
    (bundle / "manifest.json").write_text(json.dumps({"release": release}))
    (apt / "carme-offline.list").write_text(f"deb [trusted=yes] file:{bundle}/apt ./\n")
    run = _sources_play(tmp_path, apt)
    if release == "trixie":
        assert run.returncode == 0, run.stdout + run.stderr
    else:
        assert run.returncode != 0
        assert f"apt reads only the offline bundle ({bundle}), built for bookworm" in run.stdout
    assert (apt / "carme-offline.list").read_text() == f"deb [trusted=yes] file:{bundle}/apt ./\n"


def replaced_on_this_host(tmp_path: Path, release: str, timeout: int) -> dict[str, Any]:
    """The role's ``replaced`` step on this host (Debian 12), its facts and the polls of the release read."""
    playbook = tmp_path / "replaced.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role: {name: carme_upgrade_os}\n"
        "      vars: {carme_upgrade_os_action: replaced, carme_upgrade_os_set: s1}\n"
        "    - ansible.builtin.copy:\n"
        "        dest: " + str(tmp_path / "facts.json") + "\n"
        '        content: \'{{ {"found": __carme_upgrade_os_found, "ok": __carme_upgrade_os_ok,'
        ' "attempts": __carme_upgrade_os_replaced_raw.attempts | default(0)} | to_json }}\'\n'
    )
    variables = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "carme_upgrade_os_release": release, "carme_upgrade_os_replace_timeout": timeout}  # fmt: skip
    argv = [_ansible_bin("ansible-playbook"), str(playbook), "-i", "localhost,", "-e", json.dumps(variables)]
    run = subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), cwd=REPO_ROOT, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    facts: dict[str, Any] = json.loads((tmp_path / "facts.json").read_text())
    return facts


def test_replace_keeps_asking_a_node_that_answers_on_the_old_release(tmp_path: Path) -> None:
    """A node not yet reinstalled (this Debian 12 host, waiting for Debian 13) is asked again every 10 s until the
    timeout, then named with what it runs; a node on the new release (here: bookworm as the target) passes at once."""
    waited = replaced_on_this_host(tmp_path, "trixie", 20)
    debian = Path("/etc/debian_version").read_text().strip()
    assert waited == {"found": f"Debian {debian}", "ok": False, "attempts": 2}, waited
    assert replaced_on_this_host(tmp_path, "bookworm", 20) == {"found": f"Debian {debian}", "ok": True, "attempts": 1}
