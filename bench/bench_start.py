#!/usr/bin/env python3
"""Time from the Start click to JupyterLab's HTTP 200 through the proxy (issue 6; goal: median <= 5 s on an idle
node with the app installed), on the running demo cluster, next to the floor measured on the same cluster.

* **portal**: headless chromium (Playwright, Debian's chromium) logged in as alice fills the start form (JupyterLab,
  1 GPU) and clicks Start. From the click on, the same browser context polls the session's Connect link every
  100 ms (``GET /sessions/<job>/connect``; once the session is ready, its one-time ticket is followed to the apps'
  origin, ``/proxy/<job>/lab``, through nginx's ``auth_request`` owner check) until JupyterLab answers 200, and
  ``/api/sessions`` until the portal offers Connect (its own readiness check). The session is then stopped through
  the API and the next run waits until ``squeue`` is empty (idle nodes).
* **floor**: on the head, ``sbatch`` as alice of a bare ``jupyter lab`` from the same environment
  (``/opt/carme/envs/jupyter``), polled directly on its node's port every 100 ms until ``/lab`` answers 200:
  no portal, no launcher, no proxy. The brief's reference: 2.5 s on the CI machine's host Slurm.

Runs alternate (floor, portal, floor, portal, ...) so both see the same machine load. Needs the demo up (``make
demo``); everything it talks to is the demo (127.0.0.1:8443 and the demo containers); bounded by ``--runs`` and a
per-run timeout, it stops by itself.

Usage::

    .venv/bin/python bench/bench_start.py                  # 5 + 5 runs -> bench/results/start.json
    .venv/bin/python bench/bench_start.py --runs 2 --out /tmp/start.json
    .venv/bin/python bench/bench_start.py --container base   # container starts (issue 13) side by side
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fixtures.demo import APPS  # noqa: E402
from tests.fixtures.demo import BASE  # noqa: E402
from tests.fixtures.demo import CHROMIUM  # noqa: E402
from tests.fixtures.demo import CHROMIUM_ARGS  # noqa: E402
from tests.fixtures.demo import HEAD  # noqa: E402
from tests.fixtures.demo import Demo  # noqa: E402
from tests.fixtures.demo import Steps  # noqa: E402
from tests.fixtures.demo import csrf_headers  # noqa: E402
from tests.fixtures.demo import goto_again_if_the_network_changed  # noqa: E402
from tests.fixtures.demo import login  # noqa: E402
from tests.fixtures.demo import on_head  # noqa: E402
from tests.fixtures.demo import portal_answers  # noqa: E402
from tests.fixtures.demo import run  # noqa: E402

MAX_RUNS = 20
RUN_TIMEOUT_S = 120.0
POLL_S = 0.1
JUPYTER_ENV = "/opt/carme/envs/jupyter"

# Runs inside the head container (python3 of the node image): submit a bare JupyterLab as alice, poll its port.
FLOOR_SCRIPT = r"""
import json, subprocess, sys, time, urllib.request, urllib.error
env, port, token, timeout = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
cmd = (f"exec {env}/bin/jupyter lab --no-browser --ip=0.0.0.0 --port={port} --ServerApp.token={token} "
       f"--ServerApp.open_browser=False --ServerApp.root_dir=$HOME")
