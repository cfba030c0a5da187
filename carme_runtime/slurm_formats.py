# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers for Slurm command output, and the session comment format.

pyslurm cannot be used (no PyPI build for Slurm 22.05), so the runtime reads ``-P`` (parsable) output of the CLI
tools (``--json`` records go through :mod:`carme_runtime.slurmrest`). Each parser takes text and returns plain
values, so it is tested against stored sample outputs in ``tests/runtime/data/``. The job state sets live in
:mod:`carme_runtime.job` (the epilog reads them without importing this module) and are re-exported here.
"""

from __future__ import annotations

import re

from carme_runtime.job import ACTIVE_STATES as ACTIVE_STATES
from carme_runtime.job import COMMENT_PREFIX as COMMENT_PREFIX
from carme_runtime.job import ENDED_STATES as ENDED_STATES
from carme_runtime.job import UNFINISHED_STATES as UNFINISHED_STATES


class SlurmParseError(ValueError):
    """Output of a Slurm command that does not have the expected shape."""


# --- session comment ------------------------------------------------------------------------------

_COMMENT_KEY_RE = re.compile(r"^[a-z_]+$")
_COMMENT_VALUE_RE = re.compile(r"^[A-Za-z0-9_.:/-]*$")


def format_comment(**fields: str | int) -> str:
    """``carme:v1;host=n1;port=8888;state=ready``. Values are restricted so the comment parses back."""
    parts = [COMMENT_PREFIX]
    for key, value in fields.items():
        sval = str(value)
        if not _COMMENT_KEY_RE.match(key) or not _COMMENT_VALUE_RE.match(sval):
            raise ValueError(f"comment field {key}={sval!r} has characters outside [A-Za-z0-9_.:/-]")
        parts.append(f"{key}={sval}")
    return ";".join(parts)


def parse_comment(comment: str) -> dict[str, str] | None:
    """Inverse of :func:`format_comment`; ``None`` when the comment is not a carme one."""
    parts = comment.strip().split(";")
    if not parts or parts[0] != COMMENT_PREFIX:
        return None
    out: dict[str, str] = {}
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if sep and _COMMENT_KEY_RE.match(key) and _COMMENT_VALUE_RE.match(value):
            out[key] = value
    return out


# --- sacctmgr -P ---------------------------------------------------------------------------------


def parse_parsable(text: str) -> list[dict[str, str]]:
    """``-P``/``-p`` output with a header line -> one dict per row (trailing ``|`` of ``-p`` tolerated)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    trailing = header[-1] == ""
    if trailing:
        header = header[:-1]
    rows = []
    for lineno, line in enumerate(lines[1:], 2):
        cells = line.split("|")
        if trailing and cells and cells[-1] == "":
            cells = cells[:-1]
        if len(cells) != len(header):
            raise SlurmParseError(f"line {lineno}: {len(cells)} fields, header has {len(header)}")
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


# --- TRES strings ---------------------------------------------------------------------------------


def parse_tres(tres: str) -> dict[str, str]:
    """``"billing=2,cpu=2,gres/gpu=2,mem=100M,node=1"`` -> ``{"cpu": "2", "gres/gpu": "2", ...}``."""
    out: dict[str, str] = {}
    for item in tres.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise SlurmParseError(f"bad TRES item {item!r} in {tres!r}")
        out[key] = value
    return out


def gpu_count_from_tres(tres: dict[str, str]) -> int:
    """GPUs in a TRES dict: ``gres/gpu`` if present, else the sum of typed ``gres/gpu:<type>`` entries."""
    if "gres/gpu" in tres:
        return int(tres["gres/gpu"])
    return sum(int(v) for k, v in tres.items() if k.startswith("gres/gpu:"))


_GRES_GPU_RE = re.compile(r"(?:^|[,;])(?:gres[:/])?gpu(?::([A-Za-z0-9_.-]+))?(?::(\d+))?(?=\(|,|;|$)")


def count_gpus(spec: str | None) -> int:
    """GPUs in a TRES string (``cpu=2,gres/gpu=2``, as :func:`gpu_count_from_tres` counts them) or a GRES string
    (``gpu:4``, ``gpu:a100:2(S:0-1)``, ``gres:gpu:1``, 24.11's ``gres/gpu:1``; an untyped ``gpu`` is one)."""
    if not spec:
        return 0
    if "gres/gpu" in spec and "=" in spec:
        return gpu_count_from_tres(parse_tres(spec))
    total = 0
    for m in _GRES_GPU_RE.finditer(spec):
        type_or_count, count = m.group(1), m.group(2)
        if count is not None:
            total += int(count)
        elif type_or_count is not None and type_or_count.isdigit():
            total += int(type_or_count)
        else:
            total += 1
    return total
