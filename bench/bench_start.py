#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Start latency, honestly (issues 6 and 18): a portal start against a floor that runs the same launcher and the
same app, with each run's time split where it goes; then N users starting at once.

All on the running demo (``make demo``); everything it talks to is the demo (127.0.0.1:8443/8444 and the demo
containers). Runs alternate (floor, portal, floor, portal, ...) so both see the same machine load.

**portal**: headless chromium (Playwright, Debian's chromium) logged in as alice fills the start form (JupyterLab,
image ``jupyter``, 1 GPU, 10 minutes) and clicks Start: ``POST /sessions/new`` -> the portal submits as alice through
slurmrestd (``webui.sessions.service.start_session`` -> ``carme_runtime.sessions.build_rest_payload``: the constant
script ``exec carme-launch``, the job environment ``PATH`` + ``CARME_*`` with a fresh session secret). From the click
on, the browser stays on the dashboard the POST leads to (its ``dashboard.js`` asks ``/api/sessions`` every 0.5 s
while a session starts and updates the session's row in place) until the session's Connect button is shown, then
follows Connect as the button does (``/sessions/<job>/connect`` -> one-time ticket -> the apps'
origin -> ``/proxy/<job>/lab`` through nginx's ``auth_request`` and the session front) until JupyterLab answers 200.
The session is then stopped through the API.

**floor**: the same request without the portal: on the head, as alice, ``sbatch`` of the same constant script
(``carme_runtime.sessions.build_sbatch_argv``, the runtime's own sbatch path) on the same partition and QOS, with the
same CPUs, memory, GPU, time limit, working directory and output file, and the same job environment
(``carme_runtime.sessions.build_job_environment``: ``CARME_APP``, ``CARME_IMAGE``, ``CARME_RUNTIME``,
``CARME_WORKDIR``, ``PATH``, and a session secret generated here like the portal's, ``secrets.token_urlsafe(32)``).
The request (partition, QOS, account, CPUs, memory, GPUs, time limit, working directory) is copied from a warm-up
portal job's Slurm record, and the app/image/runtime from that job launcher's own environment
(``/proc/<pid>/environ`` on its node); both are checked against a warm-up floor job and reported under
``same_request``. So the floor runs the same ``carme-launch``, which starts the same session front and the same
JupyterLab from ``/opt/carme/envs/jupyter``. It is polled directly on its node's port from the head (the front, with
the session's front key and token: what nginx would add), no portal, no ticket, no proxy.

What differs between the two paths, and nothing else:

* submission: ``sbatch`` run inside the head (``--export`` of the same variable names; sbatch adds its ``SLURM_*``
  variables, among them ``SLURM_CPUS_PER_TASK``, which a slurmrestd job lacks) against the portal's POST, its checks
  (live scheduler state, GPU-hour quota from slurmdbd) and slurmrestd's submit (JWT as alice; the environment exactly
  as sent). Both are batch jobs of the same user, partition and QOS: Slurm schedules both the same way;
* the floor's client polls the app through the front directly as soon as it answers; the portal path waits for the
  launcher to see the app ready (its own probe, every 0.5 s), prove its front and publish ``state=ready`` in the job
  comment (``scontrol update``), for the portal to see that comment (its scheduler-state cache: at most
  ``STARTING_STATE_SECONDS`` = 0.5 s old while a session starts, per gunicorn worker) and probe the front itself, for
  the dashboard's next look (``STARTING_POLL_SECONDS`` = 0.5 s) and reload, and then for Connect, the ticket, nginx's
  ``auth_request`` and the proxy.

Breakdown. A watcher runs inside the head for the whole bench (one ``podman exec``; the head's
``/opt/carme/venv`` python, for ``carme_runtime.front``): ``squeue`` every 0.1 s (each state and comment change,
stamped with the middle of the call), the users' ``~/.carme/sessions/<job>.json`` every 0.05 s (the launcher writes
it right after its front listens, before the app starts; its mtime is recorded too), and, once that file names the
front, ``GET <base_url>api/status`` through the front every 0.05 s (the launcher's own readiness probe) and then
``GET <base_url>lab``. The head and the host share the kernel's wall clock (containers do not have their own), so
every stamp is ``time.time()`` on one clock, taken relative to the click (portal) or to the moment sbatch was called
inside the head (floor). Milestones, in order:

* ``t_submit``: the start POST answered (portal) / sbatch returned with the job id (floor);
* ``t_running``: ``squeue`` first shows the job RUNNING;
* ``t_front``: the launcher's connection file appeared (its front listens; the app is being started);
* ``t_listening``: the app answers ``api/status`` through its front (polled from the head);
* ``t_published``: ``squeue`` shows the launcher's ``state=ready`` comment (portal path; shown for the floor too);
* ``t_ready_portal``: the dashboard shows Connect (portal only; the concurrent starts poll ``/api/sessions``);
* ``t_200``: JupyterLab's ``/lab`` answers 200: through the proxy (portal) / directly through the front (floor).

Segments are differences of consecutive milestones (a milestone seen before the previous one, e.g. RUNNING seen
before the POST's answer arrived, counts 0 there); medians and p90 (nearest rank) of each are in the results. Slurm's
own SubmitTime/StartTime (whole seconds) are recorded per job as a cross-check.

**concurrent** (``--concurrent N``): N sessions (JupyterLab, 0 GPUs: 1-GPU sessions are limited to one per user by
the ``interactive`` QOS) started at the same moment from separate browser contexts of the demo's users (alice, bob,
carol, round robin), each polled like the portal runs and stopped as soon as it answered 200 through the proxy; the
time until the last one answered. The demo has 3 users, the portal allows ``max_sessions`` each (read from their
dashboard) and the cluster holds ``cluster_slots`` sessions at once (2 nodes x 2 CPUs, 1 CPU per session): fewer than
N may start; the result says how many and why. Bounded by a per-session timeout; every job is stopped afterwards.

Usage::

    .venv/bin/python bench/bench_start.py --runs 2 --concurrent 3 --out /tmp/start.json
    .venv/bin/python bench/bench_start.py --runs 20 --concurrent 10 --plot bench/results/start.png   # make bench
    .venv/bin/python bench/bench_start.py --container base   # container starts (issue 13) side by side
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from carme_runtime.apps import load_apps  # noqa: E402
from carme_runtime.sessions import JOB_SCRIPT  # noqa: E402
from carme_runtime.sessions import SessionRequest  # noqa: E402
from carme_runtime.sessions import build_job_environment  # noqa: E402
from carme_runtime.sessions import build_sbatch_argv  # noqa: E402
from tests.fixtures.demo import BASE  # noqa: E402
from tests.fixtures.demo import CHROMIUM  # noqa: E402
from tests.fixtures.demo import CHROMIUM_ARGS  # noqa: E402
from tests.fixtures.demo import HEAD  # noqa: E402
from tests.fixtures.demo import NODE_PREFIX  # noqa: E402
from tests.fixtures.demo import Demo  # noqa: E402
from tests.fixtures.demo import Steps  # noqa: E402
from tests.fixtures.demo import apps_origin  # noqa: E402
from tests.fixtures.demo import csrf_headers  # noqa: E402
from tests.fixtures.demo import goto_again_if_the_network_changed  # noqa: E402
from tests.fixtures.demo import login  # noqa: E402
from tests.fixtures.demo import on_head  # noqa: E402
from tests.fixtures.demo import portal_answers  # noqa: E402
from tests.fixtures.demo import run  # noqa: E402

MAX_RUNS = 20
RUN_TIMEOUT_S = 60.0
POLL_S = 0.1
USERS = ("alice", "bob", "carol")
APP = "jupyterlab"
IMAGE = "jupyter"  # the catalogue entry: /opt/carme/envs/jupyter, kind environment (runtime none)
SESSION_MINUTES = 10
HEAD_PYTHON = "/opt/carme/venv/bin/python3"  # carme_runtime's venv on the head (carme_runtime.front)

# Inside the head, for the whole bench: squeue, the launchers' connection files, each new front probed directly.
# One JSON line per event on stdout; ends at EOF on stdin (the bench closes it) or after its lifetime.
FLOOR_SECRETS = "/root/.carme-bench-floor"  # in the head: the floor's session secrets, for the watcher's probe
WATCH_SCRIPT = r"""
import glob, json, os, subprocess, sys, threading, time
from carme_runtime.front import front_headers
from carme_runtime.launch import probe_http
LIFETIME, SQUEUE_S, FILE_S, PROBE_S, PROBE_FOR = (float(a) for a in sys.argv[1:6])
FLOOR_SECRETS = sys.argv[6]
out_lock = threading.Lock()
def emit(**ev):
    ev.setdefault("ts", time.time())
    with out_lock:
        sys.stdout.write(json.dumps(ev) + "\n")
        sys.stdout.flush()
def stdin_eof():
    sys.stdin.read()
    os._exit(0)
threading.Thread(target=stdin_eof, daemon=True).start()
threading.Thread(target=lambda: (time.sleep(LIFETIME), os._exit(0)), daemon=True).start()
def stamp(value):
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))  # scontrol prints local time: same TZ here
    except (TypeError, ValueError):
        return None
def slurm_times(job):
    shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
    f = dict(t.split("=", 1) for t in shown.split() if "=" in t)
    emit(ev="slurm", job=int(job), submit_time=stamp(f.get("SubmitTime")), start_time=stamp(f.get("StartTime")),
         node=f.get("BatchHost"), scheduler=f.get("Scheduler"))
def squeue_loop():
    known, first = {}, True
    while True:
        t1 = time.time()
        p = subprocess.run(["squeue", "-h", "-a", "-o", "%i|%u|%T|%N|%r|%k"], capture_output=True, text=True)
        t2 = time.time()
        if p.returncode != 0:
            time.sleep(SQUEUE_S)
            continue
        ts = (t1 + t2) / 2
        now = {}
        for line in p.stdout.splitlines():
            parts = line.split("|", 5)
            if len(parts) == 6:
                now[parts[0]] = parts
        for job, parts in now.items():
            if known.get(job) != parts:
                emit(ev="job", ts=ts, call_s=round(t2 - t1, 4), job=int(job), user=parts[1], state=parts[2],
                     nodes=parts[3], reason=parts[4], comment=parts[5])
                if parts[2] == "RUNNING" and (job not in known or known[job][2] != "RUNNING"):
                    threading.Thread(target=slurm_times, args=(job,), daemon=True).start()
        for job in set(known) - set(now):
            emit(ev="gone", ts=ts, job=int(job))
        if len(now) != len(known) or first:
            emit(ev="queue", ts=ts, n=len(now))
        known, first = now, False
        time.sleep(SQUEUE_S)
def floor_secret(job):
    # The connection file no longer holds the session secret (issue 27: nothing the app can read opens its front). The
    # bench made the floor's secret itself and leaves it here (root only) right after sbatch; a portal session's is
    # the portal's, so those fronts are not probed (their listening/direct_200 milestones are not measured).
    path = f"{FLOOR_SECRETS}/{job}"
    for _ in range(100):
        try:
            with open(path) as fh:
                return fh.read().strip()
        except OSError:
            time.sleep(0.05)
    return None
def probe(info):
    secret = info.get("secret") or floor_secret(int(info["job_id"]))
    if not secret:
        emit(ev="probe_skipped", job=int(info["job_id"]), why="no session secret")
        return
    job, base = int(info["job_id"]), info["base_url"]
    headers = front_headers(secret, job)
    deadline = time.time() + PROBE_FOR
    stage, path, code = "listening", base + "api/status", None
    while time.time() < deadline:
        code = probe_http(info["host"], int(info["port"]), path, headers, 2)
        if code is not None and 200 <= code < 400 and stage == "listening":
            emit(ev="listening", job=job, code=code)
            stage, path = "direct_200", base + "lab"
            continue
        if stage == "direct_200" and code == 200:
            emit(ev="direct_200", job=job)
            return
        time.sleep(PROBE_S)
    emit(ev="probe_timeout", job=job, stage=stage, last_code=code)
def files_loop():
    pattern = "/home/*/.carme/sessions/*.json"
    seen = set(glob.glob(pattern))
    while True:
        for path in glob.glob(pattern):
            if path in seen:
                continue
            ts = time.time()
            try:
                with open(path) as fh:
                    info = json.load(fh)
                mtime = os.stat(path).st_mtime
            except (OSError, ValueError):
                continue  # being replaced: next round
            seen.add(path)
            emit(ev="front", ts=ts, mtime=mtime, job=int(info["job_id"]), host=info["host"], port=info["port"])
            threading.Thread(target=probe, args=(info,), daemon=True).start()
        time.sleep(FILE_S)
threading.Thread(target=files_loop, daemon=True).start()
emit(ev="started")
squeue_loop()
"""

# Inside the head: submit the floor's job as the user with sbatch (the job environment on stdin, never in argv).
SUBMIT_SCRIPT = r"""
import json, subprocess, sys, time
spec = json.loads(sys.stdin.read())
argv = ["runuser", "-u", spec["user"], "--", "env", "PATH=" + spec["env"]["PATH"], *spec["argv"]]
t0 = time.time()
p = subprocess.run(argv, input=spec["script"], env=spec["env"], capture_output=True, text=True)
t1 = time.time()
print(json.dumps({"t0": t0, "t_submit": t1, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-1000:]}))
"""

# On a node: the environment of a job's carme-launch (the batch step's process), the secret replaced by its length.
LAUNCHER_ENV_SCRIPT = r"""
import json, subprocess, sys
job = sys.argv[1]
listed = subprocess.run(["scontrol", "listpids", job], capture_output=True, text=True).stdout.splitlines()
pids = [line.split()[0] for line in listed if line.split() and line.split()[0].isdigit()]
for pid in pids:
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        continue
    if not any(b"carme-launch" in c for c in cmd):
        continue
    pairs = dict(e.decode(errors="replace").split("=", 1) for e in env if b"=" in e)
    keep = {k: v for k, v in pairs.items() if k.startswith("CARME_") or k in ("PATH", "SLURM_JOB_PARTITION",
            "SLURM_JOB_QOS", "SLURM_JOB_ACCOUNT", "SLURM_CPUS_PER_TASK", "SLURM_MEM_PER_NODE", "SLURM_JOB_USER")}
    if "CARME_SESSION_SECRET" in keep:
        keep["CARME_SESSION_SECRET"] = f"<{len(keep['CARME_SESSION_SECRET'])} characters>"
    keep["argv"] = [c.decode(errors="replace") for c in cmd if c]
    print(json.dumps(keep))
    break
else:
    seen = {}
    for pid in pids:
        try:
            seen[pid] = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError as exc:
            seen[pid] = str(exc)
    print(json.dumps({"error": f"no carme-launch among the pids of job {job}: {seen}"}))
"""

PORTAL_MILESTONES = ("t_submit", "t_running", "t_front", "t_listening", "t_published", "t_ready_portal", "t_200")
FLOOR_MILESTONES = ("t_submit", "t_running", "t_front", "t_listening", "t_200")
SEGMENT_NAMES = {
    "t_submit": "click/sbatch -> submitted",
    "t_running": "submitted -> RUNNING",
    "t_front": "RUNNING -> launcher's front up",
    "t_listening": "front up -> app answers",
    "t_published": "app answers -> launcher published ready",
    "t_ready_portal": "published -> portal says ready",
    "t_200": "-> 200 (proxy for the portal, direct for the floor)",
}
#: the issue's coarse breakdown: (name, from milestone or None for the click, to milestone)
COARSE = (
    ("submit_to_running", "t_submit", "t_running"),
    ("running_to_listening", "t_running", "t_listening"),
    ("listening_to_portal_ready", "t_listening", "t_ready_portal"),
    ("portal_ready_to_200", "t_ready_portal", "t_200"),
    ("listening_to_200", "t_listening", "t_200"),
)


class Watcher:
    """The head-side watcher (WATCH_SCRIPT) and what it saw, per job: the first time of each milestone."""

    def __init__(self, lifetime_s: float = 1500.0) -> None:
        self.jobs: dict[int, dict[str, Any]] = {}
        self.queue_n = -1
        self.squeue_call_s: list[float] = []
        self.cond = threading.Condition()
        argv = ["podman", "exec", "-i", HEAD, HEAD_PYTHON, "-u", "-c", WATCH_SCRIPT, str(lifetime_s), "0.1", "0.05",
                "0.05", str(RUN_TIMEOUT_S * 2), FLOOR_SECRETS]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        with self.cond:
            if not self.cond.wait_for(lambda: self.queue_n >= 0 or self.proc.poll() is not None, timeout=30):
                raise RuntimeError("the head watcher did not start")
        if self.proc.poll() is not None:
            raise RuntimeError(f"the head watcher exited ({self.proc.returncode})")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                self._record(ev)
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def _first(self, job: int, key: str, ts: float) -> None:
        self.jobs.setdefault(job, {}).setdefault(key, ts)

    def _record(self, ev: dict[str, Any]) -> None:
        kind, ts = ev.get("ev"), float(ev.get("ts", 0.0))
        if kind == "queue":
            self.queue_n = int(ev["n"])
            return
        job = int(ev.get("job", 0))
        if not job:
            return
        rec = self.jobs.setdefault(job, {})
        if kind == "job":
            self.squeue_call_s.append(float(ev.get("call_s", 0.0)))
            rec.setdefault("user", ev["user"])
            self._first(job, ev["state"], ts)
            if ev["state"] == "PENDING" and ev.get("reason") not in (None, "", "None"):
                rec.setdefault("pending_reasons", []).append(ev["reason"])
            if ev["state"] == "RUNNING" and ev["nodes"]:
                rec.setdefault("node", ev["nodes"])
            if "state=ready" in ev["comment"]:
                self._first(job, "published", ts)
            if "state=failed" in ev["comment"]:
                self._first(job, "launch_failed", ts)
        elif kind == "gone":
            self._first(job, "gone", ts)
        elif kind == "front":
            self._first(job, "front", ts)
            rec.setdefault("front_mtime", float(ev["mtime"]))
        elif kind in ("listening", "direct_200"):
            self._first(job, kind, ts)
        elif kind == "probe_timeout":
            rec["probe_timeout"] = {"stage": ev.get("stage"), "last_code": ev.get("last_code")}
        elif kind == "slurm":
            rec["slurm"] = {k: ev.get(k) for k in ("submit_time", "start_time", "node", "scheduler")}

    def get(self, job: int) -> dict[str, Any]:
        with self.cond:
            return dict(self.jobs.get(job, {}))

    def wait_for(self, job: int, key: str, timeout: float) -> float | None:
        """The time of ``key`` for ``job`` (waiting up to ``timeout``), None if not seen in time or the job is gone."""
        with self.cond:
            self.cond.wait_for(
                lambda: (
                    key in self.jobs.get(job, {}) or "gone" in self.jobs.get(job, {}) or self.proc.poll() is not None
                ),
                timeout=timeout,
            )
            value = self.jobs.get(job, {}).get(key)
            return None if value is None else float(value)

    def wait_idle(self, timeout: float) -> float:
        """Wait until squeue is empty; returns the seconds waited (``timeout`` when it never was)."""
        t0 = time.monotonic()
        with self.cond:
            self.cond.wait_for(lambda: self.queue_n == 0 or self.proc.poll() is not None, timeout=timeout)
        return time.monotonic() - t0

    def close(self) -> None:
        close_child(self.proc)


def rel(t: float | None, t0: float) -> float | None:
    return None if t is None else round(t - t0, 3)


def milestones_from(seen: dict[str, Any], t0: float) -> dict[str, float | None]:
    return {
        "t_running": rel(seen.get("RUNNING"), t0),
        "t_front": rel(seen.get("front"), t0),
        "t_listening": rel(seen.get("listening"), t0),
        "t_published": rel(seen.get("published"), t0),
    }


def slurm_seconds(seen: dict[str, Any], t0: float) -> dict[str, Any]:
    """Slurm's own record (whole seconds): submit and start relative to t0, and start - submit."""
    s = seen.get("slurm") or {}
    sub, start = s.get("submit_time"), s.get("start_time")
    return {
        "submit_s": rel(sub, t0),
        "start_s": rel(start, t0),
        "start_minus_submit_s": None if sub is None or start is None else round(start - sub, 0),
        "scheduler": s.get("scheduler"),
        # squeue's reasons while the job pended (None/empty ones are not recorded): why it waited, if it did
        "pending_reasons": sorted(set(seen.get("pending_reasons", []))),
    }


def close_child(proc: subprocess.Popen[str]) -> None:
    """End a helper started with a stdin pipe (``podman exec -i``): close its stdin, wait 10 s, then kill it."""
    with contextlib.suppress(OSError, ValueError):
        assert proc.stdin is not None
        proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- the floor ---------------------------------------------------------------------------------


def job_record(job: int) -> dict[str, str]:
    shown = on_head("scontrol", "show", "job", "-o", str(job)).stdout
    return dict(token.split("=", 1) for token in shown.split() if "=" in token)


#: what the floor must ask for like the portal, as scontrol shows it (StdOut with the job id put back as %j)
REQUEST_FIELDS = ("UserId", "Partition", "QOS", "Account", "NumNodes", "NumTasks", "NumCPUs", "CPUs/Task",
                  "MinMemoryNode", "TresPerNode", "TimeLimit", "WorkDir", "StdOut", "Requeue")  # fmt: skip


def request_of(fields: dict[str, str], job: int) -> dict[str, str]:
    out = {k: fields.get(k, "") for k in REQUEST_FIELDS}
    out["UserId"] = out["UserId"].split("(")[0]
    out["StdOut"] = out["StdOut"].replace(str(job), "%j")
    return out


def launcher_env(job: int, node: str, fields: dict[str, str]) -> dict[str, Any]:
    """The environment of the job's carme-launch, read on its node as the job's user and group (root in the container
    may not read another user's /proc/<pid>/environ: no CAP_SYS_PTRACE)."""
    uid = m.group(1) if (m := re.search(r"\((\d+)\)", fields.get("UserId", ""))) else "0"
    gid = m.group(1) if (m := re.search(r"\((\d+)\)", fields.get("GroupId", ""))) else "0"
    where = [NODE_PREFIX + node, HEAD_PYTHON, "-c", LAUNCHER_ENV_SCRIPT, str(job)]
    argv = ["podman", "exec", "--user", f"{uid}:{gid}", *where]  # the kernel wants uid and gid to match
    proc = run(argv)
    try:
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {"error": f"{proc.returncode}: {proc.stderr.strip()[-500:]}"}


def minutes_of(limit: str) -> int:
    """scontrol's TimeLimit ([D-]HH:MM:SS or MM:SS) in minutes."""
    days, _, rest = limit.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 1440 + parts[0] * 60 + parts[1] + (1 if parts[2] else 0)


def floor_request(portal_fields: dict[str, str], portal_env: dict[str, Any]) -> tuple[SessionRequest, str]:
    """The portal job's request as a carme_runtime SessionRequest (for build_sbatch_argv), and its runtime."""
    gres = portal_fields.get("TresPerNode", "")
    gpus = int(m.group(1)) if (m := re.search(r"gpu(?::[A-Za-z0-9_]+)?:(\d+)", gres)) else 0
    nodes = int(portal_fields.get("NumNodes", "1").split("-")[0])
    mem = portal_fields.get("MinMemoryNode", "0")
    mem_mb = int(float(mem[:-1]) * (1024 if mem.endswith("G") else 1)) if mem[-1:] in "MG" else int(mem)
    req = SessionRequest(
        user="alice",
        app=str(portal_env.get("CARME_APP", APP)),
        image=str(portal_env["CARME_IMAGE"]),
        gpus=gpus,
        cpus=int(portal_fields.get("CPUs/Task") or portal_fields.get("NumCPUs", "1")),
        mem_mb=mem_mb,
        time_minutes=minutes_of(portal_fields.get("TimeLimit", "00:10:00")),
        nodes=nodes,
        partition=portal_fields.get("Partition", ""),
        qos=portal_fields.get("QOS", ""),
        account=portal_fields.get("Account", ""),
        workdir=str(portal_env.get("CARME_WORKDIR") or portal_fields.get("WorkDir", "")),
    )
    return req, str(portal_env["CARME_RUNTIME"])


def floor_run(watch: Watcher, req: SessionRequest, runtime: str, check: bool = False) -> dict[str, Any]:
    app = load_apps()[req.app]
    secret = secrets.token_urlsafe(32)  # what the portal generates for a session (webui.sessions.service)
    # --export=ALL, not the runtime's list of names: the submitting environment is that list already (SUBMIT_SCRIPT
    # runs sbatch with exactly it). With a list, Slurm 24.11's slurmd in the test bed's node containers exits at the
    # job's launch ("fatal: clone: Operation not permitted"; a plain `sbatch --export=PATH --wrap hostname` does it
    # too): docs/verification.md "Not yet kept"
    argv = [a if not a.startswith("--export=") else "--export=ALL" for a in build_sbatch_argv(req, app, runtime)]
    spec = {
        "user": req.user,
        "argv": argv,
        "env": build_job_environment(req, app, runtime, secret),
        "script": JOB_SCRIPT,
    }
    proc = run(["podman", "exec", "-i", HEAD, "python3", "-c", SUBMIT_SCRIPT], timeout=60, stdin=json.dumps(spec))
    try:
        sub = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"submit: {proc.returncode} {proc.stderr.strip()[-500:]}"}
    if sub["rc"] != 0:
        return {"error": f"sbatch: {sub['rc']} {sub['stderr'].strip()}"}
    job = int(sub["stdout"].strip().split(";")[0])
    # for the watcher's probe of this job's front (WATCH_SCRIPT's floor_secret), root-only in the head
    keep = f"umask 077 && mkdir -p {FLOOR_SECRETS} && cat > {FLOOR_SECRETS}/{job}"
    run(["podman", "exec", "-i", HEAD, "sh", "-c", keep], timeout=30, stdin=secret)
    t0 = float(sub["t0"])
    result: dict[str, Any] = {"job": job, "t_submit": rel(float(sub["t_submit"]), t0)}
    extra: dict[str, Any] = {}
    try:
        t_200 = watch.wait_for(job, "direct_200", max(1.0, t0 + RUN_TIMEOUT_S - time.time()))
        seen = watch.get(job)
        result.update(milestones_from(seen, t0))
        result["t_200"] = rel(t_200, t0)
        if t_200 is not None and "published" not in seen:  # for the record: when the launcher published
            watch.wait_for(job, "published", 3.0)
            result["t_published"] = rel(watch.get(job).get("published"), t0)
        result["node"] = seen.get("node")
        if t_200 is None:
            result["error"] = f"no direct 200 within {RUN_TIMEOUT_S:.0f} s: {seen.get('probe_timeout') or seen}"
        if check and seen.get("node"):
            fields = job_record(job)
            extra = {"request": request_of(fields, job), "launcher_env": launcher_env(job, seen["node"], fields)}
    finally:
        on_head("runuser", "-u", req.user, "--", "scancel", str(job))
        on_head("rm", "-f", f"{FLOOR_SECRETS}/{job}")
    result["slurm"] = slurm_seconds(watch.get(job), t0)
    if extra:
        result["check"] = extra
    return result


# --- the portal --------------------------------------------------------------------------------


def ready_then_200(
    get: Callable[[str, bool], tuple[int, str, str]],
    job_id: int,
    t0: float,
    deadline: float,
    t_ready: float | None = None,
) -> dict[str, Any]:
    """Poll /api/sessions until the session is ready (unless ``t_ready`` says when it was seen ready), then follow
    Connect until /proxy/<job>/lab answers 200.

    ``get(url, follow)`` -> (status, Location header, final URL)."""
    t_200: float | None = None
    last = 0
    connects = 0
    while time.time() < deadline and t_200 is None:
        if t_ready is None:
            status, _, body = get(f"{BASE}/api/sessions", True)
            if status == 200 and any(s["job_id"] == job_id and s["ready"] for s in json.loads(body)["sessions"]):
                t_ready = time.time()
                continue
        else:
            connects += 1
            status, where, _ = get(f"{BASE}/sessions/{job_id}/connect", False)
            last = status
            if status == 302 and where.startswith(f"{apps_origin(job_id)}/"):
                status, _, url = get(where, True)
                last = status
                if status == 200 and url.startswith(f"{apps_origin(job_id)}/proxy/{job_id}/"):
                    t_200 = time.time()
                    break
        time.sleep(POLL_S)
    return {"t_ready_portal": rel(t_ready, t0), "t_200": rel(t_200, t0), "connects": connects, "last_code": last}


def sync_getter(api: Any) -> Callable[[str, bool], tuple[int, str, str]]:
    def get(url: str, follow: bool) -> tuple[int, str, str]:
        resp = api.get(url) if follow else api.get(url, max_redirects=0)
        body = resp.text() if url.endswith("/api/sessions") else resp.url
        return resp.status, resp.headers.get("location", ""), body

    return get


def portal_run(page: Any, watch: Watcher, image: str = IMAGE, check: bool = False) -> dict[str, Any]:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(f"{BASE}/sessions/new")
    advanced = page.locator("details.advanced")  # app, image, GPUs and time sit under one disclosure (profiles)
    if advanced.count() and advanced.get_attribute("open") is None:
        advanced.locator("summary").click()
    page.select_option("select[name=app]", APP)
    page.select_option("select[name=image]", image)
    page.fill("input[name=gpus]", "1")
    page.fill("input[name=time_minutes]", str(SESSION_MINUTES))
    api = page.context.request
    with page.expect_response(lambda r: r.url.endswith("/sessions/new") and r.request.method == "POST") as posted:
        t0 = time.time()
        page.get_by_role("button", name="Start", exact=True).click()
    t_submit = time.time()
    if posted.value.status >= 400:
        return {"error": f"start POST answered {posted.value.status}"}
    page.wait_for_selector("tr[data-job]", timeout=30_000)
    t_row = time.time()
    job_id = max(int(r.get_attribute("data-job") or 0) for r in page.query_selector_all("tr[data-job]"))
    result: dict[str, Any] = {"job": job_id, "t_submit": rel(t_submit, t0), "t_dashboard_row": rel(t_row, t0)}
    extra: dict[str, Any] = {}
    try:
        # what the user sees: the dashboard (its dashboard.js asks the portal every 0.5 s and updates the row in
        # place when the session changes) shows Connect for the job
        t_ready: float | None = None
        with contextlib.suppress(PlaywrightTimeout):
            page.wait_for_selector(
                f'tr[data-job="{job_id}"] a.connect', timeout=max(1.0, t0 + RUN_TIMEOUT_S - time.time()) * 1000
            )
            t_ready = time.time()
        deadline = t0 + RUN_TIMEOUT_S if t_ready is not None else time.time()
        result.update(ready_then_200(sync_getter(api), job_id, t0, deadline, t_ready))
        seen = watch.get(job_id)
        result.update(milestones_from(seen, t0))
        result["node"] = seen.get("node")
        if result["t_200"] is None:
            result["error"] = f"no 200 through the proxy within {RUN_TIMEOUT_S:.0f} s (last {result['last_code']})"
        if check and seen.get("node"):
            fields = job_record(job_id)
            extra = {"request": request_of(fields, job_id), "fields": fields,
                     "launcher_env": launcher_env(job_id, seen["node"], fields)}  # fmt: skip
    finally:
        stop = api.post(f"{BASE}/api/sessions/{job_id}/stop", headers=csrf_headers(page.context))
        if stop.status != 200:
            on_head("scancel", str(job_id))
    result["slurm"] = slurm_seconds(watch.get(job_id), t0)
    if extra:
        result["check"] = extra
    return result


# --- N users at once ---------------------------------------------------------------------------


async def ready_then_200_async(api: Any, job_id: int, t0: float) -> tuple[float | None, float | None, int, Any]:
    """Poll /api/sessions until the session is ready, then follow Connect until /proxy/<job>/lab answers 200, for
    at most RUN_TIMEOUT_S after ``t0``: (ready time, 200 time, the last HTTP code, the portal's last view of it)."""
    t_ready: float | None = None
    t_200: float | None = None
    last = 0
    view: dict[str, Any] | None = None
    while time.time() < t0 + RUN_TIMEOUT_S and t_200 is None:
        if t_ready is None:
            listing = await (await api.get(f"{BASE}/api/sessions")).json()
            view = next((s for s in listing["sessions"] if s["job_id"] == job_id), None)
            if view is not None and view["ready"]:
                t_ready = time.time()
                continue
        else:
            conn = await api.get(f"{BASE}/sessions/{job_id}/connect", max_redirects=0)
            last, where = conn.status, conn.headers.get("location", "")
            if last == 302 and where.startswith(f"{apps_origin(job_id)}/"):
                final = await api.get(where)
                last = final.status
                if last == 200 and final.url.startswith(f"{apps_origin(job_id)}/proxy/{job_id}/"):
                    t_200 = time.time()
                    break
        await asyncio.sleep(POLL_S)
    return t_ready, t_200, last, view


async def start_one(api: Any, token: str, user: str, start: asyncio.Event) -> dict[str, Any]:
    """One of the concurrent sessions: started through the API once ``start`` is set, polled until it answers 200
    through the proxy, then stopped."""
    headers = {"X-CSRFToken": token, "Referer": BASE + "/"}
    body = {"app": APP, "image": IMAGE, "gpus": 0, "time_minutes": SESSION_MINUTES}
    await start.wait()
    t0 = time.time()
    resp = await api.post(f"{BASE}/api/sessions", data=body, headers=headers)
    out: dict[str, Any] = {"user": user, "t_submit": rel(time.time(), t0), "t0": t0}
    if resp.status != 201:
        out["error"] = f"start answered {resp.status}: {(await resp.text())[:200]}"
        return out
    job_id = int((await resp.json())["job_id"])
    out["job"] = job_id
    try:
        t_ready, t_200, last, view = await ready_then_200_async(api, job_id, t0)
    finally:
        stop = await api.post(f"{BASE}/api/sessions/{job_id}/stop", headers=headers)
        out["stopped"] = stop.status == 200
    out.update({"t_ready_portal": rel(t_ready, t0), "t_200": rel(t_200, t0), "last_code": last})
    if t_200 is None:
        said = "it no longer lists the session" if view is None else f"its last view: {view}"
        out["error"] = f"no 200 within {RUN_TIMEOUT_S:.0f} s (last code {last}); the portal: {said}"
    return out


def add_watched(results: list[dict[str, Any]], watch: Watcher, t_all: float) -> None:
    """What the head's watcher saw of each concurrent session, and when it started relative to the first."""
    for r in results:
        seen = watch.get(int(r.get("job", 0))) if r.get("job") else {}
        r.update(milestones_from(seen, float(r["t0"])))
        r["node"] = seen.get("node")
        r["pending_reasons"] = sorted(set(seen.get("pending_reasons", [])))
        r["waited_for_a_slot"] = "Resources" in r["pending_reasons"] or "Priority" in r["pending_reasons"]
        r["t_start_offset"] = round(float(r.pop("t0")) - t_all, 3)


async def concurrent_starts(states: dict[str, Any], plan: list[str], watch: Watcher) -> list[dict[str, Any]]:
    """Start ``len(plan)`` sessions at once (``plan``: the user of each), each from its own browser context."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            contexts = [await browser.new_context(ignore_https_errors=True, storage_state=states[u]) for u in plan]
            tokens = []
            for ctx in contexts:
                tokens.append((await (await ctx.request.get(f"{BASE}/api/csrf-token")).json())["csrf_token"])
            start = asyncio.Event()
            tasks = [
                asyncio.create_task(start_one(contexts[i].request, tokens[i], u, start)) for i, u in enumerate(plan)
            ]
            await asyncio.sleep(0.2)  # every task waits on the event
            t_all = time.time()
            start.set()
            results = list(await asyncio.gather(*tasks))
        finally:
            await browser.close()
    add_watched(results, watch, t_all)
    return results


def max_sessions_of(page: Any) -> int | None:
    page.goto(f"{BASE}/")
    m = re.search(r"at most (\d+) sessions at a time", page.inner_text("body"))
    return int(m.group(1)) if m else None


def cluster_slots(cpus_per_session: int, mem_mb_per_session: int) -> tuple[int, str]:
    """How many sessions the demo's nodes hold at once (CPUs and memory of the interactive partition's nodes)."""
    out = on_head("sinfo", "-h", "-N", "-p", "interactive", "-o", "%N %c %m").stdout.split("\n")
    nodes = {line.split()[0]: line.split()[1:] for line in out if line.strip()}
    slots = sum(min(int(c) // cpus_per_session, int(m) // mem_mb_per_session) for c, m in nodes.values())
    return slots, f"{len(nodes)} nodes ({', '.join(f'{n}: {c} CPUs, {m} MB' for n, (c, m) in nodes.items())})"


# --- summaries, plot ---------------------------------------------------------------------------


def summary(values: list[float | None]) -> dict[str, Any]:
    ok = sorted(v for v in values if v is not None)
    if not ok:
        return {"n": 0, "failed": len(values)}
    return {
        "n": len(ok),
        "failed": len(values) - len(ok),
        "median_s": round(statistics.median(ok), 3),
        "p90_s": round(ok[max(0, math.ceil(0.9 * len(ok)) - 1)], 3),  # nearest rank
        "min_s": round(ok[0], 3),
        "max_s": round(ok[-1], 3),
    }


def segments(r: dict[str, Any], order: tuple[str, ...]) -> dict[str, float | None]:
    """Consecutive differences of the milestones (a milestone seen before the previous one counts 0)."""
    out: dict[str, float | None] = {}
    prev = 0.0
    for key in order:
        t = r.get(key)
        if t is None:
            out[key] = None
            continue
        out[key] = round(max(0.0, t - prev), 3)
        prev = max(prev, t)
    return out


def breakdown(runs: list[dict[str, Any]], order: tuple[str, ...]) -> dict[str, Any]:
    segs = [segments(r, order) for r in runs if r.get("t_200") is not None]
    fine = {f"{k}: {SEGMENT_NAMES[k]}": summary([s[k] for s in segs]) for k in order}
    coarse: dict[str, Any] = {}
    for name, a, b in COARSE:
        if a in order and b in order:
            vals = [None if r.get(a) is None or r.get(b) is None else r[b] - r[a] for r in runs if r.get("t_200")]
            coarse[name] = summary(vals)
    return {"segments": fine, "coarse": coarse, "milestones": {k: summary([r.get(k) for r in runs]) for k in order}}


def plot_distributions(ax: Any, result: dict[str, Any]) -> None:
    """Start -> JupyterLab 200 of each kind: box plot, every run, and the goals."""
    kinds = [k for k in ("floor", "portal", "container") if result.get(k) and result[k]["runs"]]
    data = [[r["t_200"] for r in result[k]["runs"] if r.get("t_200") is not None] for k in kinds]
    ax.boxplot(data, showfliers=False, widths=0.5)
    ax.set_xticks(range(1, len(kinds) + 1), kinds)
    for i, values in enumerate(data, start=1):
        jitter = [i + 0.18 * ((j * 7919) % 11 / 10 - 0.5) for j in range(len(values))]
        ax.scatter(jitter, values, s=16, alpha=0.7, zorder=3)
    f_med = result["floor"]["http200"].get("median_s")
    if f_med is not None:
        ax.axhline(
            f_med + 0.3, color="tab:green", ls="--", lw=1, label=f"goal median: floor + 0.3 s = {f_med + 0.3:.2f}"
        )
    ax.axhline(3.5, color="tab:red", ls=":", lw=1, label="goal p90: 3.5 s")
    ax.set_ylabel("start -> JupyterLab 200 (s)")
    ax.set_title(f"Start latency, {len(data[0]) if data else 0} runs each")
    ax.legend(fontsize=8, loc="lower right")


def plot_breakdown(ax: Any, cmap: Any, result: dict[str, Any]) -> None:
    """The median of each segment, stacked, for the floor and the portal."""
    for row, (kind, order) in enumerate((("floor", FLOOR_MILESTONES), ("portal", PORTAL_MILESTONES))):
        segs = result[kind]["breakdown"]["segments"]
        left = 0.0
        for key in order:
            med = segs[f"{key}: {SEGMENT_NAMES[key]}"].get("median_s") or 0.0
            ax.barh(row, med, left=left, color=cmap(PORTAL_MILESTONES.index(key)), edgecolor="white",
                    label=SEGMENT_NAMES[key] if kind == "portal" else None)  # fmt: skip
            if med >= 0.15:
                ax.text(left + med / 2, row, f"{med:.2f}", ha="center", va="center", fontsize=8, color="white")
            left += med
    ax.set_yticks([0, 1], ["floor", "portal"])
    ax.set_xlabel("median of each segment, stacked (s)")
    ax.set_title("Where the time goes (medians per segment)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)


def plot_concurrent(ax: Any, result: dict[str, Any]) -> None:
    """Each of the concurrent sessions' start -> 200, by user and job."""
    conc = result.get("concurrent") or {}
    runs = sorted(conc.get("sessions", []), key=lambda r: (r.get("t_200") is None, r.get("t_200") or 0.0))
    if not runs:
        ax.set_title("concurrent starts: not run")
        return
    top = max((r["t_200"] for r in runs if r.get("t_200") is not None), default=1.0)
    heights = [r["t_200"] if r.get("t_200") is not None else top * 1.1 for r in runs]
    colors = ["tab:red" if r.get("t_200") is None else "tab:orange" if r.get("waited_for_a_slot") else "tab:blue"
              for r in runs]  # fmt: skip
    ax.bar(range(len(runs)), heights, color=colors, hatch=None)
    for i, r in enumerate(runs):
        if r.get("t_200") is None:
            ax.text(i, heights[i], "no 200", ha="center", va="bottom", fontsize=7, color="tab:red")
    ax.set_xticks(range(len(runs)), [f"{r['user']}\n{r.get('job', '-')}" for r in runs], fontsize=7)
    ax.set_ylabel("start -> 200 through the proxy (s)")
    last = conc.get("last_200_s")
    said = f"last 200 at {last} s" if last is not None else f"{conc.get('answered')} of {conc.get('started')} answered"
    ax.set_title(f"{conc.get('started')} sessions at once ({conc.get('users')} users, {conc.get('cluster_slots')} "
                 f"slots): {said}\norange: waited for a free slot; red: never answered", fontsize=9)  # fmt: skip


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.5), gridspec_kw={"width_ratios": [1.1, 1.6, 1.1]})
    plot_distributions(axes[0], result)
    plot_breakdown(axes[1], plt.get_cmap("tab10"), result)
    plot_concurrent(axes[2], result)
    fig.suptitle(f"Carme demo start latency, {result['date']} (load avg {result['load_avg_before'][0]:.1f} -> "
                 f"{result['load_avg_after'][0]:.1f}, {result['machine']['cpus']} CPUs)", fontsize=10)  # fmt: skip
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- main --------------------------------------------------------------------------------------