t0 = time.perf_counter()
job = subprocess.run(["runuser", "-u", "alice", "--", "sbatch", "--parsable", "--partition=interactive",
                      "--gres=gpu:1", "--cpus-per-task=1", "--mem=500", "--time=10", "--job-name=bench-floor",
                      "--output=/dev/null", "--chdir=/tmp", "--wrap", cmd],
                     capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
node, t_node, code, t_200 = "", None, 0, None
try:
    while time.perf_counter() - t0 < timeout:
        if not node:
            out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %N"], capture_output=True, text=True).stdout
            state, _, nodes = out.strip().partition(" ")
            if state == "RUNNING" and nodes:
                node, t_node = nodes, time.perf_counter() - t0
        if node:
            try:
                with urllib.request.urlopen(f"http://{node}:{port}/lab?token={token}", timeout=2) as r:
                    code = r.status
            except urllib.error.HTTPError as exc:
                code = exc.code
            except OSError:
                code = 0
            if code == 200:
                t_200 = time.perf_counter() - t0
                break
        time.sleep(0.1)
finally:
    subprocess.run(["scancel", job])
print(json.dumps({"job": int(job), "node": node, "running_s": t_node, "http200_s": t_200, "last_code": code}))
"""


def squeue_empty(timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = on_head("squeue", "--noheader", "--format=%i")
        if out.returncode == 0 and not out.stdout.strip():
            return
        time.sleep(1)
    raise RuntimeError(f"the queue is not empty after {timeout:.0f} s: {on_head('squeue').stdout}")


def floor_run() -> dict[str, Any]:
    port = 20000 + secrets.randbelow(10000)
    proc = run(
        ["podman", "exec", "-i", HEAD, "python3", "-c", FLOOR_SCRIPT, JUPYTER_ENV, str(port),
         secrets.token_hex(16), str(RUN_TIMEOUT_S)],
        timeout=RUN_TIMEOUT_S + 30,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"floor run failed: {proc.stderr.strip()[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def portal_run(page: Any, image: str = "jupyter") -> dict[str, Any]:
    page.goto(f"{BASE}/sessions/new")
    page.select_option("select[name=app]", "jupyterlab")
    page.select_option("select[name=image]", image)
    page.fill("input[name=gpus]", "1")
    page.fill("input[name=time_minutes]", "10")
    api = page.context.request
    t0 = time.perf_counter()
    page.get_by_role("button", name="Start", exact=True).click()
    row = page.wait_for_selector("tr[data-job]", timeout=30_000)
    t_dashboard = time.perf_counter() - t0
    job_id = int(row.get_attribute("data-job") or 0)
    t_connect: float | None = None
    t_200: float | None = None
    last = 0
    polls = 0
    try:
        while time.perf_counter() - t0 < RUN_TIMEOUT_S:
            polls += 1
            # What the Connect button does: the portal checks owner and readiness and hands a one-time ticket to
            # the apps' origin, which sets the session's apps cookie and opens the app (JupyterLab: /lab).
            response = api.get(f"{BASE}/sessions/{job_id}/connect", max_redirects=0)
            last = response.status
            where = response.headers.get("location", "")
            if last == 302 and where.startswith(f"{APPS}/"):
                final = api.get(where)
                last = final.status
                if last == 200 and final.url.startswith(f"{APPS}/proxy/{job_id}/"):
                    t_200 = time.perf_counter() - t0
            if t_connect is None and (polls % 3 == 0 or t_200 is not None):
                sessions = api.get(f"{BASE}/api/sessions").json()["sessions"]
                if any(s["job_id"] == job_id and s["connect_url"] for s in sessions):
                    t_connect = t_connect or time.perf_counter() - t0
            if t_200 is not None and t_connect is not None:
                break
            time.sleep(POLL_S)
    finally:
        stop = api.post(f"{BASE}/api/sessions/{job_id}/stop", headers=csrf_headers(page.context))
        if stop.status != 200:
            on_head("scancel", str(job_id))
    return {
        "job": job_id,
        "dashboard_row_s": round(t_dashboard, 3),
        "connect_offered_s": None if t_connect is None else round(t_connect, 3),
        "http200_s": None if t_200 is None else round(t_200, 3),
        "last_code": last,
    }


def summary(values: list[float | None]) -> dict[str, Any]:
    ok = sorted(v for v in values if v is not None)
    if not ok:
        return {"n": 0, "failed": len(values)}
    return {
        "n": len(ok),
        "failed": len(values) - len(ok),
        "median_s": round(statistics.median(ok), 2),
        "p90_s": round(ok[min(len(ok) - 1, int(0.9 * len(ok)))], 2),
        "min_s": round(ok[0], 2),
        "max_s": round(ok[-1], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help=f"runs of each kind (at most {MAX_RUNS})")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "start.json")
    parser.add_argument(
        "--container", metavar="IMAGE", default="",
        help="also time portal starts in this container image of the catalogue (kind container, e.g. base), "
        "alternating with the environment's",
    )  # fmt: skip
    args = parser.parse_args()
    runs = max(1, min(args.runs, MAX_RUNS))
    why = portal_answers()
    if why:
        print(f"bench_start: the demo is not up ({why}); run `make demo` first", file=sys.stderr)
        return 2
    from playwright.sync_api import Page
    from playwright.sync_api import sync_playwright

    Page.goto = goto_again_if_the_network_changed(Page.goto)  # type: ignore[method-assign]

    load_before = os.getloadavg()
    floor: list[dict[str, Any]] = []
    portal: list[dict[str, Any]] = []
    container: list[dict[str, Any]] = []
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as shots:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page, _ = login(Demo(browser=browser, steps=Steps(Path(shots))), "alice")
            on_head("scancel", "--user", "alice")
            for i in range(runs):
                squeue_empty()
                floor.append(floor_run())
                print(f"floor  {i + 1}/{runs}: {floor[-1]}", flush=True)
                squeue_empty()
                portal.append(portal_run(page))
                print(f"portal {i + 1}/{runs}: {portal[-1]}", flush=True)
                if args.container:
                    squeue_empty()
                    container.append(portal_run(page, args.container))
                    print(f"container {i + 1}/{runs}: {container[-1]}", flush=True)
        finally:
            browser.close()
    squeue_empty()
    result = {
        "benchmark": "Start click to JupyterLab HTTP 200 through the proxy (bench/bench_start.py)",
        "goal": {"portal_http200_median_s": 5.0, "brief": "within 0.5 s of the bare sbatch floor"},
        "setup": {
            "cluster": "the demo: 3 podman containers (head + 2 nodes x 2 fake GPUs) on this VM",
            "app": f"JupyterLab from {JUPYTER_ENV} (runtime none), 1 GPU, partition interactive",
            "poll_interval_s": POLL_S,
            "portal_path": "chromium click -> POST /sessions/new -> sbatch via slurmrestd -> launcher -> "
            "GET /sessions/<job>/connect -> ticket -> apps origin /proxy/<job>/lab via nginx auth_request",
            "floor_path": "sbatch --wrap 'jupyter lab' on the head, GET http://<node>:<port>/lab directly",
        },
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "load_avg_before": [round(x, 2) for x in load_before],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "portal": {
            "http200": summary([r["http200_s"] for r in portal]),
            "connect_offered": summary([r["connect_offered_s"] for r in portal]),
            "dashboard_row": summary([r["dashboard_row_s"] for r in portal]),
            "runs": portal,
        },
        "container": {
            "image": args.container,
            "http200": summary([r["http200_s"] for r in container]),
            "connect_offered": summary([r["connect_offered_s"] for r in container]),
            "runs": container,
        }
        if args.container
        else None,
        "floor": {
            "http200": summary([r["http200_s"] for r in floor]),
            "running": summary([r["running_s"] for r in floor]),
            "runs": floor,
        },
    }
    p_med = result["portal"]["http200"].get("median_s")
    f_med = result["floor"]["http200"].get("median_s")
    result["portal_minus_floor_median_s"] = None if p_med is None or f_med is None else round(p_med - f_med, 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("portal_minus_floor_median_s", "load_avg_before")}))
    print(json.dumps({"portal": result["portal"]["http200"], "floor": result["floor"]["http200"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
