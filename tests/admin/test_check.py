# SPDX-License-Identifier: GPL-3.0-or-later
"""`carme check`: the findings from canned ansible-runner events, and real runs of playbooks/check.yml on this machine
(ansible_connection=local, no SSH) with faults that need no change to the host: names that do not resolve, an absurd
disk threshold, a GPU node without nvidia-smi, a become user that does not exist, a negative clock-skew limit, and an
unreachable SSH host (a TEST-NET address)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from carme_admin import check
from tests.roles.harness import REPO_ROOT


def _event(kind: str, host: str, res: dict[str, Any], **data: Any) -> dict[str, Any]:
    return {"event": kind, "event_data": {"host": host, "task": data.pop("task", "t"), "res": res, **data}}


def _report(sudo: bool, *lines: str) -> dict[str, Any]:
    error = "" if sudo else "Missing sudo password"
    return {"carme_check": {"sudo": str(sudo), "sudo_error": error, "lines": list(lines)}}


RESOLVE_LINE = "problem resolve node2 does not resolve"
CANNED = [
    _event("runner_on_start", "head", {}),
    _event("runner_on_unreachable", "gone", {"msg": "Failed to connect to the host via ssh: Connection timed out"}),
    _event("runner_on_ok", "head", _report(True, "info clock_skew_s 0", "info cgroup v2")),
    _event("runner_on_failed", "node1", {"msg": "Missing sudo password"}, ignore_errors=True),
    _event("runner_on_ok", "node1", _report(False, "info cgroup v1", "problem clock clock is 600 s off", RESOLVE_LINE)),
    _event("runner_on_failed", "node1", {"msg": "2 problems"}, task="No problems on this host"),
    _event("runner_on_failed", "odd", {"msg": "/usr/bin/python3: not found"}, task="Reach the host over SSH"),
]


def test_findings_from_canned_events() -> None:
    findings = check.Findings()
    for event in CANNED:
        findings.handle(event)
    named = {(p.host, p.check) for p in findings.problems}
    assert named == {("gone", "unreachable"), ("node1", "sudo"), ("node1", "clock"), ("node1", "resolve"),
                     ("odd", "error")}  # fmt: skip
    assert findings.hosts == ["head", "gone", "node1", "odd"]
    assert findings.info["head"] == {"clock_skew_s": "0", "cgroup": "v2"}
    out = io.StringIO()
    assert check.report(findings, out, as_json=False) == 1
    text = out.getvalue()
    assert "node1  clock" in text and "600 s off" in text and "fix: run a time service" in text
    assert "head: ok (cgroup v2)" in text
    assert "5 problem(s) on 3 of 4 host(s)" in text
    data = json.loads(_json(findings))
    assert not data["ok"] and data["hosts"]["gone"]["problems"][0]["check"] == "unreachable"


def _json(findings: check.Findings) -> str:
    out = io.StringIO()
    check.report(findings, out, as_json=True)
    return out.getvalue()


def test_no_problem_exits_0_and_no_host_exits_1() -> None:
    findings = check.Findings()
    findings.handle(_event("runner_on_ok", "head", _report(True, "info cgroup v2")))
    assert check.report(findings, io.StringIO(), as_json=False) == 0
    assert check.report(check.Findings(), io.StringIO(), as_json=False) == 1


def test_vault_args(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yml"
    hosts.write_text("all: {}\n")
    assert check.vault_args(hosts, None) == []
    (tmp_path / ".vault-pass").write_text("x\n")
    assert check.vault_args(hosts, None) == ["--vault-password-file", str(tmp_path / ".vault-pass")]
    assert check.vault_args(tmp_path, Path("/p"))[1] == "/p"


# -- real runs ---------------------------------------------------------------------------------------------------
def _project(tmp_path: Path) -> Path:
    """A throw-away project (its own artifacts) whose playbooks/ is the repository's."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "site.yml").write_text("---\n[]\n")
    shutil.copy(REPO_ROOT / "ansible.cfg", project / "ansible.cfg")
    (project / "playbooks").symlink_to(REPO_ROOT / "playbooks")
    return project


def _run(project: Path, inventory: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any], str]:
    path = project / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    argv = [sys.executable, "-m", "carme_admin", "check", "-i", str(path), "--json", *extra]
    env = {**os.environ, "CARME_PROJECT_DIR": str(project)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, check=False)
    return done.returncode, json.loads(done.stdout or "{}"), done.stderr


def _local(**hostvars: Any) -> dict[str, Any]:
    return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **hostvars}


@pytest.mark.slow
def test_check_names_each_injected_fault(tmp_path: Path) -> None:
    inventory = {"all": {
        "hosts": {
            "localhost": _local(carme_check_min_free_mb={"/var": 10**9, "/home": 1}),
            "gpu-without-driver.invalid": _local(),
            "nosudo": _local(ansible_become_user="carme-no-such-user"),
            "skewed": _local(carme_check_max_clock_skew_s=-1, carme_check_require_cgroup_v2=True),
            "gone": {"ansible_connection": "ssh", "ansible_host": "192.0.2.1", "ansible_ssh_timeout": 2},
        },
        "vars": {"slurm_node_groups": [{"name": "gpu", "hosts": ["gpu-without-driver.invalid"], "gpus": 1}]},
    }}  # fmt: skip
    rc, data, stderr = _run(_project(tmp_path), inventory)
    assert rc == 1, stderr[-3000:]
    named = {host: {p["check"]: p["detail"] for p in entry["problems"]} for host, entry in data["hosts"].items()}
    assert "unreachable" in named["gone"]
    assert "/var has" in named["localhost"]["disk"]
    assert "nvidia-smi not found" in named["gpu-without-driver.invalid"]["nvidia"]
    assert "sudo" in named["nosudo"]
    assert "off the controller's" in named["skewed"]["clock"]
    v2 = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True).stdout.strip()
    assert ("cgroup" in named["skewed"]) is (v2 != "cgroup2fs")
    for host in ("localhost", "nosudo", "skewed", "gpu-without-driver.invalid"):  # names not resolving, seen everywhere
        unresolved = named[host]["resolve"].partition("do not resolve here: ")[2].split()
        assert sorted(unresolved) == ["gone", "gpu-without-driver.invalid", "nosudo", "skewed"]
    assert "nvidia" not in named["localhost"] and "sudo" not in named["localhost"]


@pytest.mark.slow
def test_check_passes_a_healthy_host(tmp_path: Path) -> None:
    inventory = {"all": {"hosts": {"localhost": _local(carme_check_min_free_mb={"/var": 1, "/home": 1})}}}
    rc, data, stderr = _run(_project(tmp_path), inventory)
    assert rc == 0, json.dumps(data) + stderr[-3000:]
    assert data["ok"] and data["hosts"]["localhost"]["info"]["cgroup"] in ("v1", "v2")
