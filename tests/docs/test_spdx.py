# SPDX-License-Identifier: GPL-3.0-or-later
"""One license for the project (issue 28): GPL-3.0-or-later, in LICENSE, the pyproject files and an SPDX line at the top
of every Python file (the first line, or the second after a ``#!`` line).

GPL-3.0-or-later because the Ansible modules and plugins in roles/ and plugins/ import ansible-core, which is
GPL-3.0-or-later, so those files must be GPL-compatible anyway; one license for the whole tree instead of two."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPDX = "# SPDX-License-Identifier: GPL-3.0-or-later"
LICENSE = "GPL-3.0-or-later"


def python_files() -> list[Path]:
    """Every Python file of the repository, new ones not yet committed included (not what git ignores)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.py"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    return sorted(REPO / name for name in set(listed.split("\0")) if name and (REPO / name).is_file())


def header_problem(path: Path) -> str | None:
    lines = path.read_text().splitlines()
    head = lines[1:2] if lines[:1] and lines[0].startswith("#!") else lines[:1]
    if head != [SPDX]:
        return "no SPDX line at the top"
    if sum(line.startswith("# SPDX-License-Identifier") for line in lines) != 1:
        return "more than one SPDX line"
    return None


def test_every_python_file_starts_with_the_spdx_line() -> None:
    files = python_files()
    assert len(files) > 100, "git ls-files found too few files"
    wrong = [f"{path.relative_to(REPO)}: {problem}" for path in files if (problem := header_problem(path))]
    assert not wrong, f"add `{SPDX}` as the first line (after a #! line):\n" + "\n".join(wrong)


def test_a_missing_or_second_header_is_found(tmp_path: Path) -> None:
    cases = {
        "good.py": f'{SPDX}\n"""Doc."""\n',
        "script.py": f'#!/usr/bin/env python3\n{SPDX}\n"""Doc."""\n',
        "none.py": '"""Doc."""\n',
        "late.py": f'"""Doc."""\n{SPDX}\n',
        "other.py": "# SPDX-License-Identifier: Apache-2.0\n",
        "twice.py": f"{SPDX}\n# SPDX-License-Identifier: MIT\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    found = {name: header_problem(tmp_path / name) for name in cases}
    assert found == {
        "good.py": None,
        "script.py": None,
        "none.py": "no SPDX line at the top",
        "late.py": "no SPDX line at the top",
        "other.py": "no SPDX line at the top",
        "twice.py": "more than one SPDX line",
    }


def test_license_file_is_the_gpl_version_3() -> None:
    text = (REPO / "LICENSE").read_text()
    assert text.lstrip().startswith("GNU GENERAL PUBLIC LICENSE\n                       Version 3, 29 June 2007")
    assert "END OF TERMS AND CONDITIONS" in text and "How to Apply These Terms to Your New Programs" in text


def test_every_pyproject_says_the_same_license() -> None:
    for name in ("pyproject.toml", "packaging/node/pyproject.toml", "packaging/portal/pyproject.toml"):
        project = tomllib.loads((REPO / name).read_text())["project"]
        assert project["license"] == LICENSE, name
