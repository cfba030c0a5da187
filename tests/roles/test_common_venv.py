# SPDX-License-Identifier: GPL-3.0-or-later
"""Role common's ``venv`` entry point (roles/common/tasks/venv.yml), for real on this host with a local connection:
a virtualenv made by another Python (pyvenv.cfg of Debian 12's 3.11 after the move to 3.13, as the upgrade rehearsal
found the portal's) is removed so that its role builds it again; one of this host's /usr/bin/python3, and a missing
one, are left alone and nothing is reported changed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env


def run_venv_tasks(tmp_path: Path, venv: Path) -> str:
    playbook = tmp_path / "venv.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role: {name: common, tasks_from: venv}\n"
        f"      vars: {{common_venv_paths: [{json.dumps(str(venv))}]}}\n"
    )
    variables = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    argv = [_ansible_bin("ansible-playbook"), str(playbook), "-i", "localhost,", "-e", json.dumps(variables)]
    env = ansible_env()
    run = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return run.stdout


def host_python() -> str:
    out = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout.strip()


def make_venv(path: Path, version: str) -> Path:
    (path / "lib" / "python3.x" / "site-packages").mkdir(parents=True)
    (path / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {version}\n")
    return path


def test_a_virtualenv_of_another_python_is_removed(tmp_path: Path) -> None:
    old = make_venv(tmp_path / "old", "3.9.2")  # never this host's /usr/bin/python3 (Debian 12: 3.11)
    out = run_venv_tasks(tmp_path, old)
    assert not old.exists() and "changed=1" in out, out[-1500:]


def test_a_virtualenv_of_this_python_and_a_missing_one_are_left_alone(tmp_path: Path) -> None:
    same = make_venv(tmp_path / "same", host_python())
    out = run_venv_tasks(tmp_path, same)
    assert (same / "pyvenv.cfg").is_file() and "changed=0" in out, out[-1500:]
    out = run_venv_tasks(tmp_path, tmp_path / "missing")
    assert not (tmp_path / "missing").exists() and "changed=0" in out, out[-1500:]