BEGAN = time.monotonic()


def say(msg: str) -> None:
    print(f"[{time.monotonic() - BEGAN:6.1f} s] {msg}", flush=True)


def cancel_users_jobs() -> None:
    for user in USERS:
        on_head("scancel", "--user", user)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help=f"runs of each kind (at most {MAX_RUNS})")
    parser.add_argument("--concurrent", type=int, default=10, metavar="N", help="sessions started at once (0: none)")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write the distributions and the breakdown there")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "start.json")
    parser.add_argument("--idle-wait", type=float, default=15.0, help="longest wait for an empty queue between runs")
    parser.add_argument(
        "--budget", type=float, default=560.0,
        help="seconds for the whole bench: no new run starts once the rest would not fit (make bench allows 600)",
    )  # fmt: skip
    parser.add_argument(
        "--container", metavar="IMAGE", default="",
        help="also time portal starts in this container image of the catalogue (kind container, e.g. base), "
        "alternating with the environment's",
    )  # fmt: skip
    return parser.parse_args()


@dataclass
class Collected:
    """What a bench run gathers: the runs of each kind, the warm-up, the concurrent starts, the floor's request."""

    floor: list[dict[str, Any]] = field(default_factory=list)
    portal: list[dict[str, Any]] = field(default_factory=list)
    container: list[dict[str, Any]] = field(default_factory=list)
    warmup: dict[str, Any] = field(default_factory=dict)
    idle_waits: list[float] = field(default_factory=list)
    states: dict[str, Any] = field(default_factory=dict)  # each user's logged-in browser state
    max_sessions: dict[str, int | None] = field(default_factory=dict)
    concurrent: dict[str, Any] | None = None
    request: SessionRequest | None = None  # the floor's, copied from the warm-up portal job
    runtime: str = ""

    @property
    def req(self) -> SessionRequest:
        assert self.request is not None, "no request: the warm-up did not run"
        return self.request


