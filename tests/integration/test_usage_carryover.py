# SPDX-License-Identifier: GPL-3.0-or-later
"""A GPU-minute budget held across the upgrade's fresh usage (docs/upgrade.md "Budgets across the upgrade"), on the
host's real Slurm 22.05 with accounting (``host_slurm``, 4 fake GPUs):

bob's association has a budget of 4 GPU-minutes (``GrpTRESMins=gres/gpu=4``, applied by the slurm role's accounting
tasks), a 2-GPU job of 65 s uses 2 of them; ``carme backup`` (playbooks/backup.yml with only the ``slurm-usage``
part) takes the record; bob's usage is reset to 0, as a fresh Slurm 24.11 starts; the slurm role applies the record
(``slurm_usage_carryover``): Slurm now holds ``gres/gpu=2``, a plain ``sbatch`` of a 1-GPU job of 3 minutes (which
the declared 4 with no usage would run) pends with ``AssocGrpGRESMinutes`` while a 1-minute one runs. Given a record
of another month (the month is over), the role applies the declared 4 again and the held job starts.

Not run here: Slurm 24.11 (the same sacctmgr limits; its usage is 0 as after the RawUsage reset), the demo.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.hostslurm import ACCOUNT
from tests.fixtures.hostslurm import CLUSTER
from tests.fixtures.hostslurm import HostSlurm
from tests.integration.test_limits import USER
from tests.integration.test_limits import gpu_minutes_used
from tests.integration.test_limits import spend_gpu_minutes
from tests.integration.test_limits import state
from tests.integration.test_limits import submit
from tests.integration.test_limits import wait_state
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env

pytestmark = [pytest.mark.host, pytest.mark.slow]

SET = "20261127T160000Z"
BUDGET = "gres/gpu=4"
WHERE = ("where", f"name={USER}", f"account={ACCOUNT}")


def play(root: Path, cluster: HostSlurm, playbook: Path, **extra: Any) -> None:
    inventory = root / "hosts.json"
    groups = ("slurm_controller", "slurm_dbd", "ldap_server", "portal")
    inventory.write_text(json.dumps({"all": {"children": {g: {"hosts": {"localhost": None}} for g in groups}}}))
    variables = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "ansible_become": False, **extra}  # fmt: skip
    argv = [_ansible_bin("ansible-playbook"), str(playbook), "-i", str(inventory), "-e", json.dumps(variables)]
    env = ansible_env({"SLURM_CONF": str(cluster.slurm_conf)})
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def apply_role(root: Path, cluster: HostSlurm, record: dict[str, Any]) -> None:
    """The slurm role's accounting tasks with bob's declared budget and the carry-over record."""
    playbook = root / "accounting.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role: {name: slurm, tasks_from: accounting.yml}\n"
    )
    user = {"name": USER, "account": ACCOUNT, "GrpTRESMins": BUDGET}
    play(root, cluster, playbook, slurm_cluster_name=CLUSTER, slurm_qos=[], slurm_accounts=[], slurm_users=[user],
         slurm_users_purge=False, slurm_service_manage=True, slurm_usage_carryover=record,
         slurm_usage_carryover_file=str(root / "carried.json"))  # fmt: skip


def grp_tres_mins(cluster: HostSlurm) -> str:
    where = ["where", f"user={USER}", f"account={ACCOUNT}"]
    out = cluster.run(["sacctmgr", "-n", "-P", "show", "assoc", *where, "format=grptresmins"]).stdout
    return out.strip()


@pytest.fixture
def cluster(host_slurm: HostSlurm, tmp_path: Path) -> Iterator[HostSlurm]:
    host_slurm.run(["scancel", "-u", USER], check=False)
    host_slurm.sacctmgr("modify", "user", *WHERE, "set", "RawUsage=0")
    try:
        yield host_slurm
    finally:
        host_slurm.run(["scancel", "-u", USER], check=False)
        time.sleep(2)
        host_slurm.sacctmgr("modify", "user", *WHERE, "set", "GrpTRESMins=gres/gpu=-1")
        host_slurm.sacctmgr("modify", "user", *WHERE, "set", "RawUsage=0")


def test_a_budget_used_before_the_upgrade_holds_the_next_job_after_it(cluster: HostSlurm, tmp_path: Path) -> None:
    apply_role(tmp_path, cluster, {})
    assert grp_tres_mins(cluster) == BUDGET
    # this month's usage before the upgrade: 2 GPUs for 65 s, 2 GPU-minutes as slurmctld counts them
    spend_gpu_minutes(cluster, 2, "--gres=gpu:2", "--time=2")

    # the record, as carme backup's slurm-usage part writes it into the set and lists it in the manifest
    play(tmp_path, cluster, REPO_ROOT / "playbooks" / "backup.yml", carme_backup_set=SET,
         carme_backup_dir=str(tmp_path / "backups"), carme_backup_deploy_lock=str(tmp_path / "deploy.lock"),
         carme_backup_parts=[{"name": "slurm-usage", "kind": "slurm_usage", "services": []}],
         carme_backup_environment={"SLURM_CONF": str(cluster.slurm_conf)},
         carme_backup_mysql_socket=str(cluster.mysql_socket), carme_backup_service_manage=False)  # fmt: skip
    record = json.loads((tmp_path / "backups" / SET / "slurm-usage.json").read_text())
    month = time.strftime("%Y-%m", time.gmtime())
    assert record["month"] == month and record["slurm_version"].startswith("22.05"), record
    used = record["minutes"][f"{USER}@{ACCOUNT}"]  # what Slurm enforced: the N of gres/gpu=4(N) of bob's association
    assert used in (2, 3), record  # 2, or 3 if the 65-s job ran over 90 s on a loaded machine
    manifest = json.loads((tmp_path / "backups" / SET / "manifest.json").read_text())
    assert [(p["name"], p["file"], p["month"]) for p in manifest["parts"]] == [
        ("slurm-usage", "slurm-usage.json", month)
    ]

    # the upgrade's fresh usage: 0 (a 3-minute job would fit the declared 4 GPU-minutes again)
    cluster.sacctmgr("modify", "user", *WHERE, "set", "RawUsage=0")
    assert gpu_minutes_used(cluster) == 0
    apply_role(tmp_path, cluster, record)
    assert grp_tres_mins(cluster) == f"gres/gpu={4 - used}"  # 4 declared - the carried minutes
    carried = json.loads((tmp_path / "carried.json").read_text())
    want = {f"{USER}@{ACCOUNT}": {"declared": 4, "carried": used, "limit": 4 - used}}
    assert carried["associations"] == want, carried
    held, error = submit(cluster, "--gres=gpu:1", "--time=3")
    assert held is not None, error
    assert wait_state(cluster, held, "PENDING", "AssocGrpGRESMinutes", timeout=30) == ("PENDING", "AssocGrpGRESMinutes")
    fits, error = submit(cluster, "--gres=gpu:1", "--time=1", seconds=5)
    assert fits is not None, error
    assert cluster.wait_job(fits, timeout=60) == "COMPLETED"
    assert state(cluster, held) == ("PENDING", "AssocGrpGRESMinutes")

    # the month is over (a record of another month): the declared budget again, and the held job starts
    apply_role(tmp_path, cluster, {**record, "month": "2000-01"})
    assert grp_tres_mins(cluster) == BUDGET
    assert wait_state(cluster, held, "RUNNING", timeout=90)[0] == "RUNNING"
