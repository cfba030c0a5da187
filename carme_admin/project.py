# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the Carme project (playbooks, roles, ansible.cfg) lives."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

PROJECT_ENV = "CARME_PROJECT_DIR"
MARKERS = ("site.yml", "ansible.cfg")


def is_project_dir(path: Path) -> bool:
    return all((path / marker).is_file() for marker in MARKERS)


def find_project_dir(cwd: Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """``$CARME_PROJECT_DIR``, else the first directory from ``cwd`` upwards holding site.yml and
    ansible.cfg, else the directory above the installed package (an editable install's checkout)."""
    env = os.environ if env is None else env
    explicit = env.get(PROJECT_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser().resolve()
    start = (cwd or Path.cwd()).resolve()
    for candidate in (start, *start.parents):
        if is_project_dir(candidate):
            return candidate
    return Path(__file__).resolve().parents[1]