def same_request(check_p: dict[str, Any], check_f: dict[str, Any]) -> dict[str, Any]:
    """Where the warm-up floor job's request and launcher environment differ from the portal job's."""
    diff = {k: [check_f.get("request", {}).get(k), v] for k, v in check_p["request"].items()
            if check_f.get("request", {}).get(k) != v}  # fmt: skip
    env_p = {k: v for k, v in check_p["launcher_env"].items() if k != "CARME_SESSION_SECRET"}
    env_f = {k: v for k, v in check_f.get("launcher_env", {}).items() if k != "CARME_SESSION_SECRET"}
    env_diff = {k: [env_f.get(k), env_p.get(k)] for k in sorted(set(env_p) | set(env_f))
                if env_f.get(k) != env_p.get(k)}  # fmt: skip
    # what sbatch adds to a job's environment by itself (SLURM_CPUS_PER_TASK from --cpus-per-task), and
    # slurmrestd does not, is no difference of the request
    slurm_only = {k: v for k, v in env_diff.items() if k.startswith("SLURM_")}
    env_diff = {k: v for k, v in env_diff.items() if k not in slurm_only}
    return {
        "request_differs [floor, portal]": diff,
        "launcher_env_differs [floor, portal]": env_diff,
        "slurm_variables_differ [floor, portal]": slurm_only,
        "same": not diff and not env_diff,
    }


