# SPDX-License-Identifier: GPL-3.0-or-later
"""Render the slurm role's configuration files for an inventory, through real ansible, without a cluster; run a role's
module on localhost.

``render(inventory, out_dir)`` runs ``tests/roles/render.yml`` (which include_role's ``slurm`` with
``tasks_from: render``) with a local connection and fixed test secrets, so the output is stable enough for
golden files. Used by the golden-file tests, the host-level Slurm fixture and ``bench/bench_render.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_file(path: str | Path, name: str) -> ModuleType:
    """Import the Python file ``path`` (relative to the repository) as module ``name``: role plugins, libraries and
    scripts are in no package. Registered in sys.modules (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
RENDER_PLAYBOOK = REPO_ROOT / "tests" / "roles" / "render.yml"
CONFIG_FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "slurmdbd.conf")

#: Fixed, obviously fake secrets so rendered files are byte-stable. Never used outside tests.
TEST_SECRETS: dict[str, str] = {
    "munge_key": "test-munge-key-" + "0" * 32,
    "slurm_dbd_storage_password": "test-slurmdbd-password-0123456789",
}


def _ansible_bin(name: str) -> str:
    """The ansible executable next to the running interpreter (the project venv), else from PATH."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


def ansible_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for ansible runs from tests: the repo's ansible.cfg, no fact cache, no colour."""
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
            "ANSIBLE_ROLES_PATH": str(REPO_ROOT / "roles"),
            "ANSIBLE_CACHE_PLUGIN": "memory",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_HOST_KEY_CHECKING": "0",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONWARNINGS": "ignore",
        }
    )
    if extra:
        env.update(extra)
    return env


@dataclass(frozen=True)
class RenderResult:
    out_dir: Path
    returncode: int
    output: str
    wall_s: float
    #: Duration of the render play itself (from the json callback), when ``json_output`` was requested.
    play_s: float | None = None

    def text(self, name: str) -> str:
        return (self.out_dir / name).read_text()

    def check(self) -> RenderResult:
        if self.returncode != 0:
            raise RuntimeError(f"render failed (rc={self.returncode}):\n{self.output[-6000:]}")
        return self


@dataclass(frozen=True)
class ModuleRun:
    rc: int
    result: dict[str, Any]  # the module's result as Ansible reports it ({} when there is none)
    output: str  # stdout + stderr


def run_module(
    role: str, module: str, args: Mapping[str, Any], *, check: bool = False, env: Mapping[str, str] | None = None
) -> ModuleRun:
    """Run ``module`` from ``roles/<role>/library`` on localhost through real Ansible (ad hoc, JSON callback)."""
    role_dir = REPO_ROOT / "roles" / role
    extra = {
        "ANSIBLE_LIBRARY": str(role_dir / "library"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
    }
    if (role_dir / "module_utils").is_dir():
        extra["ANSIBLE_MODULE_UTILS"] = str(role_dir / "module_utils")
    argv = [_ansible_bin("ansible"), "localhost", "-c", "local", "-m", module, "-a", json.dumps(dict(args))]
    argv += ["-e", f"ansible_python_interpreter={sys.executable}"]
    if check:
        argv.append("--check")
    proc = subprocess.run(
        argv,
        cwd=REPO_ROOT,
        env=ansible_env({**extra, **(env or {})}),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    result: dict[str, Any] = {}
    if "{" in proc.stdout:
        data = json.loads(proc.stdout[proc.stdout.index("{") :])
        result = data["plays"][0]["tasks"][0]["hosts"].get("localhost", {})
    return ModuleRun(proc.returncode, result, proc.stdout + proc.stderr)


def _play_seconds(stdout: str) -> float | None:
    try:
        data = json.loads(stdout[stdout.index("{") :])
        duration = data["plays"][0]["play"]["duration"]
        start = datetime.fromisoformat(duration["start"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(duration["end"].replace("Z", "+00:00"))
    except (ValueError, KeyError, IndexError):
        return None
    return (end - start).total_seconds()


def render(
    inventory: Path,
    out_dir: Path,
    extra_vars: Mapping[str, Any] | None = None,
    *,
    secrets: Mapping[str, str] | None = None,
    cgroup_plugin: str = "cgroup/v1",
    ansible_args: Sequence[str] = (),
    json_output: bool = False,
    timeout: float = 600,
    playbook: Path = RENDER_PLAYBOOK,
) -> RenderResult:
    """Render the four Slurm files for ``inventory`` into ``out_dir`` (or what ``playbook`` renders, e.g.
    ``tests/roles/render_beegfs.yml``); never raises on a failed run."""
    variables: dict[str, Any] = {
        "out_dir": str(out_dir),
        "ansible_connection": "local",
        "slurm_cgroup_plugin": cgroup_plugin,
        **(TEST_SECRETS if secrets is None else dict(secrets)),
        **(extra_vars or {}),
    }
    env_extra = {"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"} if json_output else None
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="render-vars-") as fh:
        json.dump(variables, fh)
        fh.flush()
        argv = [
            _ansible_bin("ansible-playbook"),
            str(playbook),
            "-i",
            str(inventory),
            "-e",
            f"@{fh.name}",
            *ansible_args,
        ]
        start = time.perf_counter()
        proc = subprocess.run(
            argv,
            cwd=REPO_ROOT,
            env=ansible_env(env_extra),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        wall = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    return RenderResult(
        out_dir=Path(out_dir),
        returncode=proc.returncode,
        output=output,
        wall_s=wall,
        play_s=_play_seconds(proc.stdout) if json_output else None,
    )
