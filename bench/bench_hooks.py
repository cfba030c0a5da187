#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Wall time of ``carme-prolog`` and ``carme-epilog`` per job (issue 5: goal <= 50 ms median and p95).

Runs the hooks as subprocesses, the way slurmd does: the shims the carme_runtime role writes into prolog.d and
epilog.d (three lines of Python run by the venv's interpreter with ``-I``; on a demo node the installed ones), with a
realistic hook environment (the variables slurmd 22.05 sets), a job devices cgroup to check (under a temporary cgroup
root), a job scratch directory to remove, and a stand-in ``squeue`` on PATH (a two-line shell script printing a
canned answer of the epilog's ``squeue --noheader --format='%A %T' ...``, so no Slurm is needed).

Three series per install:

* ``prolog``: reads the job's devices.list and logs one line;
* ``epilog``: the usual case: removes scratch, finds no leftover process of the user (proctrack/cgroup
  already killed them) and therefore does not call ``squeue``;
* ``epilog_leftovers``: the user still has a process on the node (a ``sleep`` run as uid 1001; needs root),
  so the epilog runs ``squeue``, sees another job of the user and keeps the process.

Usage::

    .venv/bin/python bench/bench_hooks.py                # the scripts of the running interpreter's venv
    .venv/bin/python bench/bench_hooks.py --wheel        # also: a regular install in a fresh venv
    .venv/bin/python bench/bench_hooks.py --runs 200 --out bench/results/hooks.json
    .venv/bin/python bench/bench_hooks.py --node carme-demo-node1   # also: the hooks installed on a demo node

Why ``--wheel``: an editable install (``pip install -e``) adds a ``.pth`` finder that every Python in that
venv imports at start-up (about 13 ms here); compute nodes get a regular install, which ``--wheel`` measures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOAL_MS = 50.0

#: another job of the same user on this node: the epilog must keep the user's processes
SQUEUE_TEXT = "999 RUNNING\n"
#: what the carme_runtime role writes into prolog.d and epilog.d (roles/carme_runtime/tasks/config.yml)
SHIM = "#!{python} -I\nfrom carme_runtime.entry_points import {hook}_main\nraise SystemExit({hook}_main())\n"


def stats(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000.0 for s in samples_s)
    return {
        "median_ms": round(statistics.median(ms), 2),
        "p95_ms": round(statistics.quantiles(ms, n=100, method="inclusive")[94], 2),
        "min_ms": round(ms[0], 2),
        "max_ms": round(ms[-1], 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def make_env(work: Path, bindir: Path) -> dict[str, str]:
    fakebin = work / "fakebin"
    fakebin.mkdir(exist_ok=True)
    (work / "squeue.txt").write_text(SQUEUE_TEXT)
    squeue = fakebin / "squeue"
    squeue.write_text(f"#!/bin/sh\nexec cat {work / 'squeue.txt'}\n")
    squeue.chmod(0o755)
    return {
        "PATH": f"{fakebin}:{bindir}:/usr/local/bin:/usr/bin:/bin",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_UID": "1001",
        "SLURM_JOB_GPUS": "0",
        "CUDA_VISIBLE_DEVICES": "0",
        "SLURMD_NODENAME": "vm",
        "SLURM_JOB_PARTITION": "debug",
        "SLURM_JOB_ACCOUNT": "research",
        "SLURM_CLUSTER_NAME": "carme",
        "SLURM_JOB_COMMENT": "carme:v1;state=starting",  # a Carme session: the hooks leave foreign jobs alone
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "CARME_CONFIG": str(work / "runtime.json"),  # absent: defaults + the overrides below
        "CARME_LOG_DIR": str(work / "log"),
        "CARME_SCRATCH_ROOT": str(work / "scratch"),
        "CARME_CGROUP_ROOT": str(work / "cgroup"),
    }


def prepare_job(work: Path, job_id: int) -> None:
    cg = work / "cgroup" / "devices" / "slurm" / "uid_1001" / f"job_{job_id}"
    cg.mkdir(parents=True, exist_ok=True)
    (cg / "devices.list").write_text("c 195:0 rw\nc 195:255 rw\nc 1:3 rwm\n")
    scratch = work / "scratch" / str(job_id)
    (scratch / "data").mkdir(parents=True, exist_ok=True)
    for i in range(5):
        (scratch / "data" / f"f{i}").write_bytes(b"x" * 1024)


def run_hook(script: Path, env: dict[str, str], job_id: int, context: str) -> float:
    job_env = dict(env, SLURM_JOB_ID=str(job_id), SLURM_SCRIPT_CONTEXT=context)
    start = time.perf_counter()
    proc = subprocess.run([str(script)], env=job_env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{script} exited {proc.returncode}: {proc.stderr.decode()[:300]}")
    return elapsed


def leftover_process() -> subprocess.Popen[bytes] | None:
    """A process of uid 1001 (root only), so the epilog has to ask squeue."""
    if os.geteuid() != 0:
        return None
    return subprocess.Popen(["sleep", "3600"], user=1001, group=1001)


def write_shims(work: Path, python: Path) -> tuple[Path, Path]:
    """The role's prolog and epilog shims for the venv of ``python``."""
    shims = []
    for hook in ("prolog", "epilog"):
        shim = work / f"50-carme-{hook}"
        shim.write_text(SHIM.format(python=python, hook=hook))
        shim.chmod(0o755)
        shims.append(shim)
    return shims[0], shims[1]


def bench_install(bindir: Path, runs: int, label: str, hooks: tuple[Path, Path] | None = None) -> dict[str, object]:
    """The series for the venv of ``bindir``: through the shims in ``hooks`` (prolog, epilog) where given (those
    installed on a node), else through shims written like the role's."""
    python = bindir / "python3"
    with tempfile.TemporaryDirectory(prefix="carme-bench-") as tmp:
        work = Path(tmp)
        prolog, epilog = hooks or write_shims(work, python)
        for script in (prolog, epilog):
            if not script.exists():
                raise SystemExit(f"{script} not found")
        env = make_env(work, bindir)
        baseline = []
        for _ in range(20):  # interpreter start-up alone, for reference
            t = time.perf_counter()
            subprocess.run([str(python), "-c", "pass"], env=env, check=True)
            baseline.append(time.perf_counter() - t)
        for i in range(5):  # warm-up: page cache, pyc files
            prepare_job(work, 900000 + i)
            run_hook(prolog, env, 900000 + i, "prolog_slurmd")
            run_hook(epilog, env, 900000 + i, "epilog_slurmd")
        pro, epi = [], []
        for i in range(runs):
            job_id = 1000 + i
            prepare_job(work, job_id)
            pro.append(run_hook(prolog, env, job_id, "prolog_slurmd"))
            epi.append(run_hook(epilog, env, job_id, "epilog_slurmd"))
            if (work / "scratch" / str(job_id)).exists():
                raise SystemExit(f"epilog did not remove the scratch of job {job_id}")
        sample = (work / "log" / "1000.log").read_text().splitlines()
        result: dict[str, object] = {
            "install": label,
            "bindir": str(bindir),
            "hooks": [str(prolog), str(epilog)] if hooks else "shims written like the role's, with -I",
            "runs": runs,
            "prolog": stats(pro),
            "epilog": stats(epi),
            "python_startup": stats(baseline),
            "sample_log": sample,
        }
        sleeper = leftover_process()
        if sleeper is None:
            result["epilog_leftovers"] = "skipped: needs root to run a process as uid 1001"
            return result
        try:
            left = []
            for i in range(runs):
                job_id = 5000 + i
                prepare_job(work, job_id)
                left.append(run_hook(epilog, env, job_id, "epilog_slurmd"))
            if sleeper.poll() is not None:
                raise SystemExit("the epilog killed a process of a user who still has a job on the node")
            result["epilog_leftovers"] = stats(left)
            result["sample_log"] = [*sample, *(work / "log" / "5000.log").read_text().splitlines()]
        finally:
            sleeper.kill()
            sleeper.wait()
    return result


def build_plain_venv(dest: Path) -> Path:
    """A fresh venv with ``carme_runtime`` copied into site-packages: what installing the (pure-Python)
    wheel does, without needing the ``wheel`` package, plus the console-script wrappers pip writes."""
    import shutil

    venv = dest / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    target = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    shutil.copytree(
        REPO / "carme_runtime", Path(target) / "carme_runtime", ignore=shutil.ignore_patterns("__pycache__")
    )
    subprocess.run([str(python), "-m", "compileall", "-q", str(Path(target) / "carme_runtime")], check=True)
    for name, func in (("carme-prolog", "prolog_main"), ("carme-epilog", "epilog_main")):
        script = venv / "bin" / name
        script.write_text(
            f"#!{python}\nimport re\nimport sys\nfrom carme_runtime.entry_points import {func}\n"
            "if __name__ == '__main__':\n"
            "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
            f"    sys.exit({func}())\n"
        )
        script.chmod(0o755)
    return venv / "bin"


def bench_on_node(node: str, venv: str, runs: int) -> dict[str, object]:
    """The same series inside a demo node (``podman exec``), on the hooks the role installed there: the node's own
    Python and venv (Debian 13: Python 3.13), as slurmd runs them; this file is copied in and run by the node's
    Python, which needs nothing beyond the standard library."""
    inside = "/tmp/carme-bench-hooks.py"
    subprocess.run(["podman", "cp", __file__, f"{node}:{inside}"], check=True)
    out = f"/tmp/carme-bench-hooks-{os.getpid()}.json"
    argv = [f"{venv}/bin/python3", "-I", inside, "--bindir", f"{venv}/bin", "--runs", str(runs), "--out", out]
    argv += ["--hooks", "/etc/slurm/prolog.d/50-carme", "/etc/slurm/epilog.d/50-carme"]
    try:
        subprocess.run(["podman", "exec", node, *argv], check=True, capture_output=True, timeout=600)
        raw = subprocess.run(["podman", "exec", node, "cat", out], check=True, capture_output=True, text=True)
    finally:
        subprocess.run(["podman", "exec", node, "rm", "-f", inside, out], check=False, capture_output=True)
    inner = json.loads(raw.stdout)
    result = dict(inner["results"][0])
    result["install"] = f"installed on the demo's {node} by the role (Python {inner['machine']['python']})"
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--node", help="also measure the hooks installed in this demo node container (podman)")
    parser.add_argument("--node-venv", default="/opt/carme/venv", help="the runtime's venv on that node")
    parser.add_argument("--bindir", type=Path, default=Path(sys.executable).parent)
    parser.add_argument("--wheel", action="store_true", help="also measure a regular (non-editable) install")
    parser.add_argument(
        "--hooks", nargs=2, type=Path, metavar=("PROLOG", "EPILOG"), help="run these hook scripts (installed shims)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "hooks.json")
    args = parser.parse_args()
    results = [bench_install(args.bindir, args.runs, "venv of the running interpreter", args.hooks)]
    if args.wheel:
        with tempfile.TemporaryDirectory(prefix="carme-wheel-") as tmp:
            results.append(bench_install(build_plain_venv(Path(tmp)), args.runs, "regular install in a fresh venv"))
    if args.node:
        results.append(bench_on_node(args.node, args.node_venv, args.runs))
    for r in results:
        series = [v for k, v in r.items() if k in ("prolog", "epilog", "epilog_leftovers") and isinstance(v, dict)]
        r["meets_goal"] = all(v["median_ms"] <= GOAL_MS and v["p95_ms"] <= GOAL_MS for v in series)
    doc = {
        "benchmark": "carme-prolog / carme-epilog wall time per job (subprocess, as slurmd runs them)",
        "goal_ms": GOAL_MS,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for r in results:
        print(f"{r['install']} (python -c pass: {r['python_startup']}):")
        for key in ("prolog", "epilog", "epilog_leftovers"):
            print(f"  {key}: {r[key]}")
        print(f"  meets goal: {r['meets_goal']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