def warm_up(page: Any, watch: Watcher, args: argparse.Namespace, got: Collected) -> None:
    """Warm-up (not counted): a portal job whose request and launcher environment the floor copies, then a floor
    job, both checked to ask for the same."""
    warm_portal = portal_run(page, watch, check=True)
    check_p = warm_portal.get("check") or {}
    if "request" not in check_p or "CARME_IMAGE" not in check_p.get("launcher_env", {}):
        raise RuntimeError(f"warm-up portal run gave no request to copy: {warm_portal}")
    got.request, got.runtime = floor_request(check_p["fields"], check_p["launcher_env"])
    got.idle_waits.append(watch.wait_idle(args.idle_wait))
    warm_floor = floor_run(watch, got.req, got.runtime, check=True)
    same = same_request(check_p, warm_floor.get("check") or {})
    check_p.pop("fields", None)
    got.warmup = {"portal": warm_portal, "floor": warm_floor, "same_request": same}
    say(f"warm-up: same request and launcher environment: {got.warmup['same_request']}")


def timed_runs(page: Any, watch: Watcher, args: argparse.Namespace, got: Collected, began: float) -> None:
    """The counted runs: floor, portal (and container), alternating, each after the queue emptied, within the
    budget."""
    runs = max(1, min(args.runs, MAX_RUNS))
    for i in range(runs):
        if time.monotonic() - began > args.budget - (100.0 if args.concurrent > 0 else 15.0):
            say(f"budget of {args.budget:.0f} s spent after {i} runs of each")
            break
        got.idle_waits.append(watch.wait_idle(args.idle_wait))
        got.floor.append(floor_run(watch, got.req, got.runtime))
        say(f"floor  {i + 1}/{runs}: {got.floor[-1]}")
        got.idle_waits.append(watch.wait_idle(args.idle_wait))
        got.portal.append(portal_run(page, watch))
        say(f"portal {i + 1}/{runs}: {got.portal[-1]}")
        if args.container:
            got.idle_waits.append(watch.wait_idle(args.idle_wait))
            got.container.append(portal_run(page, watch, args.container))
            say(f"container {i + 1}/{runs}: {got.container[-1]}")


