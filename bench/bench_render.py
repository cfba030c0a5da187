#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Render time of the Slurm configuration against the number of nodes, 100 to 10,000 (issues 3 and 18).

For each node count (default 100, 1,000, 3,000 and 10,000 compute nodes, always in 50 node groups, plus a head
node) a synthetic inventory is written to a temporary directory, and slurm.conf, gres.conf, cgroup.conf and
slurmdbd.conf are rendered with the role's own templates through real ansible (``tests/roles/render.yml``, the
harness of the golden-file tests). Each point of the curve records:

* ``wall_s``: the whole ``ansible-playbook`` run (start-up, inventory parsing of all hosts, the play);
* ``play_s``: the render play alone (from the ``ansible.posix.json`` callback);
* ``cpu_s``: user + system CPU time of ``ansible-playbook`` and every process it waited for (workers, modules),
  which other load on the machine disturbs less than the wall time;
  all three are medians of ``--repeat`` runs (default 3), ``*_min`` the fastest run, every run listed; the runs go
  round the sizes, so a burst of load on the machine spreads over all of them;
* ``phases``: where the time goes (see below);
* the line counts of slurm.conf and gres.conf: they depend on the number of groups, not of nodes (hostlist
  compression: one NodeName line per group), which ``lines_depend_on_nodes`` checks over the whole curve.

The curve is measured for two ways of writing the same compute nodes in a YAML inventory (``--styles``):

* ``listed``: one key per host (``g000-n00001:``), what a hand-written or exported inventory has;
* ``ranges``: one Ansible host range per group (``g000-n[00001:00200]:``), standard Ansible YAML inventory syntax
  that expands to the same hosts; the rendered files are byte-identical (checked: ``same_output_across_styles``).

The first style is the headline: ``curve`` and ``ratio_10000_over_100`` (wall and play, the goal of issue 18 is a
wall ratio of at most 1.2); every style has its own under ``styles``.

Phases: ``before_play_s`` (process start to the play's start: start-up, inventory parsing, playbook and role
loading) and ``after_play_s`` (the play's end to the process's exit) come from the same runs, the play's tasks from
the json callback (``render_task_s``: Jinja plus eight module runs of the template action, which do not depend on
the node count). The costs outside the play are measured by a probe, a
separate python process with the same environment, once per repeat and size: importing ansible and loading its
plugins, parsing each inventory (with the default inventory plugins, and with only the ``yaml`` plugin enabled, as
``[inventory] enable_plugins`` can set it; the default ``auto`` plugin reads a YAML file in full before the ``yaml``
plugin parses it again), the variables of the render host (``VariableManager.get_vars``), and one pass of the
``slurm_hostlist`` filter over all node groups (the templates make two). The probe also parses the listed
inventory written as JSON (``hosts.json``, read by the same ``yaml`` plugin). ``delta_10000_minus_100`` puts the
differences side by side.

Usage::

    .venv/bin/python bench/bench_render.py --plot bench/results/render.png   # writes bench/results/render.json
    .venv/bin/python bench/bench_render.py --sizes 100,2000 --styles ranges --repeat 1 --out /tmp/render.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.roles.harness import ansible_env  # noqa: E402  (the repo root must be on sys.path first)
from tests.roles.harness import render  # noqa: E402

STYLES = {
    "listed": "YAML inventory, one key per compute host (g000-n00001: ...)",
    "ranges": "YAML inventory, one Ansible host range per node group (g000-n[00001:00200]:), the same hosts",
}
RENDER_TASK = "Render the Slurm configuration files"
RENDER_HOST = "head01"


def _node_group(g: int, name: str) -> dict[str, Any]:
    """Node group number ``g``: GPUs, CPUs, memory and GPU type vary with ``g``; ten groups make a rack."""
    gpus = (4, 8)[g % 2]
    return {
        "name": name,
        "hosts": f"{{{{ groups['{name}'] }}}}",
        "cpus": 64 * (1 + g % 4),
        "real_memory": 256000 * (1 + g % 4),
        "gpus": gpus,
        "gpu_type": ("a100", "h100", "l40s", "t4")[g % 4],
        "gpu_files": f"/dev/nvidia[0-{gpus - 1}]",
        "features": [f"rack{g // 10}"],
    }


