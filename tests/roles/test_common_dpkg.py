# SPDX-License-Identifier: GPL-3.0-or-later
"""Role common's first step (roles/common/tasks/dpkg.yml): a deploy killed while apt ran left packages half
installed; the next deploy finishes what dpkg had begun before any apt task (which would stop with "dpkg was
interrupted"). On this host with a local connection and ``tests/fixtures/bin/dpkg-standin`` as ``dpkg`` (no package
is touched): a report from ``dpkg --audit`` makes it run ``dpkg --configure -a`` once (changed), a clean one
nothing (changed=0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env

STANDIN = REPO_ROOT / "tests" / "fixtures" / "bin" / "dpkg-standin"


def run_dpkg_tasks(tmp_path: Path, audit: str) -> tuple[str, list[str]]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    if not (bindir / "dpkg").exists():
        (bindir / "dpkg").symlink_to(STANDIN)
    log = tmp_path / "dpkg.log"
    log.unlink(missing_ok=True)
    playbook = tmp_path / "dpkg.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role: {name: common, tasks_from: dpkg}\n"
    )
    variables = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    argv = [_ansible_bin("ansible-playbook"), str(playbook), "-i", "localhost,", "-e", json.dumps(variables)]
    env = ansible_env({"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "DPKG_STANDIN_AUDIT": audit,
                       "DPKG_STANDIN_LOG": str(log)})  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return run.stdout, log.read_text().splitlines() if log.is_file() else []


def test_half_installed_packages_are_configured_first(tmp_path: Path) -> None:
    report = "The following packages are only half configured, probably due to problems\nslurmd   SLURM compute node"
    out, calls = run_dpkg_tasks(tmp_path, report)
    assert calls == ["--force-confdef --force-confold --configure -a"] and "changed=1" in out, out[-1500:]


def test_a_clean_dpkg_is_left_alone(tmp_path: Path) -> None:
    out, calls = run_dpkg_tasks(tmp_path, "")
    assert calls == [] and "changed=0" in out, out[-1500:]