def log_in_users(demo: Demo, page: Any, got: Collected) -> None:
    """Every user's browser state and session limit, for the concurrent starts (alice's from her page)."""
    got.states["alice"] = page.context.storage_state()
    got.max_sessions["alice"] = max_sessions_of(page)
    for user in USERS[1:]:
        other, _ = login(demo, user)
        got.states[user] = other.context.storage_state()
        got.max_sessions[user] = max_sessions_of(other)
        other.context.close()
        say(f"{user} logged in")


def in_the_browser(watch: Watcher, args: argparse.Namespace, got: Collected, began: float) -> None:
    """alice logs in; the warm-up and the counted runs; the other users log in when concurrent starts follow."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw, tempfile.TemporaryDirectory() as shots:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            demo = Demo(browser=browser, steps=Steps(Path(shots)))
            page, _ = login(demo, "alice")
            say("alice logged in")
            got.idle_waits.append(watch.wait_idle(60))
            warm_up(page, watch, args, got)
            timed_runs(page, watch, args, got, began)
            if args.concurrent > 0:
                log_in_users(demo, page, got)
        finally:
            browser.close()


def concurrent_run(watch: Watcher, args: argparse.Namespace, got: Collected) -> dict[str, Any]:
    """``--concurrent`` sessions at once (as many as the users' session limits allow), and what came of them."""
    req = got.req
    per_user = min((m for m in got.max_sessions.values() if m), default=1)
    slots, nodes = cluster_slots(req.cpus, req.mem_mb)
    n = min(args.concurrent, per_user * len(USERS))
    plan = [USERS[i % len(USERS)] for i in range(n)]
    got.idle_waits.append(watch.wait_idle(args.idle_wait))
    t_c = time.time()
    sessions = asyncio.run(concurrent_starts(got.states, plan, watch))
    done = [r["t_start_offset"] + r["t_200"] for r in sessions if r.get("t_200") is not None]
    concurrent = {
        "requested": args.concurrent,
        "started": n,
        "users": len(USERS),
        "per_user_max_sessions": per_user,
        "cluster_slots": slots,
        "why_not_requested": None
        if n == args.concurrent
        else f"the demo has {len(USERS)} users and the portal allows {per_user} sessions each "
        f"(max_sessions of the default policy): {n} at most",
        "note": f"the cluster holds {slots} sessions of {req.cpus} CPU and {req.mem_mb} MB at once ({nodes}); "
        "each session is stopped as soon as it answered 200, so the others may start"
        + (f": {n - slots} of {n} had to wait for a slot" if n > slots else ""),
        "gpus_per_session": 0,
        "answered": len(done),
        "last_200_s": round(max(done), 3) if len(done) == n else None,
        "last_http200_s": round(max(done), 3) if len(done) == n else None,  # the name bench/run_all.py reads
        "last_200_of_those_that_answered_s": round(max(done), 3) if done else None,
        "t_200": summary([r.get("t_200") for r in sessions]),
        "sessions": sessions,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_c)),
    }
    print(f"concurrent: {json.dumps({k: v for k, v in concurrent.items() if k != 'sessions'})}", flush=True)
    return concurrent


