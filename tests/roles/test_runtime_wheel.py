# SPDX-License-Identifier: GPL-3.0-or-later
"""The node's venv holds no admin code: the wheel roles/carme_runtime builds and installs carries carme_runtime only.
The portal's wheel (roles/carme_webui) carries webui and carme_runtime, no admin CLI either. No wheel declares a
console script whose module it lacks.

The tests build each wheel the way its role does, from the role's own task (the node: the files its ``cp`` copies,
then ``pip wheel --no-deps``; the portal: the task's shell script itself), so a change to what a role copies is
checked here too.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.roles.harness import REPO_ROOT

INSTALL_TASKS = REPO_ROOT / "roles" / "carme_runtime" / "tasks" / "install.yml"
PORTAL_INSTALL_TASKS = REPO_ROOT / "roles" / "carme_webui" / "tasks" / "install.yml"


def _task(name: str, tasks_file: Path = INSTALL_TASKS) -> dict[str, Any]:
    tasks = yaml.safe_load(tasks_file.read_text(encoding="utf-8"))
    return next(t for t in tasks if t["name"] == name)


def _packages(wheel: zipfile.ZipFile) -> set[str]:
    return {n.split("/", 1)[0] for n in wheel.namelist() if not n.split("/", 1)[0].endswith(".dist-info")}


def _scripts(wheel: zipfile.ZipFile) -> dict[str, str]:
    """``console_scripts`` of the wheel: name -> ``module:function``."""
    entry_points = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    section = ""
    scripts = {}
    for line in wheel.read(entry_points).decode().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and section == "console_scripts":
            name, target = (part.strip() for part in line.split("=", 1))
            scripts[name] = target
    return scripts


def _dangling_scripts(wheel: zipfile.ZipFile) -> list[str]:
    """Scripts whose module is not in the wheel (pip would install a command that fails on import)."""
    names = set(wheel.namelist())
    return [
        f"{name} = {target}"
        for name, target in _scripts(wheel).items()
        if target.split(":")[0].replace(".", "/") + ".py" not in names
    ]


def _render(arg: str, build: Path) -> str:
    return arg.replace("{{ carme_runtime_source_dir }}", str(REPO_ROOT)).replace(
        "{{ __carme_runtime_build.path }}", str(build)
    )


@pytest.fixture(scope="module")
def node_wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    build = tmp_path_factory.mktemp("node-wheel")
    (build / "src").mkdir()
    copy = [_render(a, build) for a in _task("install | Copy the package sources to the build directory")[
        "ansible.builtin.command"
    ]["argv"]]
    subprocess.run(copy, check=True)
    wheel_argv = _task("install | Build the carme wheel on the controller")["ansible.builtin.command"]["argv"]
    argv = [sys.executable, *(_render(a, build) for a in wheel_argv[1:])]
    subprocess.run(argv, check=True, env={"PATH": "/usr/bin:/bin", "SOURCE_DATE_EPOCH": "315532800",
                                          "PYTHONDONTWRITEBYTECODE": "1"})
    wheels = sorted((build / "dist").glob("carme-*.whl"))
    assert len(wheels) == 1, wheels  # the role's find/assert expects exactly one carme-*.whl
    return zipfile.ZipFile(wheels[0])


@pytest.fixture(scope="module")
def portal_wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("portal-wheel")
    task = _task("install | Build the wheel on the controller", PORTAL_INSTALL_TASKS)
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), "SRC": str(REPO_ROOT), "PY": sys.executable}
    assert set(task["environment"]) == {"OUT", "SRC", "PY"}  # the script's inputs, set here as the role sets them
    proc = subprocess.run(
        ["/bin/bash", "-c", task["ansible.builtin.shell"]["cmd"]], env=env, capture_output=True, text=True, check=True
    )
    wheel = Path(proc.stdout.splitlines()[-1])  # the role copies the last line's wheel
    assert wheel.parent == out / "dist" and len(list(wheel.parent.glob("*.whl"))) == 1
    return zipfile.ZipFile(wheel)


def test_node_wheel_has_no_admin_or_portal_code(node_wheel: zipfile.ZipFile) -> None:
    names = node_wheel.namelist()
    packages = _packages(node_wheel)
    assert packages == {"carme_runtime"}
    assert "carme_runtime/hooks.py" in names and "carme_runtime/py.typed" in names
    assert not [n for n in names if "admin" in n.split("/")[0] or n.startswith("webui/")]


def test_node_wheel_scripts_are_the_runtime_ones(node_wheel: zipfile.ZipFile) -> None:
    scripts = _scripts(node_wheel)
    defaults = yaml.safe_load((REPO_ROOT / "roles" / "carme_runtime" / "defaults" / "main.yml").read_text())
    assert set(scripts) == set(defaults["carme_runtime_scripts"])  # the role links every one; `carme` is not among them
    assert not [t for t in scripts.values() if t.startswith("carme_admin")]
    assert _dangling_scripts(node_wheel) == []


def test_portal_wheel_has_the_portal_and_runtime_but_no_admin_code(portal_wheel: zipfile.ZipFile) -> None:
    names = portal_wheel.namelist()
    assert _packages(portal_wheel) == {"carme_runtime", "webui"}
    assert "webui/wsgi.py" in names and "carme_runtime/py.typed" in names
    assert any(n.startswith("webui/templates/") for n in names)
    assert any(n.startswith("webui/migrations/") for n in names)
    assert not [n for n in names if n.startswith("carme_admin")]


def test_portal_wheel_declares_only_scripts_it_contains(portal_wheel: zipfile.ZipFile) -> None:
    scripts = _scripts(portal_wheel)
    assert "carme" not in scripts and not [t for t in scripts.values() if t.startswith("carme_admin")]
    assert _dangling_scripts(portal_wheel) == []
    assert scripts  # the runtime's (carme-quota etc.), whose modules it holds


def test_node_pyproject_agrees_with_the_root_one() -> None:
    root = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    node = tomllib.loads((REPO_ROOT / "packaging" / "node" / "pyproject.toml").read_text())["project"]
    assert (node["name"], node["version"], node["requires-python"]) == (
        root["name"],
        root["version"],
        root["requires-python"],
    )
    assert node["dependencies"] == root["dependencies"] == []  # the runtime is stdlib-only
    runtime_scripts = {k: v for k, v in root["scripts"].items() if v.startswith("carme_runtime.")}
    assert node["scripts"] == runtime_scripts
    assert root["scripts"]["carme"].startswith("carme_admin.")


def test_portal_pyproject_agrees_with_the_root_one() -> None:
    root = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    portal = tomllib.loads((REPO_ROOT / "packaging" / "portal" / "pyproject.toml").read_text())
    keys = ("name", "version", "requires-python", "dependencies")
    assert [portal["project"][k] for k in keys] == [root["project"][k] for k in keys]
    # the role installs the wheel with [webui]: the same pins as `make venv` (pip install -e '.[webui,...]')
    assert portal["project"]["optional-dependencies"] == {"webui": root["project"]["optional-dependencies"]["webui"]}
    runtime_scripts = {k: v for k, v in root["project"]["scripts"].items() if v.startswith("carme_runtime.")}
    assert portal["project"]["scripts"] == runtime_scripts
    assert portal["tool"]["setuptools"]["package-data"] == root["tool"]["setuptools"]["package-data"]
    assert "carme_admin*" not in portal["tool"]["setuptools"]["packages"]["find"]["include"]
