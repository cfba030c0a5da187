# SPDX-License-Identifier: GPL-3.0-or-later
"""Jinja2 filters for the slurm role: hostlist compression, config dictionary rendering, the usage carry-over.

``slurm_hostlist`` is carme_runtime's ``compress_hostlist`` (carme_runtime/hostlist.py), reached through the role's
``module_utils/carme_hostlist.py`` link as the role's modules reach carme_runtime code. A filter plugin runs on the
controller, where ``ansible.module_utils`` does not include a role's module_utils, so the file is loaded by path.
The ``slurm_usage_carryover*`` filters are carme_runtime/usage_carryover.py's, reached the same way.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _load(name: str) -> Any:
    path = Path(__file__).resolve().parent.parent / "module_utils" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"carme_slurm_role_{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hostlist = _load("carme_hostlist").compress_hostlist
#: this month's GPU-minutes carried over an upgrade (carme_runtime/usage_carryover.py; docs/upgrade.md)
_carryover = _load("carme_usage_carryover")
slurm_usage_carryover = _carryover.apply_carryover
slurm_usage_carryover_applied = _carryover.applied
slurm_usage_carryover_problems = _carryover.record_problems


def slurm_value(value: Any) -> str:
    """Render one slurm.conf value: booleans as YES/NO, lists joined with commas."""
    if value is True:
        return "YES"
    if value is False:
        return "NO"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def slurm_merge(defaults: Mapping[str, Any], overrides: Mapping[str, Any], omit_token: str) -> dict[str, Any]:
    """Merge a user dictionary over the defaults; a value equal to Ansible's omit token (or None) removes the key."""
    merged = dict(defaults)
    for key, value in overrides.items():
        if value is None or (isinstance(value, str) and value == omit_token):
            merged.pop(key, None)
        else:
            merged[key] = value
    return {k: v for k, v in merged.items() if not (isinstance(v, str) and v == omit_token) and v is not None}


def slurm_node_group_errors(groups: Any, all_hosts: Iterable[str]) -> list[str]:
    """Checks on slurm_node_groups that an argument spec cannot express. Returns messages naming the variable."""
    errors: list[str] = []
    if not isinstance(groups, list):
        return [f"slurm_node_groups must be a list, got {type(groups).__name__}"]
    known = set(all_hosts)
    seen_names: dict[str, int] = {}
    owner: dict[str, str] = {}
    for i, group in enumerate(groups):
        where = f"slurm_node_groups[{i}]"
        if not isinstance(group, Mapping):
            errors.append(f"{where} must be a mapping")
            continue
        name = group.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name or ""):
            errors.append(
                f"{where}.name is missing or not a valid name (letters, digits, underscore): {name!r}"
            )
            name = f"#{i}"
        elif name in seen_names:
            errors.append(f"{where}.name {name!r} is used twice (also slurm_node_groups[{seen_names[name]}])")
        else:
            seen_names[name] = i
        gpus = group.get("gpus", 0)
        if isinstance(gpus, bool) or not (
            isinstance(gpus, int) or (isinstance(gpus, str) and gpus.isdigit())
        ):
            errors.append(f"{where}.gpus must be a non-negative integer, got {gpus!r}")
        hosts = group.get("hosts")
        if not isinstance(hosts, list) or not hosts:
            errors.append(f"{where}.hosts must be a non-empty list of inventory hosts")
            continue
        for host in hosts:
            if host not in known:
                errors.append(f"{where}.hosts: {host!r} is not in the inventory")
            if host in owner and owner[host] != name:
                errors.append(
                    f"{where}.hosts: {host!r} is already in node group {owner[host]!r}; a host belongs to one group"
                )
            owner.setdefault(host, str(name))
    return errors


