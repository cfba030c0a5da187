# SPDX-License-Identifier: GPL-3.0-or-later
"""`carme deploy` for real: ansible-runner runs a tiny playbook on localhost (ansible_connection=local)
in a throw-away project directory with its own ansible.cfg, inventory and site.yml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ansible_runner")

pytestmark = pytest.mark.slow

ANSIBLE_CFG = """\
[defaults]
inventory = inventory/hosts.yml
retry_files_enabled = false
gathering = explicit
"""

INVENTORY = f"""\
all:
  hosts:
    alpha:
    beta:
  vars:
    ansible_connection: local
    ansible_python_interpreter: {sys.executable}
"""

SITE_OK = """\
---
- name: Tiny site
  hosts: all
  gather_facts: false
  tasks:
    - name: Write a marker
      ansible.builtin.copy:
        dest: "{{ playbook_dir }}/out/{{ inventory_hostname }}.txt"
        content: "{{ greeting | default('hello') }}\\n"
        mode: "0600"
    - name: Only on alpha
      ansible.builtin.debug:
        msg: alpha only
      when: inventory_hostname == 'alpha'
"""

SITE_FAIL = """\
---
- name: Tiny failing site
  hosts: all
  gather_facts: false
  tasks:
    - name: Report the disk
      ansible.builtin.command: sh -c 'echo checking; echo "disk /srv is full" >&2; exit 3'
      changed_when: false
      when: inventory_hostname == 'beta'
    - name: Continue on the others
      ansible.builtin.command: "true"
      changed_when: true
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "inventory").mkdir(parents=True)
    (root / "out").mkdir()
    (root / "ansible.cfg").write_text(ANSIBLE_CFG, encoding="utf-8")
    (root / "inventory" / "hosts.yml").write_text(INVENTORY, encoding="utf-8")
    (root / "site.yml").write_text(SITE_OK, encoding="utf-8")
    (root / "fail.yml").write_text(SITE_FAIL, encoding="utf-8")
    return root


def carme(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would, from a subdirectory of the project (discovery walks up)."""
    env = {k: v for k, v in os.environ.items() if k != "CARME_PROJECT_DIR" and not k.startswith("ANSIBLE_")}
    cwd = project / "inventory"
    return subprocess.run(
        [sys.executable, "-m", "carme_admin", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_deploy_succeeds_and_reports_changes(project: Path) -> None:
    proc = carme(project, "deploy", "-e", "greeting=hi there")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "PLAY Tiny site" in lines
    assert "[  1 done] Write a marker  (alpha, beta)  changed: alpha, beta" in lines
    assert "[  2 done] Only on alpha  (alpha, beta)  skipped: beta" in lines
    assert "PLAY RECAP" in lines
    assert "changed=2 failed=0 unreachable=0 tasks=2 status=successful rc=0" in lines
    artifacts = Path(lines[-1].removeprefix("artifacts: "))
    assert artifacts.parent == project / ".artifacts" / "runner" / "artifacts"
    assert (artifacts / "job_events").is_dir()
    assert (project / "out" / "alpha.txt").read_text(encoding="utf-8") == "hi there\n"
    # extra vars went on the command line, never into env/ files
    assert not (project / ".artifacts" / "runner" / "env").exists()

    again = carme(project, "deploy", "-e", "greeting=hi there", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    stats = json.loads(again.stdout)  # stdout is only the JSON; progress went to stderr
    assert stats["ok"] is True
    assert stats["changed"] == 0  # idempotent
    assert stats["failed"] == 0
    assert stats["hosts"]["beta"]["skipped"] == 1
    assert "PLAY RECAP" in again.stderr


def test_deploy_json_counts_changes(project: Path) -> None:
    proc = carme(project, "deploy", "--json", "--limit", "alpha")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["changed"] == 1
    assert list(stats["hosts"]) == ["alpha"]
    assert stats["tasks_done"] == 2


def test_check_mode_changes_nothing(project: Path) -> None:
    proc = carme(project, "deploy", "--check", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["changed"] == 2  # would change
    assert not (project / "out" / "alpha.txt").exists()


def test_deploy_failure_names_task_host_and_message(project: Path) -> None:
    proc = carme(project, "deploy", "--playbook", "fail.yml")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    failed = [line for line in lines if line.startswith("FAILED")]
    assert failed == ["FAILED  task=Report the disk host=beta: non-zero return code: disk /srv is full"]
    assert "[  2 done] Continue on the others  (alpha)  changed: alpha" in lines
    assert "changed=1 failed=1 unreachable=0 tasks=2 status=failed rc=2" in lines


def test_deploy_failure_json(project: Path) -> None:
    proc = carme(project, "deploy", "--playbook", "fail.yml", "--json")
    assert proc.returncode == 1
    stats = json.loads(proc.stdout)
    assert stats["ok"] is False
    assert stats["failed"] == 1
    assert stats["failures"] == [
        {
            "task": "Report the disk",
            "host": "beta",
            "msg": "non-zero return code: disk /srv is full",
            "unreachable": False,
        }
    ]


def test_broken_playbook_shows_ansibles_error(project: Path) -> None:
    (project / "broken.yml").write_text("- name: Broken\n  hsts: all\n  tasks: []\n", encoding="utf-8")
    proc = carme(project, "deploy", "--playbook", "broken.yml")
    assert proc.returncode == 1
    assert "ansible-playbook stopped before the play recap" in proc.stdout
    assert "hsts" in proc.stdout
