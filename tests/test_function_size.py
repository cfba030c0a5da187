# SPDX-License-Identifier: GPL-3.0-or-later
"""No function over 60 lines in the benches, the test fixtures and the browser tests (issue 28)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("bench", "tests/fixtures", "tests/e2e")
MAX_LINES = 60


def long_functions(path: Path, root: Path = REPO) -> list[str]:
    """``path:line name (N lines)`` for each function (nested ones too) longer than MAX_LINES, counted from its
    ``def`` line to its last line; ``path`` named relative to ``root``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_LINES:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_function_over_60_lines(folder: str) -> None:
    files = sorted((REPO / folder).rglob("*.py"))
    assert files, f"no Python files under {folder}"
    too_long = [entry for path in files for entry in long_functions(path)]
    assert not too_long, "split these into named functions:\n" + "\n".join(too_long)


def test_a_function_of_61_lines_is_found(tmp_path: Path) -> None:
    def function(name: str, body_lines: int) -> str:
        return f"def {name}():\n" + "".join(f"    x{i} = {i}\n" for i in range(body_lines)) + "\n\n"

    path = tmp_path / "long.py"
    path.write_text(function("fits", MAX_LINES - 1) + "async " + function("long", MAX_LINES))
    assert long_functions(path, tmp_path) == [f"long.py:{MAX_LINES + 3} long ({MAX_LINES + 1} lines)"]