def _names(value: Any) -> list[str]:
    """A QOS list as sacctmgr takes it: a list, or a comma-separated string."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return []


def slurm_preemption_errors(qos: Any, preempt_type: str, preempt_mode: str) -> list[str]:
    """Checks on the preemption policy (slurm_qos ``Preempt`` lists, PreemptType/PreemptMode) that an argument spec
    cannot express. Returns messages naming the variable.

    A QOS never lists itself: its jobs would preempt each other, so one user's interactive session could end
    another's. Two QOS never preempt each other, and a Preempt list names only QOS declared in slurm_qos.
    """
    errors: list[str] = []
    if not isinstance(qos, list):
        return [f"slurm_qos must be a list, got {type(qos).__name__}"]
    declared = [q.get("name") for q in qos if isinstance(q, Mapping)]
    preempts: dict[str, list[str]] = {}
    for i, q in enumerate(qos):
        if not isinstance(q, Mapping) or "Preempt" not in q:
            continue
        name = str(q.get("name"))
        where = f"slurm_qos[{i}] ({name}).Preempt"
        targets = _names(q["Preempt"])
        preempts[name] = targets
        if targets and preempt_type != "preempt/qos":
            errors.append(f"{where} needs slurm_preempt_type: preempt/qos (it is {preempt_type})")
        if name in targets:
            errors.append(f"{where} names the QOS itself: its jobs would preempt each other (a session another)")
        for target in targets:
            if target not in declared:
                errors.append(f"{where}: {target!r} is not a QOS in slurm_qos")
    for name, targets in preempts.items():
        for target in targets:
            if target != name and name in preempts.get(target, []) and name < target:
                errors.append(f"slurm_qos: {name!r} and {target!r} preempt each other")
    if preempt_type == "preempt/qos" and str(preempt_mode).upper() == "OFF":
        errors.append("slurm_preempt_mode must not be OFF with slurm_preempt_type: preempt/qos (REQUEUE or CANCEL)")
    return errors


def slurm_include_errors(
    site_text: str, site_path: str, include_path: str, wanted: Mapping[str, Any]
) -> list[str]:
    """What keeps the site's slurm.conf from running Carme's hooks (slurm_manage_config: false); empty when it does.

    Reads the file as slurmd does, in order: keywords are case-insensitive, ``#`` starts a comment, ``Include``
    with a relative path is relative to slurm.conf's directory, and a key set again later wins (Slurm logs
    "specified more than once, latest value used"). Each ``wanted`` key must end up with Carme's value, either from
    the ``Include`` of Carme's file or from the site's own line.
    """
    want = {str(k).lower(): (str(k), slurm_value(v)) for k, v in wanted.items()}
    effective: dict[str, tuple[str, str]] = {}  # key -> (value, where it came from)
    included = False
    base = Path(site_path).parent
    for lineno, raw in enumerate(site_text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        head, _, rest = line.partition(" ")
        if head.lower() == "include" and "=" not in head:
            target = rest.strip()
            resolved = Path(target) if target.startswith("/") else base / target
            if str(resolved) == include_path:
                included = True
                for key, (_name, value) in want.items():
                    effective[key] = (value, f"Include {target}")
            continue
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep and key.lower() in want:
                effective[key.lower()] = (value, f"line {lineno}")
    errors = []
    for key, (name, value) in want.items():
        got = effective.get(key)
        if got is None:
            errors.append(f"it sets no {name} (Carme needs {name}={value})")
        elif got[0] != value:
            errors.append(f"{name}={got[0]} ({got[1]}) is not Carme's {name}={value}")
    if errors and not included:
        errors.append(f"it has no line 'Include {include_path}'")
    return errors


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "slurm_hostlist": hostlist,
            "slurm_value": slurm_value,
            "slurm_merge": slurm_merge,
            "slurm_node_group_errors": slurm_node_group_errors,
            "slurm_preemption_errors": slurm_preemption_errors,
            "slurm_include_errors": slurm_include_errors,
            "slurm_usage_carryover": slurm_usage_carryover,
            "slurm_usage_carryover_applied": slurm_usage_carryover_applied,
            "slurm_usage_carryover_problems": slurm_usage_carryover_problems,
        }