def cancel_leftovers(watch: Watcher) -> None:
    """Cancel every job of the demo's users that the watcher saw and did not see leave, then end the watcher."""
    try:
        leftover = [j for j, s in watch.jobs.items() if s.get("user") in USERS and "gone" not in s]
        for job in leftover:
            on_head("scancel", str(job))
    finally:
        watch.close()


def request_record(req: SessionRequest, runtime: str) -> dict[str, Any]:
    return {
        "app": req.app,
        "image": req.image,
        "runtime": runtime,
        "gpus": req.gpus,
        "cpus": req.cpus,
        "mem_mb": req.mem_mb,
        "time_minutes": req.time_minutes,
        "partition": req.partition,
        "qos": req.qos,
        "account": req.account,
        "workdir": req.workdir,
        "user": req.user,
    }


def setup_record(args: argparse.Namespace, got: Collected, watch: Watcher) -> dict[str, Any]:
    calls = sorted(watch.squeue_call_s)
    idle_waits = got.idle_waits
    return {
        "cluster": "the demo: 3 podman containers (head + 2 nodes x 2 CPUs x 2 fake GPUs) on this VM",
        "request": request_record(got.req, got.runtime),
        "portal_path": "chromium click -> POST /sessions/new -> slurmrestd submit (script 'exec carme-launch') "
        "-> carme-launch: front + JupyterLab on a Unix socket -> launcher probe, challenge, scontrol comment "
        "-> portal state cache + probe -> /api/sessions ready -> /sessions/<job>/connect -> ticket -> apps "
        "origin /proxy/<job>/lab (nginx auth_request) -> front -> JupyterLab",
        "floor_path": f"sbatch as {got.req.user} on the head (carme_runtime.sessions.build_sbatch_argv, the same "
        "script and CARME_* environment) -> carme-launch -> GET http://<node>:<front port><base>lab from the "
        "head with the front key and token, no portal, no proxy",
        "poll_interval_s": {"client": POLL_S, "squeue": 0.1, "connection_files": 0.05, "direct_probe": 0.05},
        "squeue_call_s": {"median": round(statistics.median(calls), 4), "max": round(calls[-1], 4)} if calls else None,
        "run_timeout_s": RUN_TIMEOUT_S,
        "idle_wait_s": {
            "cap": args.idle_wait,
            "median": round(statistics.median(idle_waits), 2),
            "max": round(max(idle_waits), 2),
            "times_cap_reached": sum(w >= args.idle_wait for w in idle_waits),
        }
        if idle_waits
        else None,
    }