def _compute_groups(nodes: int, groups: int, style: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The inventory's compute groups (their hosts listed or as one range) and the matching slurm_node_groups."""
    per_group, extra = divmod(nodes, groups)
    compute: dict[str, Any] = {}
    node_groups = []
    for g in range(groups):
        name = f"g{g:03d}"
        count = per_group + (1 if g < extra else 0)
        if style == "ranges":
            hosts: dict[str, None] = {f"{name}-n[{1:05d}:{count:05d}]": None}
        else:
            hosts = {f"{name}-n{i:05d}": None for i in range(1, count + 1)}
        compute[name] = {"hosts": hosts}
        node_groups.append(_node_group(g, name))
    return compute, node_groups


def _inventory_tree(compute: dict[str, Any]) -> dict[str, Any]:
    return {
        "all": {
            "vars": {"ansible_connection": "ssh"},
            "children": {
                "carme": {
                    "children": {
                        "slurm_controller": {"hosts": {RENDER_HOST: None}},
                        "slurm_dbd": {"hosts": {RENDER_HOST: None}},
                        "slurm_login": {"hosts": {"login01": None}},
                        "slurm_compute": {"children": compute},
                    }
                }
            },
        }
    }


def _partitions(names: list[str], groups: int) -> list[dict[str, Any]]:
    """An interactive partition of the first five groups, a batch partition of all, and one per rack."""
    partitions: list[dict[str, Any]] = [
        {
            "name": "interactive",
            "node_groups": names[:5],
            "default": True,
            "max_time": "08:00:00",
            "config": {"QOS": "interactive"},
        },
        {"name": "batch", "node_groups": names, "max_time": "3-00:00:00"},
    ]
    return partitions + [
        {"name": f"rack{r}", "node_groups": names[r * 10 : (r + 1) * 10], "max_time": "1-00:00:00"}
        for r in range((groups + 9) // 10)
    ]


def write_inventory(root: Path, nodes: int, groups: int, style: str = "listed") -> Path:
    """A site with ``nodes`` compute nodes split evenly over ``groups`` GPU node groups.

    ``style`` ``listed`` names every host, ``ranges`` gives each group's hosts as one Ansible host range. The
    listed inventory is also written as ``hosts.json`` in a sibling directory ``<dir>-json`` (for the probe)."""
    if nodes < groups:
        raise ValueError(f"{nodes} nodes cannot fill {groups} groups")
    inv = root / f"inventory-{style}-{nodes}-{groups}"
    (inv / "group_vars" / "all").mkdir(parents=True)
    compute, node_groups = _compute_groups(nodes, groups, style)
    inventory = _inventory_tree(compute)
    group_vars = {
        "slurm_cluster_name": "bench",
        "slurm_controller_host": "{{ groups['slurm_controller'][0] }}",
        "slurm_dbd_host": "{{ groups['slurm_dbd'][0] }}",
        "slurm_node_groups": node_groups,
        "slurm_partitions": _partitions([group["name"] for group in node_groups], groups),
    }
    group_vars_text = yaml.safe_dump(group_vars, sort_keys=False)
    (inv / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    (inv / "group_vars" / "all" / "slurm.yml").write_text(group_vars_text)
    if style == "listed":
        as_json = inv.with_name(inv.name + "-json")
        (as_json / "group_vars" / "all").mkdir(parents=True)
        (as_json / "hosts.json").write_text(json.dumps(inventory))
        (as_json / "group_vars" / "all" / "slurm.yml").write_text(group_vars_text)
    return inv


# --- the probe: a separate python process with ansible's own API -----------------------------------------------


def probe(inventories: dict[str, str], plugin_dir: str) -> dict[str, Any]:
    """Time ansible's fixed costs in this process; ``inventories``: label -> inventory directory. Run in a fresh
    interpreter (``--probe``), so the import times are those of a start."""
    t0 = time.perf_counter()
    import ansible.constants as C  # type: ignore[import-untyped]
    from ansible import context
    from ansible.inventory.manager import InventoryManager  # type: ignore[import-untyped]
    from ansible.module_utils.common.collections import ImmutableDict  # type: ignore[import-untyped]
    from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]
    from ansible.plugins.loader import add_all_plugin_dirs  # type: ignore[import-untyped]
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar  # type: ignore[import-untyped]
    from ansible.template import trust_as_template
    from ansible.vars.manager import VariableManager  # type: ignore[import-untyped]

    context.CLIARGS = ImmutableDict({})
    init_plugin_loader()
    add_all_plugin_dirs(plugin_dir)
    out: dict[str, Any] = {"ansible_import_s": time.perf_counter() - t0}
    default_plugins = list(C.INVENTORY_ENABLED)

    def parse(path: str, plugins: list[str]) -> tuple[float, Any, Any]:
        C.INVENTORY_ENABLED = plugins
        try:
            loader = DataLoader()
            start = time.perf_counter()
            inventory = InventoryManager(loader=loader, sources=[path])
            return time.perf_counter() - start, inventory, loader
        finally:
            C.INVENTORY_ENABLED = default_plugins

    # the inventory plugins' own imports happen on their first use: not part of a large inventory's cost
    parse(inventories.pop("warm-up"), default_plugins)
    parse(inventories.pop("warm-up-json"), ["yaml"])
    first = None
    for label, path in inventories.items():
        seconds, inventory, loader = parse(path, default_plugins)
        out[f"inventory_parse_s.{label}"] = seconds
        out[f"inventory_parse_yaml_plugin_only_s.{label}"] = parse(path, ["yaml"])[0]
        out[f"hosts.{label}"] = len(inventory.hosts)
        if first is None:
            first = (inventory, loader)
    assert first is not None
    inventory, loader = first
    start = time.perf_counter()
    variables = VariableManager(loader=loader, inventory=inventory).get_vars(host=inventory.get_host(RENDER_HOST))
    out["host_vars_s"] = time.perf_counter() - start
    templar = Templar(loader=loader, variables=variables)
    expr = trust_as_template("{% for g in slurm_node_groups %}{{ g.hosts | slurm_hostlist }}\n{% endfor %}")
    start = time.perf_counter()
    text = templar.template(expr)
    out["hostlist_pass_s"] = time.perf_counter() - start
    out["hostlist_pass_nodes"] = sum(1 for line in str(text).splitlines() if line)
    return out


def run_probe(inventories: dict[str, Path]) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--probe", json.dumps({k: str(v) for k, v in inventories.items()})]
    proc = subprocess.run(argv, cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"probe failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout[proc.stdout.index("{") :]))


# --- the curve -----------------------------------------------------------------------------------------------------


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _timeline(output: str) -> tuple[float, float, dict[str, float]]:
    """The render play's start and end (epoch seconds) and each task's duration (task name -> seconds), from the
    json callback's output."""
    data, _ = json.JSONDecoder().raw_decode(output[output.index("{") :])
    play = data["plays"][0]
    tasks: dict[str, float] = {}
    for task in play["tasks"]:
        duration = task["task"].get("duration") or {}
        if "start" in duration and "end" in duration:
            name = task["task"]["name"].split(" | ")[-1]
            tasks[name] = tasks.get(name, 0.0) + _epoch(duration["end"]) - _epoch(duration["start"])
    return _epoch(play["play"]["duration"]["start"]), _epoch(play["play"]["duration"]["end"]), tasks


def run_once(inventory: Path, out: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """One ansible-playbook run: wall, play, the time before and after the play, CPU time of the process tree."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    result = render(inventory, out, json_output=True, timeout=240).check()
    ended = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    play_start, play_end, tasks = _timeline(result.output)
    run = {
        "wall_s": result.wall_s,
        "play_s": result.play_s,
        # start-up, inventory parsing, playbook and role loading; then the exit (stats, interpreter teardown)
        "before_play_s": play_start - started,
        "after_play_s": ended - play_end,
        "cpu_s": after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime,
        "tasks": tasks,
    }
    return run, {name: result.text(name) for name in ("slurm.conf", "gres.conf")}


def _median(values: list[float], digits: int = 2) -> float | None:
    return round(statistics.median(values), digits) if values else None


def _min(values: list[float], digits: int = 2) -> float | None:
    return round(min(values), digits) if values else None


def _probe_labels(warm: Path, inventories: dict[tuple[str, int], Path], styles: list[str], n: int) -> dict[str, Path]:
    """What the probe parses for size ``n``: the warm-up inventory (YAML and JSON), each style's, the listed as JSON."""
    labels: dict[str, Path] = {"warm-up": warm, "warm-up-json": warm.with_name(warm.name + "-json")}
    labels.update({style: inventories[(style, n)] for style in styles})
    if "listed" in styles:
        labels["listed-json"] = inventories[("listed", n)].with_name(inventories[("listed", n)].name + "-json")
    return labels


Runs = dict[tuple[str, int], list[dict[str, Any]]]
Outputs = dict[tuple[str, int], dict[str, str]]


def _measure_all(
    root: Path,
    inventories: dict[tuple[str, int], Path],
    warm: Path,
    sizes: list[int],
    styles: list[str],
    repeat: int,
    probe_on: bool,
) -> tuple[Runs, dict[int, list[dict[str, Any]]], Outputs]:
    """Every run, round-robin over repeats, sizes and styles, and a probe per repeat and size: the runs per (style,
    size), the probes per size, and the rendered files per (style, size)."""
    runs: Runs = {key: [] for key in inventories}
    probes: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    outputs: Outputs = {}
    for rep in range(repeat):
        for n in sizes:
            for style in styles:
                run, outputs[(style, n)] = run_once(inventories[(style, n)], root / f"out-{style}-{n}-{rep}")
                runs[(style, n)].append(run)
            if probe_on:
                probes[n].append(run_probe(_probe_labels(warm, inventories, styles, n)))
    return runs, probes, outputs


def _probe_phases(ps: list[dict[str, Any]], style: str) -> dict[str, Any]:
    """Medians of the probe's times for one style."""
    phases = {
        "ansible_import_s": _median([p["ansible_import_s"] for p in ps]),
        "inventory_parse_s": _median([p[f"inventory_parse_s.{style}"] for p in ps]),
        "inventory_parse_yaml_plugin_only_s": _median([p[f"inventory_parse_yaml_plugin_only_s.{style}"] for p in ps]),
        "host_vars_s": _median([p["host_vars_s"] for p in ps], 3),
        "hostlist_pass_s": _median([p["hostlist_pass_s"] for p in ps], 3),
    }
    if style == "listed" and "inventory_parse_s.listed-json" in ps[0]:
        phases["inventory_parse_as_json_s"] = _median([p["inventory_parse_s.listed-json"] for p in ps])
        phases["inventory_parse_as_json_yaml_plugin_only_s"] = _median(
            [p["inventory_parse_yaml_plugin_only_s.listed-json"] for p in ps]
        )
    return phases


def _phases(rs: list[dict[str, Any]], ps: list[dict[str, Any]], style: str, n: int) -> dict[str, Any]:
    """Where the time of the runs ``rs`` went, with the probes ``ps`` of their size when there are any."""
    phases: dict[str, Any] = {
        "outside_play_s": _median([r["wall_s"] - r["play_s"] for r in rs if r["play_s"] is not None]),
        "before_play_s": _median([r["before_play_s"] for r in rs]),
        "after_play_s": _median([r["after_play_s"] for r in rs]),
        "render_task_s": _median([r["tasks"].get(RENDER_TASK, 0.0) for r in rs]),
        "other_tasks_s": _median([sum(s for name, s in r["tasks"].items() if name != RENDER_TASK) for r in rs]),
    }
    if ps:
        phases.update(_probe_phases(ps, style))
        hosts = {p[f"hosts.{style}"] for p in ps}
        assert hosts == {n + 2}, f"{style} {n}: the inventory has {hosts} hosts, not {n + 2}"
    return phases


def _point(
    rs: list[dict[str, Any]], phases: dict[str, Any], output: dict[str, str], hosts_dir: Path, **about: Any
) -> dict[str, Any]:
    """One point of a curve: ``about`` (nodes, groups, inventory style, repeat), then the runs' times and the
    rendered files' sizes."""
    walls = [r["wall_s"] for r in rs]
    plays = [r["play_s"] for r in rs if r["play_s"] is not None]
    slurm_conf = output["slurm.conf"].splitlines()
    gres_conf = output["gres.conf"].splitlines()
    return {
        **about,
        "wall_s": _median(walls),
        "play_s": _median(plays),
        "cpu_s": _median([r["cpu_s"] for r in rs]),
        "wall_s_min": _min(walls),
        "play_s_min": _min(plays),
        "cpu_s_min": _min([r["cpu_s"] for r in rs]),
        "wall_s_runs": [round(w, 2) for w in walls],
        "play_s_runs": [round(p, 2) for p in plays],
        "cpu_s_runs": [round(r["cpu_s"], 2) for r in rs],
        "phases": phases,
        "slurm_conf_lines": len(slurm_conf),
        "slurm_conf_nodename_lines": sum(line.startswith("NodeName=") for line in slurm_conf),
        "gres_conf_lines": len(gres_conf),
        "slurm_conf_bytes": len(output["slurm.conf"].encode()),
        "inventory_bytes": (hosts_dir / "hosts.yml").stat().st_size,
    }


def measure_curve(root: Path, sizes: list[int], groups: int, styles: list[str], repeat: int, probe_on: bool) -> Any:
    """All runs, round-robin over repeats, sizes and styles. Returns {style: [point per size]} and the outputs."""
    inventories = {(style, n): write_inventory(root, n, groups, style) for style in styles for n in sizes}
    warm = write_inventory(root / "warm", groups, groups, "listed")
    runs, probes, outputs = _measure_all(root, inventories, warm, sizes, styles, repeat, probe_on)
    curves: dict[str, list[dict[str, Any]]] = {}
    for style in styles:
        curves[style] = [
            _point(
                runs[(style, n)],
                _phases(runs[(style, n)], probes[n], style, n),
                outputs[(style, n)],
                inventories[(style, n)],
                nodes=n,
                groups=groups,
                inventory=style,
                repeat=repeat,
            )
            for n in sizes
        ]
    return curves, outputs


def ratio(points: list[dict[str, Any]], key: str, big: int = 10_000, small: int = 100) -> float | None:
    by_nodes = {p["nodes"]: p for p in points}
    if big not in by_nodes or small not in by_nodes or not by_nodes[small][key] or by_nodes[big][key] is None:
        return None
    return round(float(by_nodes[big][key]) / float(by_nodes[small][key]), 2)


def ratios(points: list[dict[str, Any]]) -> dict[str, float | None]:
    """10,000 over 100 nodes: ``wall`` and ``play`` of the medians (the goal is on ``wall``), the same of the
    fastest runs (``*_min``, the least disturbed by other load on the machine) and of the CPU time."""
    keys = {"wall": "wall_s", "play": "play_s", "cpu": "cpu_s", "wall_min": "wall_s_min", "play_min": "play_s_min"}
    return {name: ratio(points, key) for name, key in keys.items()}


def deltas(points: list[dict[str, Any]], big: int = 10_000, small: int = 100) -> dict[str, float] | None:
    """Seconds that the big inventory costs over the small one, per measured quantity."""
    by_nodes = {p["nodes"]: p for p in points}
    if big not in by_nodes or small not in by_nodes:
        return None
    b, s = by_nodes[big], by_nodes[small]
    out = {
        key: round(b[key] - s[key], 2)
        for key in ("wall_s", "play_s", "cpu_s", "wall_s_min", "play_s_min", "cpu_s_min")
        if b[key] is not None and s[key] is not None
    }
    for key, value in b["phases"].items():
        if isinstance(value, (int, float)) and isinstance(s["phases"].get(key), (int, float)):
            out[key] = round(value - s["phases"][key], 3)
    if "hostlist_pass_s" in out:
        out["hostlist_two_passes_s"] = round(2 * out["hostlist_pass_s"], 3)
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    colours = {"listed": "tab:blue", "ranges": "tab:orange"}
    for style, data in report["styles"].items():
        points = data["curve"]
        nodes = [p["nodes"] for p in points]
        colour = colours.get(style)
        ax.plot(nodes, [p["wall_s"] for p in points], "o-", color=colour, label=f"{style}: wall (ansible-playbook)")
        low = [min(p["wall_s_runs"]) for p in points]
        high = [max(p["wall_s_runs"]) for p in points]
        ax.fill_between(nodes, low, high, color=colour, alpha=0.12, linewidth=0)
        ax.plot(nodes, [p["play_s"] for p in points], "s--", color=colour, label=f"{style}: render play")
    first = report["styles"][report["inventory"]]["curve"]
    small = next((p for p in first if p["nodes"] == 100), None)
    if small is not None:
        ax.axhline(1.2 * small["wall_s"], color="grey", linestyle=":", label="goal: 1.2 x wall at 100 nodes")
    ax.set_xscale("log")
    sizes = sorted({p["nodes"] for data in report["styles"].values() for p in data["curve"]})
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
    ax.minorticks_off()
    ax.set_xlabel(f"compute nodes ({report['groups']} node groups, log scale)")
    ax.set_ylabel(f"seconds (median of {report['repeat']} runs; band: fastest to slowest wall)")
    ax.set_ylim(bottom=0)
    ax.set_title("Rendering slurm.conf/gres.conf/cgroup.conf/slurmdbd.conf with the slurm role")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,3000,10000", help="node counts, comma-separated")
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3, help="runs per point; the median is reported")
    parser.add_argument(
        "--styles", default="listed,ranges", help=f"inventory styles, the first is the headline: {','.join(STYLES)}"
    )
    parser.add_argument("--no-probe", action="store_true", help="skip the probe of ansible's fixed costs")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "render.json")
    parser.add_argument("--plot", type=Path, default=None, help="write a PNG of time against nodes")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    return parser


def _report(
    args: argparse.Namespace,
    sizes: list[int],
    styles: list[str],
    curves: dict[str, list[dict[str, Any]]],
    outputs: dict[tuple[str, int], dict[str, str]],
    load_before: tuple[float, float, float],
    started: float,
) -> dict[str, Any]:
    all_points = [p for points in curves.values() for p in points]
    return {
        "benchmark": "render slurm.conf/gres.conf/cgroup.conf/slurmdbd.conf with the slurm role through ansible",
        "goal": "wall time at 10,000 nodes <= 1.2 x wall time at 100 nodes (issue 18)",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": _cpus()},
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "took_s": round(time.monotonic() - started, 1),
        "groups": args.groups,
        "repeat": args.repeat,
        "inventory": styles[0],
        "inventory_styles": {s: STYLES[s] for s in styles},
        "curve": curves[styles[0]],
        "ratio_10000_over_100": ratios(curves[styles[0]]),
        "delta_10000_minus_100": deltas(curves[styles[0]]),
        "styles": {
            style: {
                "curve": points,
                "ratio_10000_over_100": ratios(points),
                "delta_10000_minus_100": deltas(points),
            }
            for style, points in curves.items()
        },
        "lines_depend_on_nodes": len({(p["slurm_conf_lines"], p["gres_conf_lines"]) for p in all_points}) > 1,
        "same_output_across_styles": all(
            len({json.dumps(outputs[(style, n)], sort_keys=True) for style in styles}) == 1 for n in sizes
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.probe:
        inventories = json.loads(args.probe)
        print(json.dumps(probe(inventories, str(REPO / "roles" / "slurm"))))
        return 0

    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    styles = [s.strip() for s in args.styles.split(",") if s.strip()]
    unknown = [s for s in styles if s not in STYLES]
    if unknown:
        parser.error(f"unknown inventory style(s) {unknown}; known: {list(STYLES)}")
    load_before = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="carme-bench-render-") as tmp:
        curves, outputs = measure_curve(Path(tmp), sizes, args.groups, styles, args.repeat, not args.no_probe)
    report = _report(args, sizes, styles, curves, outputs, load_before, started)
    text = json.dumps(report, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    if args.plot is not None:
        plot(report, args.plot)
        print(f"plot: {args.plot}")
    return 0


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    raise SystemExit(main())
