# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme backup`` and ``carme backup --restore SET`` on the live demo (issue 34, docs/upgrade.md "Backups").

alice's batch job ends; the sysadmin runs ``carme backup --set NAME``: the set on the head is root-only, complete
(manifest.json last) and its job-history archive holds alice's job. Then the cluster changes (an account is added to
Slurm's accounting), and ``carme backup --restore NAME`` puts every part back through systemd (slapd, the portal,
slurmctld's StateSaveLocation, slurmdbd's database): the account is gone, the daemons run, both nodes are idle again
and alice logs in through the browser.

Bounded: two ``carme`` runs of at most ``CARME_TIMEOUT_S`` each and the waits below; it only runs ``carme`` against the
demo's own inventory and ``podman exec`` in its containers. The set is removed from the head and this checkout at
the end.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.fixtures.demo import HEAD
from tests.fixtures.demo import REPO
from tests.fixtures.demo import Demo
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import run
from tests.fixtures.demo import wait_job_end

pytestmark = pytest.mark.e2e

CARME = [str(REPO / ".venv" / "bin" / "carme"), "backup"]
CARME_TIMEOUT_S = 300
BACKUPS = "/var/backups/carme"
DAEMONS = ("slapd", "slurmctld", "slurmdbd", "slurmrestd", "nginx")


@pytest.fixture
def set_name(demo: Demo) -> Iterator[str]:
    name = f"e2e-{int(time.time())}"
    yield name
    on_head("rm", "-rf", f"{BACKUPS}/{name}")
    shutil.rmtree(REPO / ".artifacts" / "backups" / name, ignore_errors=True)


def run_bytes(path: str) -> bytes:
    """A file of the head, as bytes."""
    return subprocess.run(["podman", "exec", HEAD, "cat", path], capture_output=True, check=True,
                          timeout=60).stdout  # fmt: skip


def test_a_backup_set_restored_through_systemd_brings_the_cluster_back(demo: Demo, set_name: str) -> None:
    job = on_head("runuser", "-u", "alice", "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null",
                  "--time=1", "--wrap=true").stdout.strip().split(";")[0]  # fmt: skip
    assert job.isdigit(), job
    assert wait_job_end(job, 120) == "COMPLETED"

    made = run([*CARME, "--set", set_name], timeout=CARME_TIMEOUT_S)
    assert made.returncode == 0, (made.stdout + made.stderr)[-4000:]
    listing = on_head("stat", "-c", "%a %U %n", f"{BACKUPS}/{set_name}", f"{BACKUPS}/{set_name}/manifest.json").stdout
    assert listing.split("\n")[0].startswith("700 root") and listing.split("\n")[1].startswith("600 root"), listing
    manifest = json.loads(run_bytes(f"{BACKUPS}/{set_name}/manifest.json"))
    assert manifest["slurm_version"] and manifest["debian_version"], manifest
    history = json.loads(gzip.decompress(run_bytes(f"{BACKUPS}/{set_name}/slurm-history.json.gz")))
    assert any(str(j["job_id"]) == job for j in history["jobs"]), f"job {job} is not in the archive"

    account = f"restore{set_name[4:]}"
    added = on_head("sacctmgr", "-i", "add", "account", account)
    assert added.returncode == 0, added.stdout + added.stderr
    restored = run([*CARME, "--restore", set_name], timeout=CARME_TIMEOUT_S)
    assert restored.returncode == 0, (restored.stdout + restored.stderr)[-4000:]

    deadline = time.monotonic() + 120
    while True:
        active = on_head("systemctl", "is-active", *DAEMONS).stdout.split()
        nodes = on_head("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n")
        if active == ["active"] * len(DAEMONS) and all(n.endswith(" idle") for n in nodes if n.strip()):
            break
        assert time.monotonic() < deadline, f"not back 120 s after the restore: {active} {nodes}"
        time.sleep(3)
    shown = on_head("sacctmgr", "-nP", "show", "account", account)
    assert shown.returncode == 0 and shown.stdout.strip() == "", f"{account} survived the restore: {shown.stdout}"
    page, _code = login(demo, "alice")
    assert "My sessions" in page.inner_text("body")