def kind_record(runs: list[dict[str, Any]], order: tuple[str, ...]) -> dict[str, Any]:
    return {"http200": summary([r.get("t_200") for r in runs]), "breakdown": breakdown(runs, order), "runs": runs}


def add_verdicts(result: dict[str, Any]) -> None:
    """Running -> 200 of the floor and the portal, the portal's overhead over the floor, and the goals."""
    for kind in ("floor", "portal"):
        result[kind]["running_to_200"] = summary(
            [None if r.get("t_200") is None or r.get("t_running") is None else r["t_200"] - r["t_running"]
             for r in result[kind]["runs"]]
        )  # fmt: skip
    fr, pr = result["floor"]["running_to_200"].get("median_s"), result["portal"]["running_to_200"].get("median_s")
    result["portal_minus_floor_running_to_200_median_s"] = None if fr is None or pr is None else round(pr - fr, 3)
    p_med, p90 = result["portal"]["http200"].get("median_s"), result["portal"]["http200"].get("p90_s")
    f_med = result["floor"]["http200"].get("median_s")
    result["portal_minus_floor_median_s"] = None if p_med is None or f_med is None else round(p_med - f_med, 3)
    result["verdict"] = {
        "median_within_floor_plus_0.3": None if p_med is None or f_med is None else p_med <= f_med + 0.3,
        "p90_within_3.5": None if p90 is None else p90 <= 3.5,
    }


