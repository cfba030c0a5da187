# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm hostlist syntax, both ways: ``gpu[01-03,07],cpu1`` <-> the host names.

The one implementation for the runtime (``squeue --json`` node lists), the portal (slurmrestd node lists) and the
slurm role's ``slurm_hostlist`` filter (slurm.conf node lists). The role reaches this file through
``roles/slurm/module_utils/carme_hostlist.py`` (a link), so it imports nothing but the standard library.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

#: what Slurm prints for a job without nodes
NO_NODES = frozenset({"", "(null)", "None assigned"})

_ITEM_RE = re.compile(r"[^,\[]+(?:\[[^\]]*\][^,]*)?")
_BRACKET_RE = re.compile(r"([^\[]*)\[([^\]]*)\](.*)")
_NAME_RE = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)(?P<suffix>\D*)$")


class HostlistError(ValueError):
    """A hostlist range that is not ``<digits>-<digits>``."""


def expand_hostlist(expr: str | None) -> list[str]:
    """Expand a Slurm hostlist: ``"gpu[01-03,07],cpu1"`` -> ``["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]``.

    Handles one bracket group per host name (what Slurm prints for ordinary node names); ``None``, ``""``,
    ``"(null)"`` and ``"None assigned"`` are no hosts.
    """
    if expr is None or expr in NO_NODES:
        return []
    hosts: list[str] = []
    for item in _ITEM_RE.findall(expr):
        m = _BRACKET_RE.fullmatch(item)
        if not m:
            if item:
                hosts.append(item)
            continue
        prefix, ranges, suffix = m.groups()
        for part in ranges.split(","):
            lo, sep, hi = part.partition("-")
            if not sep:
                hosts.append(f"{prefix}{lo}{suffix}")
                continue
            if not (lo.isdigit() and hi.isdigit()):
                raise HostlistError(f"bad hostlist range {part!r} in {expr!r}")
            width = len(lo)
            hosts.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1))
    return hosts


def compress_hostlist(names: Iterable[str]) -> str:
    """Compress host names into Slurm hostlist syntax: node001..node128 -> ``node[001-128]``.

    Names sharing a prefix, suffix and number width are folded into ranges; the output is sorted and stable,
    so a rendered file only changes when the set of hosts changes.
    """
    buckets: dict[tuple[str, str, int], set[int]] = {}
    plain: set[str] = set()
    for name in names:
        name = str(name)
        m = _NAME_RE.match(name)
        if not m:
            plain.add(name)
            continue
        num = m.group("num")
        buckets.setdefault((m.group("prefix"), m.group("suffix"), len(num)), set()).add(int(num))
    parts: list[str] = sorted(plain)
    for (prefix, suffix, width), nums in sorted(buckets.items()):
        ordered = sorted(nums)
        if len(ordered) == 1:
            parts.append(f"{prefix}{ordered[0]:0{width}d}{suffix}")
            continue
        ranges: list[str] = []
        start = prev = ordered[0]
        for n in [*ordered[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(ranges)}]{suffix}")
    return ",".join(parts)
