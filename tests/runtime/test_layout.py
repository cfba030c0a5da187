# SPDX-License-Identifier: GPL-3.0-or-later
"""The layout rules of carme_runtime and carme_admin (issue 28): no module over 400 lines, no function over 60 lines,
and carme_runtime imports nothing outside the standard library (it runs in every Slurm hook and job, installed
with no dependencies: ``dependencies = []`` in pyproject.toml)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("carme_runtime", "carme_admin")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules(package: str) -> list[Path]:
    files = sorted((REPO / package).rglob("*.py"))
    assert files, f"no modules in {package}"
    return files


def long_functions(path: Path, root: Path = REPO) -> list[str]:
    """``path:line name (N lines)`` of each function (nested ones and methods too) over MAX_FUNCTION_LINES, counted
    from its ``def`` line to its last line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def foreign_imports(path: Path, package: str, root: Path = REPO) -> list[str]:
    """``path:line module`` of each import (lazy and ``TYPE_CHECKING`` ones too) neither from the standard library
    nor from ``package`` itself."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue  # relative imports stay inside the package
        for name in names:
            top = name.split(".")[0]
            if top != package and top not in sys.stdlib_module_names:
                found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_over_400_lines(package: str) -> None:
    sizes = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in _modules(package)}
    too_long = [f"{path.relative_to(REPO)} ({n} lines)" for path, n in sizes.items() if n > MAX_MODULE_LINES]
    assert not too_long, "split these into cohesive modules:\n" + "\n".join(too_long)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_over_60_lines(package: str) -> None:
    too_long = [entry for path in _modules(package) for entry in long_functions(path)]
    assert not too_long, "split these into named functions:\n" + "\n".join(too_long)


def test_runtime_imports_only_the_standard_library() -> None:
    foreign = [entry for path in _modules("carme_runtime") for entry in foreign_imports(path, "carme_runtime")]
    assert not foreign, "carme_runtime must stay stdlib-only:\n" + "\n".join(foreign)


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    def function(head: str, lines: int) -> str:
        return head + "\n" + "".join(f"    x{i} = {i}\n" for i in range(lines - 1)) + "\n"

    text = (
        "import json\nimport yaml\nfrom spython.main import x\nfrom sample import y\n\n"
        + function("def fits():", MAX_FUNCTION_LINES)
        + function("async def long():", MAX_FUNCTION_LINES + 1)
        + "def lazy():\n    import flask.json\n"
    )
    path = tmp_path / "sample.py"
    path.write_text(text)
    lines = text.splitlines()
    long_at, lazy_at = lines.index("async def long():") + 1, lines.index("    import flask.json") + 1
    assert long_functions(path, tmp_path) == [f"sample.py:{long_at} long ({MAX_FUNCTION_LINES + 1} lines)"]
    assert foreign_imports(path, "sample", tmp_path) == [
        "sample.py:2 yaml",
        "sample.py:3 spython.main",
        f"sample.py:{lazy_at} flask.json",
    ]
