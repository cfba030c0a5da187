# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the carme_upgrade_os role: apt sources moved to another Debian release, the Debian major version of
/etc/debian_version, and the parts of a backup set a host holds (carme_backup's own reading of manifest.json).
Pure functions (tests/roles/test_upgrade_os.py)."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_BACKUP_FILTERS = Path(__file__).resolve().parents[2] / "carme_backup" / "filter_plugins" / "carme_backup_filters.py"
#: Debian codename -> major version
RELEASES = {"bookworm": "12", "trixie": "13", "forky": "14"}
_ONE_LINE = re.compile(r"^(\s*deb(?:-src)?\s+(?:\[[^\]]*\]\s+)?\S+\s+)(\S+)(.*)$")


def _backup_filters() -> Any:
    spec = importlib.util.spec_from_file_location("carme_backup_filters", _BACKUP_FILTERS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _suite(suite: str, old: str, new: str) -> str:
    """``bookworm``, ``bookworm-updates``, ``bookworm-security``, ``bookworm-backports`` -> the same of ``new``."""
    if suite == old or suite.startswith((old + "-", old + "/")):
        return new + suite[len(old) :]
    return suite


def carme_upgrade_os_sources(text: str, old: str, new: str) -> str:
    """apt sources moved from release ``old`` to ``new``: the suite of each one-line ``deb``/``deb-src`` entry and the
    ``Suites:`` of each deb822 paragraph (continuation lines too); URIs, options, comments and the rest unchanged."""
    out: list[str] = []
    in_suites = False
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        end = line[len(body) :]
        match = _ONE_LINE.match(body)
        if match:
            body = match.group(1) + _suite(match.group(2), old, new) + match.group(3)
            in_suites = False
        elif re.match(r"^Suites:", body, re.IGNORECASE) or (in_suites and body[:1] in (" ", "\t") and body.strip()):
            head, _, rest = body.partition(":") if not body[:1].isspace() else ("", "", body)
            tokens = re.split(r"(\s+)", rest)
            rest = "".join(_suite(t, old, new) if t and not t.isspace() else t for t in tokens)
            body = f"{head}:{rest}" if head else rest
            in_suites = True
        else:
            in_suites = False
        out.append(body + end)
    return "".join(out)


def carme_upgrade_os_major(debian_version: str) -> str:
    """The Debian major version from /etc/debian_version: ``12.15`` -> ``12``, ``trixie/sid`` -> ``13``, ``''``
    when unknown."""
    value = debian_version.strip()
    if value[:1].isdigit():
        return value.split(".", 1)[0]
    return RELEASES.get(value.split("/", 1)[0], "")


def carme_upgrade_os_host_parts(manifest: Mapping[str, Any], host: str) -> list[dict[str, Any]]:
    """The files of ``host``'s parts in a complete set (carme_backup_host_parts: refuses an incomplete manifest)."""
    parts: list[dict[str, Any]] = _backup_filters().carme_backup_host_parts(manifest, host)
    return parts


def carme_upgrade_os_db_name(database: str, set_id: str) -> str:
    """The name the old accounting database is kept under: ``<database>_pre_upgrade_<set>``, the set id's characters
    other than letters, digits and ``_`` as ``_``, at most 64 characters (MariaDB's limit)."""
    name = f"{database}_pre_upgrade_{re.sub(r'[^A-Za-z0-9_]', '_', set_id)}"
    if len(name) > 64:
        raise ValueError(f"database name {name!r} is longer than 64 characters: use a shorter set id")
    return name


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "carme_upgrade_os_sources": carme_upgrade_os_sources,
            "carme_upgrade_os_major": carme_upgrade_os_major,
            "carme_upgrade_os_host_parts": carme_upgrade_os_host_parts,
            "carme_upgrade_os_db_name": carme_upgrade_os_db_name,
        }
