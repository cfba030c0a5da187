# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm 24.11 refuses Slurm 22.05's accounting database (issue 34: why the upgrade cannot carry it over).

In a throwaway Debian 12 node container, slurmdbd 22.05 creates an accounting database with a cluster, an account
with a budget and a user; ``mariadb-dump`` writes it out. In a throwaway Debian 13 container, MariaDB 11.8 loads that
dump and slurmdbd 24.11 is started on it: it stops at once, "Database schema is too old for this version of Slurm to
upgrade." (docs/upgrade.md). Opt-in, like the other 24.11 container tests: only with ``CARME_SLURM2411_TESTS=1``
and both node images present. The containers (``carme-h-dbgap-*``) run with --rm; the files are in a tmp_path.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

import pytest

from tests.fixtures.slurm2411 import IMAGE
from tests.fixtures.slurm2411 import require_opt_in

require_opt_in()

from tests.fixtures.slurm2411 import podman  # noqa: E402

pytestmark = [pytest.mark.slow]

DEBIAN12_IMAGE = "localhost/carme-node:debian12"
SCRIPT = Path(__file__).parent / "data" / "slurmdbd-gap.sh"
TOO_OLD = "fatal: Database schema is too old for this version of Slurm to upgrade."


def in_container(image: str, mode: str, shared: Path) -> None:
    name = f"carme-h-dbgap-{mode}-{os.getpid()}"
    podman("run", "--rm", "--name", name, "-e", f"MODE={mode}", "-v", f"{shared}:/x", "--entrypoint", "/x/gap.sh",
           image)  # fmt: skip


def test_slurmdbd_2411_refuses_a_2205_accounting_database(tmp_path: Path) -> None:
    if podman("image", "exists", DEBIAN12_IMAGE, check=False).returncode != 0:
        pytest.fail(f"no image {DEBIAN12_IMAGE}: make debian12-parts")
    shutil.copy(SCRIPT, tmp_path / "gap.sh")
    (tmp_path / "munge.key").write_bytes(secrets.token_bytes(1024))
    in_container(DEBIAN12_IMAGE, "dump", tmp_path)
    assert "carme|proj1||cpu=120" in (tmp_path / "assoc-22.05.txt").read_text()
    assert (tmp_path / "schema-22.05.txt").read_text().strip() == "12"

    in_container(IMAGE, "load", tmp_path)
    log = (tmp_path / "slurmdbd-load.log").read_text()
    assert TOO_OLD in log, log[-3000:]
    assert (tmp_path / "slurmdbd-load.rc").read_text().strip() == "1", log[-3000:]
