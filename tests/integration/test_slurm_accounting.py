"""The ``slurm_accounting`` module (roles/slurm) against a real slurmdbd (``host_slurm``).

Its users' ``admin_level`` is what lets the portal's Slurm identity stop any session for a portal admin: the test
proves the level is applied, idempotent and dry-run in check mode, that a bad level fails before anything is written,
and that the level is what Slurm itself checks: dave cannot cancel alice's job through slurmrestd until he is an
Operator. dave is the user no other test cancels with; his level is reset at the end.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.hostslurm import ACCOUNT
from tests.fixtures.hostslurm import CLUSTER
from tests.fixtures.hostslurm import HostSlurm
from webui.slurm import API

pytestmark = [pytest.mark.host, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
OPERATOR = "dave"
SERVICES = "carmetestsvc"
PLAY = """\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Apply accounting
      slurm_accounting:
        cluster: "{{ acct.cluster }}"
        accounts: "{{ acct.accounts }}"
        users: "{{ acct.users }}"
        purge_users: "{{ acct.purge_users }}"
      register: result
    - name: Keep the result
      ansible.builtin.copy:
        content: "{{ result | to_json }}"
        dest: "{{ out }}"
      check_mode: false
"""


def apply(
    cluster: HostSlurm, tmp: Path, users: list[dict[str, Any]], *, check: bool = False
) -> tuple[int, dict[str, Any], str]:
    """Run the module through ansible-playbook; returns (rc, module result, output)."""
    play = tmp / "play.yml"
    play.write_text(PLAY)
    out = tmp / "result.json"
    out.unlink(missing_ok=True)
    extra = {
        "acct": {
            "cluster": CLUSTER,
            "accounts": [{"name": SERVICES, "qos": ["normal"], "default_qos": "normal"}],
            "users": users,
            "purge_users": False,
        },
        "out": str(out),
    }
    (tmp / "vars.json").write_text(json.dumps(extra))
    (tmp / "ansible.cfg").write_text("[defaults]\n")  # not the repository's: no roles, no inventory
    argv = [ANSIBLE_PLAYBOOK, "-i", "localhost,", str(play), "-e", f"@{tmp / 'vars.json'}"]
    argv += ["-e", f"ansible_python_interpreter={sys.executable}"]
    if check:
        argv.append("--check")
    env = cluster.env | {
        "ANSIBLE_LIBRARY": str(REPO / "roles" / "slurm" / "library"),
        "ANSIBLE_CONFIG": str(tmp / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "0",
    }
    proc = cluster.run(argv, env=env, check=False, timeout=180)
    result = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, result, proc.stdout + proc.stderr


def admin_level(cluster: HostSlurm, user: str) -> str:
    return cluster.run(["sacctmgr", "-n", "-P", "show", "user", user, "format=adminlevel"]).stdout.strip()


def rest_cancel(cluster: HostSlurm, user: str, job_id: int) -> tuple[int, str]:
    request = urllib.request.Request(
        f"{cluster.restd_url}{API}/job/{job_id}", method="DELETE", headers=cluster.rest_headers(user)
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read().decode()
            errors = json.loads(body or "{}").get("errors") or []
            return (500 if errors else response.status), body
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def cluster(host_slurm: HostSlurm) -> Iterator[HostSlurm]:
    try:
        yield host_slurm
    finally:
        host_slurm.run(["sacctmgr", "-i", "modify", "user", "where", f"name={OPERATOR}", "set", "AdminLevel=None"])
        host_slurm.run(
            ["sacctmgr", "-i", "delete", "user", "where", f"name={OPERATOR}", f"account={SERVICES}"], check=False
        )
        host_slurm.run(["sacctmgr", "-i", "delete", "account", SERVICES], check=False)
        host_slurm.run(["scancel", "-u", "alice"], check=False)


def test_admin_level_is_applied_idempotent_and_what_slurm_checks(cluster: HostSlurm, tmp_path: Path) -> None:
    job = cluster.sbatch("alice", "sleep 300", f"--account={ACCOUNT}")
    code, body = rest_cancel(cluster, OPERATOR, job)
    assert code != 200, f"dave (no admin level) cancelled alice's job: {body}"
    assert cluster.job_state(job) in ("PENDING", "RUNNING", "CONFIGURING")

    operator = [{"name": OPERATOR, "account": SERVICES, "admin_level": "Operator"}]
    rc, result, out = apply(cluster, tmp_path, operator, check=True)
    assert rc == 0, out
    assert result["changed"] and ["sacctmgr", "-i", "modify", "user", "where", f"name={OPERATOR}", "set",
                                  "AdminLevel=Operator"] in result["commands"]  # fmt: skip
    assert admin_level(cluster, OPERATOR) == "None", "check mode must not write"

    rc, result, out = apply(cluster, tmp_path, operator)
    assert rc == 0 and result["changed"], out
    assert result["diff"]["after"]["admin_level"] == {OPERATOR: "Operator"}
    assert admin_level(cluster, OPERATOR) == "Operator"

    rc, result, out = apply(cluster, tmp_path, operator)
    assert rc == 0 and not result["changed"], f"second run changed something: {result.get('commands')}"

    code, body = rest_cancel(cluster, OPERATOR, job)
    assert code == 200, body
    assert cluster.wait_job(job, timeout=60) == "CANCELLED"


def test_a_bad_admin_level_fails_naming_the_user_and_writes_nothing(cluster: HostSlurm, tmp_path: Path) -> None:
    users = [{"name": OPERATOR, "account": SERVICES, "admin_level": "root"}]
    rc, _, out = apply(cluster, tmp_path, users)
    assert rc != 0
    assert f"users[0] ({OPERATOR}): admin_level must be one of None, Operator, Administrator" in out
    assert SERVICES not in cluster.run(["sacctmgr", "-n", "-P", "show", "account", "format=account"]).stdout
