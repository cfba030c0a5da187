#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""``make bench``: every benchmark on the demo (brought up first if it is not), bounded, then one results file.

Runs, one after another (each bench writes its own ``bench/results/<name>.json`` and, where a curve says more than
a number, a PNG next to it):

* ``rerun``: ``carme deploy`` of site.yml on the running demo, which is already deployed (the idempotent re-run:
  wall time, tasks, changed);
* ``rerun-mitogen``: the same re-run by ``ansible-playbook`` with Mitogen's strategy against without, one after the
  other (bench_rerun_mitogen.py; Mitogen is not part of ``carme deploy``);
* ``render``: slurm.conf/gres.conf for 100 to 10,000 nodes (bench_render.py, plot of time against nodes);
* ``hooks``: the Slurm prolog/epilog shims against a bare interpreter start (bench_hooks.py);
* ``start``: Start click to JupyterLab 200 through the proxy against the floor (bench_start.py, 20 runs each,
  alternating, per-segment breakdown, 10 users at once, plot of the distributions);
* ``jupyterhub``: the comparison row: JupyterHub + batchspawner brought up on the same demo and app environment,
  spawn request to JupyterLab 200 through its proxy against a bare JupyterLab started by sbatch (bench_jupyterhub.py,
  10 runs each, alternating; everything it installed is removed afterwards);
* ``portal``: the dashboard under 20 and 200 users on the demo's real stack (bench_portal.py --target demo: nginx +
  TLS, gunicorn, MariaDB, slurmrestd), then 200 users again with 10,000 held jobs in Slurm's queue and 1,000 nodes in
  slurm.conf (bench_queue.py; removed after), memory of the portal's processes and nginx, plot of latency against
  users.

