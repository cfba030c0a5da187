# SPDX-License-Identifier: GPL-3.0-or-later
"""Golden-file tests: every BeeGFS configuration file the example inventory renders (each server's services, the
client's files), through real ansible (tests/roles/render_beegfs.yml, a fixed test secret), compared byte for byte
with tests/roles/golden/example/beegfs/<host>/. Regenerate after an intended change with
``CARME_UPDATE_GOLDEN=1 pytest tests/roles/test_beegfs_golden.py`` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.golden import assert_golden
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import RenderResult
from tests.roles.harness import render

GOLDEN = Path(__file__).parent / "golden" / "example" / "beegfs"
TEST_SECRET = "test-beegfs-connauth-" + "0" * 32

#: What the example inventory must render: management on head01, metadata and storage on storage01/02, the client.
EXPECTED = {
    "head01/beegfs-mgmtd.conf",
    "storage01/beegfs-meta.conf",
    "storage01/beegfs-storage.conf",
    "storage02/beegfs-meta.conf",
    "storage02/beegfs-storage.conf",
    "client/beegfs-client.conf",
    "client/beegfs-helperd.conf",
    "client/beegfs-mounts.conf",
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> RenderResult:
    out = tmp_path_factory.mktemp("render-beegfs")
    return render(
        REPO_ROOT / "inventories" / "example",
        out,
        {"carme_beegfs_conn_auth_secret": TEST_SECRET},
        playbook=REPO_ROOT / "tests" / "roles" / "render_beegfs.yml",
    ).check()


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_rendered_set_is_the_expected_one(rendered: RenderResult) -> None:
    assert _files(rendered.out_dir) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rendered_file_matches_golden(rendered: RenderResult, name: str) -> None:
    assert_golden(rendered.text(name), GOLDEN / name, name)


def test_no_stale_golden_files() -> None:
    assert _files(GOLDEN) == EXPECTED


def test_files_name_the_auth_file_never_the_secret(rendered: RenderResult) -> None:
    for name in EXPECTED:
        text = rendered.text(name)
        assert text.startswith("#\n# Ansible managed\n#\n"), name
        assert TEST_SECRET not in text and "CHANGE-ME" not in text, name
        if name != "client/beegfs-mounts.conf":
            assert "connAuthFile                 = /etc/beegfs/connauth\n" in text, name
            assert "connDisableAuthentication    = false\n" in text, name


def test_targets_and_ids_follow_the_host_number(rendered: RenderResult) -> None:
    storage = rendered.text("storage02/beegfs-storage.conf")
    assert "storeStorageDirectory        = /data/beegfs/storage1,/data/beegfs/storage2\n" in storage
    assert "sysMgmtdHost                 = head01\n" in storage
    assert "quotaEnableEnforcement       = true\n" in rendered.text("head01/beegfs-mgmtd.conf")
    assert rendered.text("client/beegfs-mounts.conf").endswith("/mnt/beegfs /etc/beegfs/beegfs-client.conf\n")
    assert "connMaxInternodeNum          = 16\n" in rendered.text("client/beegfs-client.conf")
