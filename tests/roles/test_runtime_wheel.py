"""The node's venv holds no admin code: the wheel roles/carme_runtime builds and installs carries carme_runtime only.

The test builds the wheel the way the role does, from the role's own task arguments (the files its ``cp`` copies,
then ``pip wheel --no-deps``), so a change to what the role copies is checked here too.
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


def _task(name: str) -> dict[str, Any]:
    tasks = yaml.safe_load(INSTALL_TASKS.read_text(encoding="utf-8"))
    return next(t for t in tasks if t["name"] == name)


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


def test_node_wheel_has_no_admin_or_portal_code(node_wheel: zipfile.ZipFile) -> None:
    names = node_wheel.namelist()
    packages = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert packages == {"carme_runtime"}
    assert "carme_runtime/hooks.py" in names and "carme_runtime/py.typed" in names
    assert not [n for n in names if "admin" in n.split("/")[0] or n.startswith("webui/")]


def test_node_wheel_scripts_are_the_runtime_ones(node_wheel: zipfile.ZipFile) -> None:
    entry_points = next(n for n in node_wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    text = node_wheel.read(entry_points).decode()
    scripts = {line.split("=")[0].strip() for line in text.splitlines() if "=" in line}
    defaults = yaml.safe_load((REPO_ROOT / "roles" / "carme_runtime" / "defaults" / "main.yml").read_text())
    assert scripts == set(defaults["carme_runtime_scripts"])  # the role links every one; `carme` is not among them
    assert "carme_admin" not in text


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
