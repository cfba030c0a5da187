#!/usr/bin/env python3
"""Dashboard under load (issue 6: 200 concurrent users, goal p99 <= 150 ms, scheduler queries independent of users).

Everything runs on 127.0.0.1 and stops by itself:

* a stand-in slurmrestd (v0.0.38 answers: 10 nodes with 4 GPUs, 2 partitions, one running job per user)
  in its own process, counting every request it gets;
* the portal as deployed: gunicorn ``--workers 2 --threads 16 -k gthread`` (roles/carme_webui's defaults) on a
  SQLite file database seeded with the users, talking to the stand-in with real per-user JWTs;
* N simulated users (asyncio, one keep-alive connection each) that are logged in (a session cookie signed with
  the portal's key, as after password + TOTP) and load the dashboard ``GET /`` in a closed loop with a think
  time, for a fixed duration, keeping the cookie each response sets as a browser does; the first seconds are a
  warm-up and are not counted.

Two runs: the control (20 users) and the goal (200 users). Reported per run: requests, errors, p50/p90/p99/max
latency, throughput, CPU time per request of the server (gunicorn master + workers, from /proc; robust to other
load on the machine, unlike the latencies) and of the client, the machine's load average before and after, and the
queries the stand-in received: cluster state (jobs + nodes + partitions, cached ``SCHEDULER_CACHE_SECONDS`` per
gunicorn worker and shared by all users) and accounting (GPU-hours per user, cached ``QUOTA_CACHE_SECONDS`` per user
and worker).

Usage::

    .venv/bin/python bench/bench_portal.py          # 20 then 200 users, 60 s each -> bench/results/portal.json
    .venv/bin/python bench/bench_portal.py --users 200 --duration 10 --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from typing import ClassVar

REPO = Path(__file__).resolve().parent.parent
MAX_USERS = 1000
MAX_DURATION_S = 300.0
NODES = 10
GPUS_PER_NODE = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- stand-in slurmrestd (its own process) ---------------------------------------------------------------


class StandIn(BaseHTTPRequestHandler):
    users: ClassVar[int] = 0
    counts: ClassVar[dict[str, int]] = {}
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, doc: Any) -> None:
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/_stats":
            self._send(self.counts)
            return
        if not self.headers.get("X-SLURM-USER-TOKEN"):
            self.send_error(401)
            return
        kind = path.rsplit("/", 1)[-1] if path.startswith("/slurm/") else "accounting"
        self.counts[kind] = self.counts.get(kind, 0) + 1
        now = int(time.time())
        if path == "/slurm/v0.0.38/jobs":
            jobs = [
                {
                    "job_id": 1000 + i,
                    "user_name": f"bench{i:03d}",
                    "name": "carme-jupyterlab",
                    "job_state": "RUNNING",
                    "partition": "interactive",
                    "nodes": f"node{i % NODES + 1:02d}",
                    "tres_alloc_str": "cpu=1,mem=500M,node=1,billing=1,gres/gpu=1",
                    "start_time": now - 600,
                    "end_time": now + 3000,
                    "time_limit": 60,
                    "comment": "carme:v1;app=jupyterlab;state=starting",
                    "state_reason": "None",
                }
                for i in range(self.users)
            ]
            self._send({"jobs": jobs, "errors": []})
        elif path == "/slurm/v0.0.38/nodes":
            nodes = [
                {
                    "name": f"node{n:02d}",
                    "state": "mixed",
                    "gres": f"gpu:fake:{GPUS_PER_NODE}",
                    "gres_used": "gpu:fake:1(IDX:0)",
                    "partitions": ["interactive", "batch"],
                }
                for n in range(1, NODES + 1)
            ]
            self._send({"nodes": nodes, "errors": []})
        elif path == "/slurm/v0.0.38/partitions":
            parts = [
                {"name": name, "nodes": f"node[01-{NODES:02d}]", "max_time_limit": 480, "state": "UP", "flags": flags}
                for name, flags in (("interactive", ["DEFAULT"]), ("batch", []))
            ]
            self._send({"partitions": parts, "errors": []})
        elif path.startswith("/slurmdb/v0.0.38/jobs"):
            self._send({"jobs": [], "errors": []})
        else:
            self.send_error(404)


def serve_stand_in(port: int, users: int) -> None:
    StandIn.users = users
    ThreadingHTTPServer(("127.0.0.1", port), StandIn).serve_forever()


def stand_in_counts(port: int) -> dict[str, int]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stats", timeout=5) as resp:
        return dict(json.load(resp))


# --- the portal ------------------------------------------------------------------------------------------


def write_config(tmp: Path, restd_port: int) -> Path:
    key = tmp / "jwt_hs256.key"
    key.write_bytes(secrets.token_bytes(32))
    cfg = tmp / "config.py"
    cfg.write_text(
        f"SECRET_KEY = {secrets.token_urlsafe(32)!r}\n"
        f"SQLALCHEMY_DATABASE_URI = {'sqlite:///' + str(tmp / 'portal.db')!r}\n"
        "LDAP_URI = 'ldaps://127.0.0.1:1'\n"
        "LDAP_USER_DN_TEMPLATE = 'uid={username},ou=people,dc=bench'\n"
        "LDAP_GROUP_BASE = 'ou=groups,dc=bench'\n"
        f"SLURMRESTD_URL = 'http://127.0.0.1:{restd_port}'\n"
        f"SLURM_JWT_KEY_FILE = {str(key)!r}\n"
        "SESSION_COOKIE_SECURE = False\n"  # plain http on loopback (nginx terminates TLS in deployments)
        "HSTS_SECONDS = 0\n"
        "CARME_APP_DIRS = ()\n"
    )
    return cfg


def seed_and_sign(cfg: Path, users: int) -> list[str]:
    """Create the schema and the users; return one signed session cookie per user."""
    os.environ["CARME_WEBUI_CONFIG"] = str(cfg)
    from webui import create_app
    from webui.extensions import db
    from webui.flask_commands import upgrade_database
    from webui.models import User
    from webui.security import start_login

    app = create_app()
    tokens = []
    with app.app_context():
        upgrade_database()
        for i in range(users):
            user = User(username=f"bench{i:03d}", totp_secret="X" * 32, totp_confirmed=True, session_version=1)
            db.session.add(user)
            db.session.flush()
            with app.test_request_context("/"):
                tokens.append(start_login(user, is_admin=False))  # the server-side login auth.totp records
        db.session.commit()
        db.engine.dispose()
    serializer = app.session_interface.get_signing_serializer(app)  # type: ignore[attr-defined]
    # What auth.totp puts in the session (a permanent one, so Flask re-signs it on every response).
    return [serializer.dumps({"_permanent": True, "login": token}) for token in tokens]


def start_gunicorn(cfg: Path, port: int, workers: int, threads: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CARME_WEBUI_CONFIG": str(cfg)}
    gunicorn = Path(sys.executable).parent / "gunicorn"
    # As roles/carme_webui's unit runs it (access log included; the unit sends it to journald, here a file).
    argv = [str(gunicorn), "--workers", str(workers), "--threads", str(threads), "--worker-class", "gthread",
            "--bind", f"127.0.0.1:{port}", "--no-control-socket", "--log-level", "warning",
            "--access-logfile", str(cfg.parent / "access.log"), "webui.wsgi:app"]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, cwd=REPO)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("gunicorn did not start")


def cpu_seconds(root: int) -> float:
    """User + system CPU time of a process and its children (the gunicorn master and workers), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(stat.parent.name), int(fields[1])
        if root in (pid, ppid):
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


