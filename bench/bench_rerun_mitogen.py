#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The site.yml re-run on the deployed demo with Mitogen against without (issue 32: re-run <= 60 s, "try mitogen").

Both runs are ``ansible-playbook site.yml`` on the demo's inventory with nothing to change, one after the other,
Mitogen's first (``make bench`` runs the ``rerun`` bench just before, which leaves the fact cache warm; where it has
expired, the first run pays for gathering, which can only make Mitogen look slower):

* ``linear``: what ``carme deploy`` runs: ansible-core's ``linear`` strategy over the test bed's ``podman_nsenter``
  connection (nsenter + pipelining);
* ``mitogen``: Mitogen for Ansible (PyPI ``mitogen``, pinned below; fetched once into a cache and put on
  ``PYTHONPATH``, never installed into the venv), its ``mitogen_linear`` strategy over its ``podman`` connection, from a
  copy of the demo's inventory that names that connection (beside it, so its relative secret paths still resolve;
  removed after).

Not the product's deploy: ``carme deploy`` does not use Mitogen (sites would need its ``ssh`` and ``sudo`` paths
tested like ours). Writes ``bench/results/rerun-mitogen.json``.

    .venv/bin/python bench/bench_rerun_mitogen.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MITOGEN = "0.3.54"
CACHE = Path(os.environ.get("CARME_BENCH_CACHE", "/var/cache/carme/bench")) / "mitogen"
PLAYBOOK = [str(Path(sys.executable).parent / "ansible-playbook"), "site.yml"]
RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def mitogen_dir(into: Path) -> Path:
    """Mitogen's wheel (fetched once into CACHE) unpacked into ``into``: the directory for PYTHONPATH."""
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = sorted(CACHE.glob(f"mitogen-{MITOGEN}-*.whl"))
    if not wheels:
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(CACHE)]
        subprocess.run([*pip, f"mitogen=={MITOGEN}"], check=True, timeout=300)
        wheels = sorted(CACHE.glob(f"mitogen-{MITOGEN}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(into)
    return into


def mitogen_inventory(dest: Path) -> Path:
    """The demo's inventory with Mitogen's ``podman`` connection, beside the demo's (group_vars linked)."""
    dest.mkdir()
    hosts = (REPO / "inventories" / "demo" / "hosts.yml").read_text()
    changed = re.sub(r"ansible_connection: podman_nsenter\b.*", "ansible_connection: podman", hosts)
    if changed == hosts:
        raise SystemExit("the demo inventory names no podman_nsenter connection: nothing to compare")
    (dest / "hosts.yml").write_text(changed)
    (dest / "group_vars").symlink_to(REPO / "inventories" / "demo" / "group_vars")
    return dest / "hosts.yml"


def timed_run(inventory: Path, env: dict[str, str]) -> dict[str, object]:
    t0 = time.monotonic()
    proc = subprocess.run([*PLAYBOOK, "-i", str(inventory)], cwd=REPO, env=env, capture_output=True, text=True)
    wall = round(time.monotonic() - t0, 1)
    hosts = {m[0]: {"ok": int(m[1]), "changed": int(m[2]), "unreachable": int(m[3]), "failed": int(m[4])}
             for m in RECAP.findall(proc.stdout)}  # fmt: skip
    if proc.returncode != 0 or not hosts:
        raise SystemExit(f"{inventory}: ansible-playbook exited {proc.returncode}\n{proc.stdout[-3000:]}")
    return {"wall_s": wall, "hosts": hosts, "changed": sum(h["changed"] for h in hosts.values())}


def main() -> int:
    base = dict(os.environ)
    demo = REPO / "inventories" / "demo" / "hosts.yml"
    inventory_dir = REPO / "inventories" / f".bench-mitogen-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="carme-mitogen-") as tmp:
        lib = mitogen_dir(Path(tmp))
        mitogen = dict(base, PYTHONPATH=str(lib), ANSIBLE_STRATEGY="mitogen_linear",
                       ANSIBLE_STRATEGY_PLUGINS=str(lib / "ansible_mitogen" / "plugins" / "strategy"))  # fmt: skip
        try:
            with_mitogen = timed_run(mitogen_inventory(inventory_dir), mitogen)
            linear = timed_run(demo, base)
        finally:
            shutil.rmtree(inventory_dir, ignore_errors=True)
    result = {
        "benchmark": "site.yml re-run on the deployed demo, nothing to change: linear + podman_nsenter (carme deploy's)"
        " against Mitogen's mitogen_linear + podman",
        "goal_s": 60.0,
        "mitogen": MITOGEN,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_avg_before": os.getloadavg(),
        "linear": linear,
        "mitogen_linear": with_mitogen,
        "speedup": round(float(str(linear["wall_s"])) / float(str(with_mitogen["wall_s"])), 2),
    }
    (REPO / "bench" / "results" / "rerun-mitogen.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("linear", "mitogen_linear")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