def result_of(
    args: argparse.Namespace, got: Collected, watch: Watcher, began: float, load: tuple[Any, Any]
) -> dict[str, Any]:
    """The result file's content; ``load``: the load averages before and after."""
    result: dict[str, Any] = {
        "benchmark": "Start to JupyterLab HTTP 200: portal (through the proxy) against the same launcher and app "
        "submitted with sbatch and polled directly (bench/bench_start.py)",
        "goal": {"portal_median_s": "floor median + 0.3", "portal_p90_s": 3.5},
        "setup": setup_record(args, got, watch),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "load_avg_before": [round(x, 2) for x in load[0]],
        "load_avg_after": [round(x, 2) for x in load[1]],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.monotonic() - began, 1),
        "floor": kind_record(got.floor, FLOOR_MILESTONES),
        "portal": kind_record(got.portal, PORTAL_MILESTONES),
        "container": {"image": args.container, **kind_record(got.container, PORTAL_MILESTONES)}
        if args.container
        else None,
        "concurrent": got.concurrent,
        "warmup": got.warmup,
    }
    add_verdicts(result)
    return result


def write_result(result: dict[str, Any], args: argparse.Namespace) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.plot:
        plot(result, args.plot)
    keys = ("portal_minus_floor_median_s", "portal_minus_floor_running_to_200_median_s", "verdict", "load_avg_before",
            "load_avg_after", "wall_s")  # fmt: skip
    print(json.dumps({k: result[k] for k in keys}))
    print(json.dumps({"portal": result["portal"]["http200"], "floor": result["floor"]["http200"]}))


def main() -> int:
    args = parse_args()
    why = portal_answers()
    if why:
        print(f"bench_start: the demo is not up ({why}); run `make demo` first", file=sys.stderr)
        return 2
    from playwright.sync_api import Page

    Page.goto = goto_again_if_the_network_changed(Page.goto)  # type: ignore[method-assign]

    began = time.monotonic()
    load_before = os.getloadavg()
    got = Collected()
    cancel_users_jobs()
    watch = Watcher()
    try:
        in_the_browser(watch, args, got, began)
        if args.concurrent > 0:
            got.concurrent = concurrent_run(watch, args, got)
        got.idle_waits.append(watch.wait_idle(args.idle_wait))
    finally:
        cancel_leftovers(watch)
    load_after = os.getloadavg()
    write_result(result_of(args, got, watch, began, (load_before, load_after)), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