# --- simulated users -------------------------------------------------------------------------------------


def http_get(port: int, cookie: str) -> bytes:
    return (
        f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: carme_session={cookie}\r\n"
        "Accept: text/html\r\nConnection: keep-alive\r\n\r\n"
    ).encode()


async def user_loop(
    port: int, cookie: str, stop_at: float, count_from: float, think: float, lat: list[float], errors: list[str]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = http_get(port, cookie)
    await asyncio.sleep(think * (hash(cookie) % 1000) / 1000)  # spread the first requests over one think time
    try:
        while time.monotonic() < stop_at:
            t0 = time.monotonic()
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
                elif line.lower().startswith(b"set-cookie: carme_session="):  # keep the new cookie, as a browser
                    request = http_get(port, line.split(b"=", 1)[1].split(b";", 1)[0].decode())
            body = await reader.readexactly(length)
            elapsed = time.monotonic() - t0
            status = head.split(b" ", 2)[1]
            if t0 >= count_from:
                if status != b"200" or b"My sessions" not in body:
                    errors.append(status.decode())
                else:
                    lat.append(elapsed)
            await asyncio.sleep(think)
    finally:
        writer.close()


async def cpu_window(server_pid: int, count_from: float, stop_at: float, out: dict[str, float]) -> None:
    """CPU seconds the server (gunicorn master + workers) and this client spent in the measured window."""
    await asyncio.sleep(max(0.0, count_from - time.monotonic()))
    server0, client0 = cpu_seconds(server_pid), time.process_time()
    await asyncio.sleep(max(0.0, stop_at - time.monotonic()))
    out["server"] = cpu_seconds(server_pid) - server0
    out["client"] = time.process_time() - client0


async def drive(
    port: int, server_pid: int, cookies: list[str], duration: float, warmup: float, think: float
) -> dict[str, Any]:
    lat: list[float] = []
    errors: list[str] = []
    cpu: dict[str, float] = {}
    start = time.monotonic()
    count_from = start + warmup
    stop_at = count_from + duration
    await asyncio.gather(
        cpu_window(server_pid, count_from, stop_at, cpu),
        *(user_loop(port, c, stop_at, count_from, think, lat, errors) for c in cookies),
    )
    lat.sort()
    served = len(lat) + len(errors)

    def pct(p: float) -> float:
        return round(1000 * lat[min(len(lat) - 1, int(p * len(lat)))], 1) if lat else float("nan")

    return {
        "requests": len(lat),
        "errors": len(errors),
        "error_statuses": sorted(set(errors))[:5],
        "throughput_rps": round(len(lat) / duration, 1),
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "max_ms": round(1000 * lat[-1], 1) if lat else None,
        "mean_ms": round(1000 * statistics.fmean(lat), 1) if lat else None,
        # Robust to other load on the machine: CPU time per request, not wall time.
        "server_cpu_ms_per_request": round(1000 * cpu["server"] / served, 2) if served else None,
        "client_cpu_ms_per_request": round(1000 * cpu["client"] / served, 2) if served else None,
    }


def run_once(users: int, duration: float, warmup: float, think: float, workers: int, threads: int) -> dict[str, Any]:
    import multiprocessing

    with tempfile.TemporaryDirectory(prefix="carme-bench-portal-") as tmpdir:
        tmp = Path(tmpdir)
        restd_port, portal_port = free_port(), free_port()
        restd = multiprocessing.Process(target=serve_stand_in, args=(restd_port, users), daemon=True)
        restd.start()
        cfg = write_config(tmp, restd_port)
        cookies = seed_and_sign(cfg, users)
        gunicorn = start_gunicorn(cfg, portal_port, workers, threads)
        try:
            time.sleep(1)
            before = stand_in_counts(restd_port)
            load_before = os.getloadavg()
            result = asyncio.run(drive(portal_port, gunicorn.pid, cookies, duration, warmup, think))
            load_after = os.getloadavg()
            after = stand_in_counts(restd_port)
        finally:
            gunicorn.terminate()
            gunicorn.wait(timeout=30)
            restd.terminate()
            restd.join(timeout=10)
    total = {k: after.get(k, 0) for k in set(after) | set(before)}
    state_queries = sum(total.get(k, 0) for k in ("jobs", "nodes", "partitions"))
    return {
        "users": users,
        "duration_s": duration,
        "warmup_s": warmup,
        "think_time_s": think,
        **result,
        # 1/5/15-minute load averages of the whole machine (other jobs share it): before and after the run.
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in load_after],
        # Counted over the whole run including the warm-up (the stand-in cannot tell them apart).
        "scheduler_queries": {
            "cluster_state": state_queries,
            "cluster_state_per_s": round(state_queries / (duration + warmup), 2),
            "accounting": total.get("accounting", 0),
            "by_endpoint": dict(sorted(total.items())),
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", default="20,200", help="comma-separated user counts, one run each (max 1000)")
    ap.add_argument("--duration", type=float, default=60.0, help="measured seconds per run (max 300)")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--think", type=float, default=1.0, help="seconds each user waits between page loads")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "portal.json")
    args = ap.parse_args(argv)
    counts = [int(u) for u in args.users.split(",")]
    if any(not 0 < u <= MAX_USERS for u in counts) or not 0 < args.duration <= MAX_DURATION_S:
        ap.error(f"users must be 1..{MAX_USERS} and duration 0..{MAX_DURATION_S:.0f} s")
    runs = []
    for users in counts:
        print(f"{users} users, {args.duration:.0f} s ...", flush=True)
        run = run_once(users, args.duration, args.warmup, args.think, args.workers, args.threads)
        print(json.dumps(run), flush=True)
        runs.append(run)
    doc = {
        "benchmark": "portal dashboard under concurrent users (bench/bench_portal.py)",
        "goal": {"p99_ms": 150, "scheduler_queries": "independent of the number of users"},
        "setup": {
            "gunicorn": f"{args.workers} workers x {args.threads} threads (gthread)",
            "scheduler_cache_seconds": 2.0,
            "quota_cache_seconds": 60.0,
            "database": "SQLite file (deployments: MariaDB)",
            "slurmrestd": f"stand-in on 127.0.0.1, {NODES} nodes x {GPUS_PER_NODE} GPUs, one running job per user",
            "client": "asyncio, one keep-alive HTTP/1.1 connection per user, plain http on loopback (no nginx/TLS)",
        },
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
