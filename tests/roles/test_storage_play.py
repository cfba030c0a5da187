# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/storage.yml run for real on this host with a local connection.

With ``carme_storage_backend: beegfs`` the play runs in ``--check`` mode (read-only): BeeGFS packages are not in Debian
and the vendor's repository is not reachable here, so check mode must report what it would install and fetch instead
of failing on them, and must leave nothing behind. With ``existing`` the play checks the declared mounts and dataset
directories and fails naming the path that is missing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env

SECRET = "test-beegfs-connauth-" + "0" * 32
INVENTORY = """all:
  children:
    carme:
      hosts:
        localhost:
    beegfs_mgmtd:
      hosts:
        localhost:
    beegfs_meta:
      hosts:
        localhost:
    beegfs_storage:
      hosts:
        localhost:
"""


def _storage_play(tmp_path: Path, extra: dict[str, Any], *, check: bool) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY)
    variables = {
        "ansible_connection": "local",
        "ansible_python_interpreter": "/usr/bin/python3",  # python3-apt for the apt module
        **extra,
    }
    argv = [
        _ansible_bin("ansible-playbook"),
        str(REPO_ROOT / "playbooks" / "storage.yml"),
        "-i",
        str(inventory),
        "-e",
        json.dumps(variables),
    ]
    if check:
        argv.append("--check")
    return subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), timeout=300, check=False)


BEEGFS_VARS: dict[str, Any] = {
    "carme_storage_backend": "beegfs",
    "beegfs_server_mgmtd_host": "localhost",
    "beegfs_client_mgmtd_host": "localhost",
    "beegfs_server_enable_mgmtd": True,
    "beegfs_server_enable_meta": True,
    "beegfs_server_enable_storage": True,
    "beegfs_server_meta_node_id": 1,
    "beegfs_server_storage_node_id": 1,
    "beegfs_server_storage_targets": [{"id": 101, "path": "/data/carme-test-beegfs/storage01"}],
    "beegfs_server_mgmtd_directory": "/data/carme-test-beegfs/mgmtd",
    "beegfs_server_meta_directory": "/data/carme-test-beegfs/meta",
    "beegfs_server_conn_auth_secret": SECRET,
    "beegfs_client_conn_auth_secret": SECRET,
    "beegfs_client_mount_point": "/mnt/carme-test-beegfs",
    "beegfs_client_directories": [{"path": "datasets"}],
    "beegfs_client_bind_mounts": [{"src": "datasets", "path": "/srv/carme-test-datasets", "readonly": True}],
}
WOULD_BE_WRITTEN = (
    "/etc/apt/sources.list.d/beegfs.sources",
    "/etc/apt/keyrings/beegfs.asc",
    "/etc/beegfs",
    "/data/carme-test-beegfs",
    "/mnt/carme-test-beegfs",
    "/srv/carme-test-datasets",
)


def test_beegfs_check_mode_reports_and_changes_nothing(tmp_path: Path) -> None:
    before = {p: Path(p).exists() for p in WOULD_BE_WRITTEN}
    assert not any(before.values()), f"this host already has BeeGFS paths: {before}"
    run = _storage_play(tmp_path, BEEGFS_VARS, check=True)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    assert "check mode: would install beegfs-mgmtd, beegfs-meta, beegfs-storage from the" in out
    assert "check mode: would install beegfs-client, beegfs-helperd, beegfs-utils from the" in out
    assert "would fetch https://www.beegfs.io/release/beegfs_7.4.6/gpg/GPG-KEY-beegfs" in out
    # The configuration it would write is reported as a change...
    assert "changed: [localhost] => (item=mgmtd)" in out
    assert "Install the connection-authentication file (root-only)" in out
    assert SECRET not in out  # no_log on every task that holds it
    # ...and nothing was written.
    assert {p: Path(p).exists() for p in WOULD_BE_WRITTEN} == before


def test_beegfs_refuses_a_storage_host_without_targets(tmp_path: Path) -> None:
    run = _storage_play(tmp_path, {**BEEGFS_VARS, "beegfs_server_storage_targets": []}, check=True)
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "localhost runs beegfs-storage: set beegfs_server_storage_node_id" in out


def test_unknown_backend_is_refused(tmp_path: Path) -> None:
    run = _storage_play(tmp_path, {"carme_storage_backend": "nfs"}, check=True)
    assert run.returncode != 0
    assert "carme_storage_backend must be beegfs or existing, not nfs" in run.stdout + run.stderr


def test_existing_passes_on_mounted_paths_and_present_datasets(tmp_path: Path) -> None:
    dataset = tmp_path / "datasets" / "demo"
    dataset.mkdir(parents=True)
    run = _storage_play(
        tmp_path,
        {
            "carme_storage_backend": "existing",
            "storage_existing_mounts": ["/"],
            "storage_existing_datasets": [{"name": "demo", "path": str(dataset)}],
        },
        check=False,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    assert "changed=0" in run.stdout


def test_existing_fails_naming_the_path_that_is_not_mounted(tmp_path: Path) -> None:
    run = _storage_play(
        tmp_path,
        {"carme_storage_backend": "existing", "storage_existing_mounts": ["/", str(tmp_path)]},
        check=False,
    )
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"{tmp_path} is not a mount point on localhost" in out
    assert "/ is not a mount point" not in out


def test_existing_fails_naming_a_missing_dataset(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dataset"
    run = _storage_play(
        tmp_path,
        {
            "carme_storage_backend": "existing",
            "storage_existing_mounts": ["/"],
            "storage_existing_datasets": [{"name": "gone", "path": str(missing)}],
        },
        check=False,
    )
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"dataset gone: {missing} is not a directory on localhost" in out


def test_existing_creates_root_owned_read_only_datasets_once(tmp_path: Path) -> None:
    dataset = tmp_path / "srv" / "samples"
    extra = {
        "carme_storage_backend": "existing",
        "storage_existing_mounts": ["/"],
        "storage_existing_datasets": [{"name": "samples", "path": str(dataset), "description": "Test samples"}],
        "storage_existing_create_datasets": True,
    }
    first = _storage_play(tmp_path, extra, check=False)
    assert first.returncode == 0, (first.stdout + first.stderr)[-6000:]
    st = dataset.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o755)
    assert (dataset / "README.txt").read_text() == "samples: Test samples\n"
    again = _storage_play(tmp_path, extra, check=False)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]