Then it writes ``bench/results/<date>.json`` (every bench's result, the machine, the load average, the commit) and
``bench/results/<date>.md``: the table the README's Performance section quotes. ``--only NAME`` (repeatable) runs
some benches and summarises the others from their last results files. Each bench has its own time limit; the whole
run stays under 45 minutes on the demo machine (the portal bench waits up to 8 minutes for an earlier run's jobs to
leave slurmctld's memory). The setup rows (``make demo`` on a fresh machine, the clean-clone CI) are not run here:
they are the last records in ``bench/results/setup.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
PY = sys.executable
CARME = [str(Path(PY).parent / "carme")]

#: the portal bench's last run: 10,000 held jobs in Slurm's queue, 1,000 nodes in slurm.conf (2 of them real)
BIG_CLUSTER = ["--queue", "10000", "--nodes", "1000"]
PORTAL_PNG = "bench/results/portal.png"
#: name -> (argv, time limit in seconds)
BENCHES: dict[str, tuple[list[str], float]] = {
    "rerun": ([PY, "bench/run_all.py", "--rerun-once"], 360.0),
    "rerun-mitogen": ([PY, "bench/bench_rerun_mitogen.py"], 420.0),
    "render": ([PY, "bench/bench_render.py", "--plot", "bench/results/render.png"], 300.0),
    "hooks": ([PY, "bench/bench_hooks.py", "--runs", "100", "--wheel", "--node", "carme-demo-node1"], 300.0),
    "start": (
        [PY, "bench/bench_start.py", "--runs", "20", "--concurrent", "10", "--plot", "bench/results/start.png"],
        600.0,
    ),
    "jupyterhub": ([PY, "bench/bench_jupyterhub.py", "--runs", "10", "--time-limit", "420"], 480.0),
    "portal": ([PY, "bench/bench_portal.py", "--target", "demo", *BIG_CLUSTER, "--plot", PORTAL_PNG], 1200.0),
}


def load(name: str) -> dict[str, Any]:
    path = RESULTS / f"{name}.json"
    return dict(json.loads(path.read_text())) if path.exists() else {}


def rerun_once() -> int:
    """Time one ``carme deploy`` (site.yml) on the deployed demo; write bench/results/rerun.json."""
    t0 = time.monotonic()
    proc = subprocess.run([*CARME, "deploy", "--json"], cwd=REPO, capture_output=True, text=True, check=False)
    wall = round(time.monotonic() - t0, 1)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        return proc.returncode
    stats = json.loads(proc.stdout[proc.stdout.index("{") :])
    result = {
        "benchmark": "site.yml re-run on the deployed demo (carme deploy), nothing to change",
        "goal_s": 60.0,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_avg_before": os.getloadavg(),
        "wall_s": wall,
        "tasks_done": stats.get("tasks_done"),
        "changed": stats.get("changed"),
        "hosts": stats.get("hosts"),
    }
    (RESULTS / "rerun.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


def demo_up() -> None:
    status = subprocess.run([*CARME, "demo", "status"], cwd=REPO, capture_output=True, text=True, check=False)
    if status.returncode != 0:
        print("=== the demo is not up: carme demo up", flush=True)
        subprocess.run([*CARME, "demo", "up"], cwd=REPO, check=True, timeout=1800)


def dig(data: Any, *path: str | int) -> Any:
    for key in path:
        in_dict = isinstance(data, dict) and key in data
        in_list = isinstance(data, list) and isinstance(key, int) and -len(data) <= key < len(data)
        if in_dict or in_list:
            data = data[key]
        else:
            return None
    return data


def fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "not measured"
    if isinstance(value, float):
        value = f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
    return f"{value}{unit}"


def verdict(value: Any, goal: float | None) -> str:
    if value is None or goal is None:
        return ""
    return "met" if float(value) <= goal else "missed"


Row = tuple[str, str, str, str]


def rows_rerun(r: dict[str, Any]) -> list[Row]:
    return [("site.yml re-run on the demo, nothing to change", f"{fmt(r.get('wall_s'), ' s')} "
             f"({fmt(r.get('tasks_done'))} tasks, {fmt(r.get('changed'))} changed)", "≤ 60 s",
             verdict(r.get("wall_s"), 60.0))]  # fmt: skip


def rows_rerun_mitogen(r: dict[str, Any]) -> list[Row]:
    linear, mitogen = dig(r, "linear", "wall_s"), dig(r, "mitogen_linear", "wall_s")
    changed = dig(r, "mitogen_linear", "changed")
    return [(f"site.yml re-run, Mitogen {r.get('mitogen', '')} (mitogen_linear + podman; a bench, not yet "
             "`carme deploy`'s), nothing to change", f"{fmt(mitogen, ' s')} ({fmt(changed)} changed; without it "
             f"{fmt(linear, ' s')} in the same bench, x{fmt(r.get('speedup'))})", "≤ 60 s",
             verdict(mitogen, 60.0))]  # fmt: skip


def rows_render(r: dict[str, Any]) -> list[Row]:
    curve = {int(p["nodes"]): p for p in r.get("curve", []) if "nodes" in p}
    ratio = r.get("ratio_10000_over_100", {})
    ratio_wall = ratio.get("wall") if isinstance(ratio, dict) else ratio
    small, big = curve.get(100, {}), curve.get(10000, {})
    return [("slurm.conf + gres.conf render, 100 → 10,000 nodes (50 groups), wall",
             f"{fmt(small.get('wall_s'), ' s')} → {fmt(big.get('wall_s'), ' s')} (x{fmt(ratio_wall)})",
             "≤ 1.2 x the 100-node time", verdict(ratio_wall, 1.2))]  # fmt: skip


def rows_hooks(r: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    results = r.get("results", [])
    # a regular install is what sites run; "installed on": the role's install on a demo node, the node's Python
    regular = [res for res in results if str(res.get("install", "")).startswith(("regular", "installed on"))]
    for res in regular or results:
        base = dig(res, "python_startup", "p95_ms")
        for path in ("prolog", "epilog", "epilog_leftovers"):
            p95 = dig(res, path, "p95_ms")
            over = None if p95 is None or base is None else round(p95 - base, 1)
            out.append((f"hook {path} p95 ({res.get('install', '')})",
                        f"{fmt(p95, ' ms')} (bare interpreter {fmt(base, ' ms')}, +{fmt(over, ' ms')})",
                        "≤ bare interpreter + 10 ms", verdict(over, 10.0)))  # fmt: skip
    return out


def rows_start(r: dict[str, Any]) -> list[Row]:
    portal_med = dig(r, "portal", "http200", "median_s")
    portal_p90 = dig(r, "portal", "http200", "p90_s")
    floor_med = dig(r, "floor", "http200", "median_s")
    over = None if portal_med is None or floor_med is None else round(portal_med - floor_med, 2)
    rows: list[Row] = [
        ("Start → JupyterLab 200 through the proxy, median (floor: same launcher and app by sbatch)",
         f"{fmt(portal_med, ' s')} (floor {fmt(floor_med, ' s')}, +{fmt(over, ' s')})", "≤ 2.5 s",
         verdict(portal_med, 2.5)),
        ("Start → 200, p90", f"{fmt(portal_p90, ' s')} (floor {fmt(dig(r, 'floor', 'http200', 'p90_s'), ' s')})",
         "≤ 3.0 s", verdict(portal_p90, 3.0)),
    ]  # fmt: skip
    last = dig(r, "concurrent", "last_http200_s")
    c = r.get("concurrent") or {}
    if c and last is None:
        rows.append((f"{fmt(c.get('started'))} sessions of {fmt(c.get('users'))} users start at once → all answer 200",
                     f"only {fmt(c.get('answered'))} answered within the bench's limit (the last of those after "
                     f"{fmt(c.get('last_200_of_those_that_answered_s'), ' s')})", "", "missed"))  # fmt: skip
    if last is not None:
        rows.append((f"{fmt(c.get('started'))} sessions of {fmt(c.get('users'))} users start at once (asked: "
                     f"{fmt(c.get('requested'))}; the demo's limits) → the last one answers 200", fmt(last, " s"),
                     "", ""))  # fmt: skip
    return rows


def same_run(a: str, b: str, hours: float = 2.0) -> bool:
    """Two benches' ISO dates (2026-11-28T09:18:18Z) within ``hours``: of one make bench, on the same demo."""
    try:
        fmt_ = "%Y-%m-%dT%H:%M:%SZ"
        gap = abs(time.mktime(time.strptime(a, fmt_)) - time.mktime(time.strptime(b, fmt_)))
    except ValueError:
        return False
    return gap <= hours * 3600


def rows_jupyterhub(r: dict[str, Any]) -> list[Row]:
    hub_med, hub_p90 = dig(r, "hub", "http200", "median_s"), dig(r, "hub", "http200", "p90_s")
    floor_med = dig(r, "floor", "http200", "median_s")
    over = r.get("hub_minus_floor_median_s")
    if over is None and hub_med is not None and floor_med is not None:
        over = round(hub_med - floor_med, 2)
    versions = r.get("versions") or {}
    which = (f"; JupyterHub {versions['jupyterhub']}, batchspawner {versions['batchspawner']}, "
             f"n = {fmt(dig(r, 'hub', 'http200', 'n'))}") if versions.get("jupyterhub") else ""  # fmt: skip
    what = ("JupyterHub + batchspawner, spawn → 200 through its proxy, median (same cluster, floor: bare JupyterLab "
            f"by sbatch{which})")  # fmt: skip
    measured = f"{fmt(hub_med, ' s')} (floor {fmt(floor_med, ' s')}, +{fmt(over, ' s')}); p90 {fmt(hub_p90, ' s')}"
    rows: list[Row] = [(what, measured, "comparison (Carme: the Start rows above)", "")]
    # the brief's target: Carme's overhead over its floor at most half of JupyterHub's over its own, same cluster
    start = load("start")
    carme_med = dig(start, "portal", "http200", "median_s")
    when = f"start {str(start.get('date', ''))[:16]}, hub {str(r.get('date', ''))[:16]}"
    if not same_run(str(start.get("date", "")), str(r.get("date", ""))):
        rows.append(("Carme against JupyterHub + batchspawner (ratio and overheads)",
                     f"not compared: the two benches are of different runs ({when})", "≥ x2", ""))  # fmt: skip
        return rows
    if carme_med and hub_med is not None:
        ratio = round(float(hub_med) / float(carme_med), 2)
        rows.append(("JupyterHub + batchspawner median over Carme's, same demo (the two benches of one make bench)",
                     f"x{fmt(ratio)} ({fmt(hub_med, ' s')} / {fmt(carme_med, ' s')}; {when})", "≥ x2",
                     "met" if ratio >= 2.0 else "missed"))  # fmt: skip
    carme_over = start.get("portal_minus_floor_median_s")
    if carme_over is not None and over is not None:
        half = round(float(over) / 2, 2)
        rows.append(("Overhead over the floor, Carme (portal minus the same launcher by sbatch) against JupyterHub "
                     "(hub minus a bare JupyterLab by sbatch), medians",
                     f"Carme {fmt(carme_over, ' s')}, JupyterHub {fmt(over, ' s')}", "Carme ≤ half of JupyterHub's",
                     verdict(carme_over, half)))  # fmt: skip
    return rows


def rows_portal(r: dict[str, Any]) -> list[Row]:
    demo = r.get("demo", {})
    rows: list[Row] = []
    for run in demo.get("runs", []):
        p99 = dig(run, "latency_ms", "p99")
        c = run.get("cluster")
        big = (f", {fmt(c.get('queued_jobs'))} held jobs queued ({fmt(c.get('jobs_in_queue'))} in all), "
               f"{fmt(c.get('declared_nodes'))} nodes declared") if c else ""  # fmt: skip
        rows.append((f"dashboard, {run.get('users')} users{big}, real stack (nginx+TLS, MariaDB, slurmrestd): p50/p99",
                     f"{fmt(dig(run, 'latency_ms', 'p50'), ' ms')} / {fmt(p99, ' ms')}; slurmrestd "
                     f"{fmt(run.get('slurmrestd_calls_per_s'), '/s')}", "p99 ≤ 150 ms",
                     verdict(p99, 150.0)))  # fmt: skip
    pss = dig(demo, "memory", "total_pss_mb")
    if pss is not None:
        when = dig(demo, "memory", "measured") or ""
        rows.append((f"portal + nginx memory, summed PSS ({when})", fmt(pss, " MB"), "≤ 120 MB", verdict(pss, 120.0)))
    return rows


def rows_setup(r: dict[str, Any]) -> list[Row]:
    """Not run by make bench (each takes the machine for most of an hour): the last records in setup.json."""
    rows: list[Row] = []
    fresh = [v for k, v in r.items() if k.startswith("fresh_machine") and isinstance(v, dict) and "make_demo_s" in v]
    demo = max(fresh, key=lambda v: str(v.get("date")), default={})
    rows.append((f"`make demo` on a fresh machine (measured {demo.get('date', 'never')}, {demo.get('commit', '')})",
                 fmt(demo.get("make_demo_s"), " s"), "≤ 480 s", verdict(demo.get("make_demo_s"), 480.0)))  # fmt: skip
    official = [v for k, v in r.items() if k.startswith("ci_official") and isinstance(v, dict)]
    ci = max(official, key=lambda v: (str(v.get("date")), int(v.get("stop", 0))), default={})
    total = ci.get("ci_total_s")
    rows.append((f"clean-clone CI (`bash .ci/run` = setup + `make test` on Debian 13 with Debian 12's smoke set; "
                 f"{ci.get('date', 'no record')}, {ci.get('commit', '')})", fmt(total, " s"),
                 "≤ 2700 s (issue 33); `make test` ≤ 1800 s + 600 s for the second release (issue 32)",
                 "" if total is None else ("met" if total <= 1800 + 600 else "missed")))  # fmt: skip
    return rows


SUMMARIES: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "rerun": rows_rerun,
    "rerun-mitogen": rows_rerun_mitogen,
    "render": rows_render,
    "hooks": rows_hooks,
    "start": rows_start,
    "jupyterhub": rows_jupyterhub,
    "portal": rows_portal,
}


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=sorted(BENCHES), help="run only these (repeatable)")
    parser.add_argument("--summary-only", action="store_true", help="run nothing, summarise the last results")
    parser.add_argument("--rerun-once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rerun_once:
        return rerun_once()
    todo = [] if args.summary_only else (args.only or list(BENCHES))
    machine: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                               "cpus": os.cpu_count(), "load_avg_before": os.getloadavg()}  # fmt: skip
    if todo:
        demo_up()
    took: dict[str, Any] = {}
    failed: list[str] = []
    t_all = time.monotonic()
    for name in todo:
        argv, limit = BENCHES[name]
        print(f"=== bench {name}: {' '.join(argv[1:])} (limit {limit:.0f} s)", flush=True)
        t0 = time.monotonic()
        try:
            rc = subprocess.run(argv, cwd=REPO, timeout=limit, check=False).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        took[name] = {"seconds": round(time.monotonic() - t0, 1), "rc": rc}
        if rc != 0:
            failed.append(name)
        print(f"=== bench {name}: {took[name]['seconds']} s, exit {rc}", flush=True)
    machine["load_avg_after"] = os.getloadavg()
    date = time.strftime("%Y-%m-%d")
    everything = {name: load(name) for name in BENCHES}
    combined = {
        "date": date,
        "commit": git_commit(),
        "machine": machine,
        "ran": took,
        "total_s": round(time.monotonic() - t_all, 1),
        "failed": failed,
        "results": everything,
    }
    rows = [row for name in BENCHES for row in SUMMARIES[name](everything[name])] + rows_setup(load("setup"))
    table = ["| What | Measured | Goal | |", "|---|---|---|---|"]
    table += [f"| {what} | {measured} | {goal} | {ok} |" for what, measured, goal, ok in rows]
    header = (
        f"Measured {date} at commit {combined['commit']} on {machine['platform']}, {machine['cpus']} cores; load "
        f"average before {', '.join(f'{x:.2f}' for x in machine['load_avg_before'])}, after "
        f"{', '.join(f'{x:.2f}' for x in machine['load_avg_after'])}. Benches run: {', '.join(todo) or 'none'} "
        f"({combined['total_s']} s); the others are summarised from their last results files."
    )
    (RESULTS / f"{date}.json").write_text(json.dumps(combined, indent=2) + "\n")
    (RESULTS / f"{date}.md").write_text(header + "\n\n" + "\n".join(table) + "\n")
    print(header + "\n\n" + "\n".join(table))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
