# SPDX-License-Identifier: GPL-3.0-or-later
"""Setup-time benchmark: node image build, demo nodes up, first and second site.yml run.

Run from the repository root as root: `python bench/bench_setup.py [--rebuild-image] [--fresh-demo]`.
`--fresh-demo` removes the demo nodes first, so the first site.yml run starts from bare containers.
Writes bench/results/setup.json. It takes several minutes; it is not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARME = [sys.executable, "-m", "carme_admin.commands"]


def timed(argv: list[str]) -> tuple[float, str]:
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"failed: {argv} (rc {proc.returncode})")
    return elapsed, proc.stdout


def deploy() -> tuple[float, dict[str, object]]:
    elapsed, out = timed([*CARME, "deploy", "--json"])
    stats = json.loads(out[out.index("{") :])
    return elapsed, stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rebuild-image", action="store_true")
    parser.add_argument("--fresh-demo", action="store_true")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    results: dict[str, object] = {"machine": f"{platform.node()} {platform.machine()}, cores={cores}"}
    if args.rebuild_image:
        results["image_build_s"] = round(timed(["bash", "images/node/build.sh", "--force"])[0], 1)
    if args.fresh_demo:
        timed([*CARME, "demo", "down"])
    results["demo_nodes_up_s"] = round(timed([*CARME, "demo", "up", "--no-deploy"])[0], 1)
    first_s, first = deploy()
    second_s, second = deploy()
    results.update(
        site_first_run_s=round(first_s, 1),
        site_first_run_changed=first.get("changed"),
        site_second_run_s=round(second_s, 1),
        site_second_run_changed=second.get("changed"),
        date=time.strftime("%Y-%m-%d"),
    )
    out = ROOT / "bench" / "results" / "setup.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous.update(results)
    out.write_text(json.dumps(previous, indent=2) + "\n")
    print(json.dumps(previous, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
