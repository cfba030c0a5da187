#!/usr/bin/env python3
"""Render time and size of the Slurm configuration for a large synthetic inventory (issue 3).

Generates a YAML inventory in a temporary directory (default: 10,000 compute nodes in 50 node groups, plus a
head node), renders slurm.conf, gres.conf, cgroup.conf and slurmdbd.conf with the role's own templates through
real ansible (``tests/roles/render.yml``, the harness of the golden-file tests), and records:

* ``wall_s``: the whole ``ansible-playbook`` run (start-up, inventory parsing of all hosts, the play);
* ``play_s``: the render play alone (from the ``ansible.posix.json`` callback);
  both are medians of ``--repeat`` runs (default 3), with every run listed;
* line counts of slurm.conf and gres.conf.

A control run with a tenth of the nodes in the same 50 groups shows that the line counts depend on the number
of groups, not of nodes (hostlist compression: one NodeName line per group).

Usage::

    .venv/bin/python bench/bench_render.py                      # writes bench/results/render.json
    .venv/bin/python bench/bench_render.py --nodes 2000 --groups 20 --out /tmp/render.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.roles.harness import render  # noqa: E402  (the repo root must be on sys.path first)


def write_inventory(root: Path, nodes: int, groups: int) -> Path:
    """A site with ``nodes`` compute nodes split evenly over ``groups`` GPU node groups."""
    inv = root / f"inventory-{nodes}-{groups}"
    (inv / "group_vars" / "all").mkdir(parents=True)
    per_group, extra = divmod(nodes, groups)
    compute: dict[str, Any] = {}
    node_groups = []
    for g in range(groups):
        name = f"g{g:03d}"
        count = per_group + (1 if g < extra else 0)
        compute[name] = {"hosts": {f"{name}-n{i:05d}": None for i in range(1, count + 1)}}
        gpus = (4, 8)[g % 2]
        node_groups.append(
            {
                "name": name,
                "hosts": f"{{{{ groups['{name}'] }}}}",
                "cpus": 64 * (1 + g % 4),
                "real_memory": 256000 * (1 + g % 4),
                "gpus": gpus,
                "gpu_type": ("a100", "h100", "l40s", "t4")[g % 4],
                "gpu_files": f"/dev/nvidia[0-{gpus - 1}]",
                "features": [f"rack{g // 10}"],
            }
        )
    hosts = {
        "all": {
            "vars": {"ansible_connection": "ssh"},
            "children": {
                "carme": {
                    "children": {
                        "slurm_controller": {"hosts": {"head01": None}},
                        "slurm_dbd": {"hosts": {"head01": None}},
                        "slurm_login": {"hosts": {"login01": None}},
                        "slurm_compute": {"children": compute},
                    }
                }
            },
        }
    }
    names = [group["name"] for group in node_groups]
    partitions = [
        {
            "name": "interactive",
            "node_groups": names[:5],
            "default": True,
            "max_time": "08:00:00",
            "config": {"QOS": "interactive"},
        },
        {"name": "batch", "node_groups": names, "max_time": "3-00:00:00"},
    ] + [
        {"name": f"rack{r}", "node_groups": names[r * 10 : (r + 1) * 10], "max_time": "1-00:00:00"}
        for r in range((groups + 9) // 10)
    ]
    group_vars = {
        "slurm_cluster_name": "bench",
        "slurm_controller_host": "{{ groups['slurm_controller'][0] }}",
        "slurm_dbd_host": "{{ groups['slurm_dbd'][0] }}",
        "slurm_node_groups": node_groups,
        "slurm_partitions": partitions,
    }
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    (inv / "group_vars" / "all" / "slurm.yml").write_text(yaml.safe_dump(group_vars, sort_keys=False))
    return inv


def measure(root: Path, nodes: int, groups: int, repeat: int) -> dict[str, Any]:
    inv = write_inventory(root, nodes, groups)
    walls: list[float] = []
    plays: list[float] = []
    for run in range(repeat):
        out = root / f"out-{nodes}-{groups}-{run}"
        result = render(inv, out, json_output=True, timeout=1800).check()
        walls.append(result.wall_s)
        if result.play_s is not None:
            plays.append(result.play_s)
    slurm_conf = result.text("slurm.conf").splitlines()
    gres_conf = result.text("gres.conf").splitlines()
    return {
        "nodes": nodes,
        "groups": groups,
        "repeat": repeat,
        "wall_s": round(statistics.median(walls), 2),
        "play_s": round(statistics.median(plays), 2) if plays else None,
        "wall_s_runs": [round(w, 2) for w in walls],
        "play_s_runs": [round(p, 2) for p in plays],
        "slurm_conf_lines": len(slurm_conf),
        "slurm_conf_nodename_lines": sum(line.startswith("NodeName=") for line in slurm_conf),
        "gres_conf_lines": len(gres_conf),
        "slurm_conf_bytes": len(result.text("slurm.conf").encode()),
        "inventory_bytes": (inv / "hosts.yml").stat().st_size,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3, help="runs per inventory; the median is reported")
    parser.add_argument("--no-control", action="store_true", help="skip the control run with nodes/10")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "render.json")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="carme-bench-render-") as tmp:
        main_run = measure(Path(tmp), args.nodes, args.groups, args.repeat)
        control = (
            None
            if args.no_control
            else measure(Path(tmp), max(args.groups, args.nodes // 10), args.groups, args.repeat)
        )

    report: dict[str, Any] = {
        "benchmark": "render slurm.conf/gres.conf/cgroup.conf/slurmdbd.conf with the slurm role through ansible",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": _cpus()},
        "result": main_run,
        "control_fewer_nodes_same_groups": control,
    }
    if control is not None:
        report["lines_depend_on_nodes"] = (
            control["slurm_conf_lines"] != main_run["slurm_conf_lines"]
            or control["gres_conf_lines"] != main_run["gres_conf_lines"]
        )
    text = json.dumps(report, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    return 0


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    raise SystemExit(main())
