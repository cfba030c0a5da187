#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
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

``--target demo`` runs the same load against the demo's real stack (``make demo``): https://127.0.0.1:8443 through
nginx + TLS, gunicorn as roles/carme_webui deployed it, MariaDB, the real slurmrestd (JWT), slapd + sssd. It creates
N real LDAP users (bench-u001..) with Slurm associations, registers them in the portal as a first login does and
signs their cookies in the head with the portal's own key, then removes all of it (LDAP, sacctmgr, portal database),
whatever happens. Per run: latencies (also of the window's second half, after the users' first loads), slurmrestd
calls per second from slurmrestd's own log (cross-checked with TCP connections and slurmctld/slurmdbd RPC counters),
CPU time per request of each process group in the head; after the runs, PSS and RSS of gunicorn and nginx
(smaps_rollup). Results go to the ``demo`` key of the output file (the stand-in's keys stay). Run it under the
demo's lock: ``flock /tmp/carme-demo.lock``. ``--queue N --nodes M`` (``make bench``: 10,000 and 1,000): then the
most users once more with N held jobs of the bench users in Slurm's queue and M nodes declared in the head's
slurm.conf, and what each of the portal's reads of the cluster state costs then (bench_queue.py; all of it undone
after the run).

Usage::

    .venv/bin/python bench/bench_portal.py          # 20 then 200 users, 60 s each -> bench/results/portal.json
    .venv/bin/python bench/bench_portal.py --users 200 --duration 10 --out /tmp/x.json
    flock /tmp/carme-demo.lock .venv/bin/python bench/bench_portal.py --target demo --plot bench/results/portal.png
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import secrets
import socket
import ssl
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

import bench_queue

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
    from webui.admin.commands import upgrade_database
    from webui.auth.logins import start_login
    from webui.extensions import db
    from webui.models import User

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
        f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: __Host-carme_session={cookie}\r\n"
        "Accept: text/html\r\nConnection: keep-alive\r\n\r\n"
    ).encode()


async def read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    """The body after ``head``: Content-Length (gunicorn, nginx), or chunked (nginx may re-frame an answer)."""
    length = 0
    chunked = False
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
        elif name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if not chunked:
        return await reader.readexactly(length)
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # no trailers are sent
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def user_loop(
    port: int,
    cookie: str,
    stop_at: float,
    count_from: float,
    think: float,
    lat: list[float],
    errors: list[str],
    tls: ssl.SSLContext | None = None,
) -> None:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls, server_hostname="127.0.0.1" if tls else None
    )
    request = http_get(port, cookie)
    await asyncio.sleep(think * (hash(cookie) % 1000) / 1000)  # spread the first requests over one think time
    try:
        while time.monotonic() < stop_at:
            t0 = time.monotonic()
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"set-cookie: __host-carme_session="):  # keep the new cookie, as a browser
                    request = http_get(port, line.split(b"=", 1)[1].split(b";", 1)[0].decode())
            body = await read_body(reader, head)
            elapsed = time.monotonic() - t0
            status = head.split(b" ", 2)[1]
            if t0 >= count_from:
                if status != b"200" or b"My sessions" not in body:
                    errors.append(status.decode())
                elif b"The scheduler is not reachable right now" in body:  # _banner.html: the user sees no state
                    errors.append("200 with the banner 'scheduler not reachable'")
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


# --- the demo's real stack (--target demo) ---------------------------------------------------------------
#
# What ``make demo`` runs: nginx + TLS on https://127.0.0.1:8443 in front of gunicorn, MariaDB, the real slurmrestd
# (JWT), slapd + sssd, in the podman container carme-demo-head. N real LDAP users (bench-u001..) are created for the
# run and removed after it, whatever happens (see ``demo_users``).

DEMO_HEAD = os.environ.get("CARME_E2E_HEAD", "carme-demo-head")
DEMO_PORT = 8443
DEMO_SECRETS = Path(os.environ.get("CARME_E2E_SECRETS", REPO / ".secrets" / "demo"))
DEMO_LDAP_BASE = os.environ.get("CARME_E2E_LDAP_BASE", "dc=carme,dc=demo")
DEMO_ACCOUNT = "research"  # the Slurm account the bench users' associations go to (alice's and bob's)
DEMO_SETTINGS = "/etc/carme/webui/config.py"
DEMO_PORTAL_PY = "/opt/carme/webui-venv/bin/python"
DEMO_PORTAL_USER = "carme-portal"
BENCH_PREFIX = "bench-u"
BENCH_GROUP = "carme-bench"
BENCH_GID = 29000  # users bench-u001.. get uid 29001..; nothing else on the demo is in 29000-29999
MAX_DEMO_USERS = 999
TIME_WAIT_S = 60  # Linux's TCP_TIMEWAIT_LEN, fixed
SLURMRESTD_PORT = 6820

# Run in the head as the portal's service user, with the portal's own code, config and secret key (which never
# leaves the head): "create" registers the users as their first login would (row created at the password step, TOTP
# enrolled and confirmed, the login recorded) and prints one session cookie per user, signed as auth.totp signs it;
# "remove" deletes every trace of bench users from the portal's database.
PORTAL_SCRIPT = r"""
import datetime as dt
import json
import sys

from sqlalchemy import delete

from webui import create_app
from webui import auth as security
from webui.extensions import db
from webui.models import AuditLog, Login, LoginAttempt, User

action, prefix, names = sys.argv[1], sys.argv[2], sys.argv[3:]
app = create_app()
with app.app_context():
    if action == "remove":
        removed = {}
        for model, column in ((Login, Login.username), (LoginAttempt, LoginAttempt.username),
                              (AuditLog, AuditLog.target), (User, User.username)):
            removed[model.__tablename__] = db.session.execute(delete(model).where(column.like(prefix + "%"))).rowcount
        db.session.commit()
        print(json.dumps(removed))
        sys.exit(0)
    recheck = float(app.config["LOGIN_RECHECK_SECONDS"])
    serializer = app.session_interface.get_signing_serializer(app)
    cookies = []
    with app.test_request_context("/", environ_base={"REMOTE_ADDR": "127.0.0.1"}):
        for i, name in enumerate(names):
            user = security.get_user(name, create=True)
            user.totp_secret = security.new_totp_secret()
            user.totp_confirmed = True
            security.record_success(user, "127.0.0.1")
            token = security.start_login(user, is_admin=False)
            # Logins of real users are spread in time, so are their LDAP group re-checks (one per user and
            # LOGIN_RECHECK_SECONDS): spread the last check over one period instead of all falling due at once.
            login = db.session.get(Login, security.login_key(token))
            login.checked_at = login.checked_at - dt.timedelta(seconds=recheck * (i + 0.5) / len(names))
            cookies.append(serializer.dumps({"_permanent": True, "login": token}))
        db.session.commit()
    print(json.dumps({"cookies": cookies, "login_recheck_seconds": recheck}))
"""

# Run in the head as root: CPU ticks, PSS and RSS (smaps_rollup) of the processes of interest, slurmctld's RPC
# counters (sdiag) and slurmdbd's (sacctmgr show stats), and the TCP connections to slurmrestd now in TIME_WAIT.
PROBE_SCRIPT = r"""
import json, os, re, subprocess, time

GROUPS = {"gunicorn": None, "nginx": {"nginx"}, "slurmrestd": {"slurmrestd"}, "slurmctld": {"slurmctld"},
          "slurmdbd": {"slurmdbd"}, "mariadb": {"mariadbd", "mysqld"}, "slapd": {"slapd"},
          "sssd": {"sssd", "sssd_be", "sssd_nss", "sssd_pam"}, "journald": {"systemd-journal"}}
out = {"time": time.time(), "clk_tck": os.sysconf("SC_CLK_TCK"), "groups": {}}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        comm = open(f"/proc/{pid}/comm").read().strip()
        argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
        stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    try:
        rollup = open(f"/proc/{pid}/smaps_rollup").read()
    except OSError:  # another user's process without CAP_SYS_PTRACE
        rollup = "Pss: -1 kB\nRss: -1 kB\n"
    if any(a.endswith("/gunicorn") or a == "gunicorn" for a in argv[:2]) or comm == "gunicorn":
        group = "gunicorn"
    else:
        group = next((g for g, comms in GROUPS.items() if comms and comm in comms), None)
    if group is None:
        continue
    kb = {k: int(v) for k, v in re.findall(r"^(Pss|Rss):\s+(-?\d+) kB", rollup, re.M)}
    g = out["groups"].setdefault(group, {"cpu_ticks": 0, "pss_kb": 0, "rss_kb": 0, "procs": []})
    g["cpu_ticks"] += int(stat[11]) + int(stat[12])
    g["pss_kb"] += kb.get("Pss", 0)
    g["rss_kb"] += kb.get("Rss", 0)
    g["procs"].append({"pid": int(pid), "ppid": int(stat[1]), "comm": comm, "pss_kb": kb.get("Pss", 0),
                       "rss_kb": kb.get("Rss", 0)})

def stats(argv):
    # "Remote Procedure Call statistics by message type" / "... by user" sections: NAME ( id) count:N
    try:
        text = subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    res, section = {"by_type": {}, "by_user": {}}, None
    for line in text.splitlines():
        if "Remote Procedure Call statistics by message type" in line:
            section = "by_type"
        elif "Remote Procedure Call statistics by user" in line:
            section = "by_user"
        elif line.strip() and not line[0].isspace():
            section = None
        m = re.match(r"\s+(\S+)\s*\(\s*\d+\)\s*count:(\d+)", line)
        if section and m:
            res[section][m.group(1)] = int(m.group(2))
    return res

out["sdiag"] = stats(["sdiag"])
out["dbd"] = stats(["sacctmgr", "show", "stats"])
ss = subprocess.run(["ss", "-Htan", "-o", "state", "time-wait", "( sport = :%d or dport = :%d )" % (PORT, PORT)],
                    capture_output=True, text=True, timeout=20).stdout
remaining = []
for line in ss.splitlines():
    m = re.search(r"timer:\(timewait,(?:(\d+)min)?(?:(\d+)sec)?(?:(\d+)ms)?", line)
    if m:
        remaining.append(60 * int(m.group(1) or 0) + int(m.group(2) or 0) + int(m.group(3) or 0) / 1000)
out["restd_time_wait_remaining_s"] = remaining
print(json.dumps(out))
""".replace("PORT", str(SLURMRESTD_PORT))


def on_head(
    argv: list[str],
    *,
    stdin: str | None = None,
    timeout: float = 120,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """A command in the demo head (as root unless it says otherwise); raises on failure when ``check``."""
    flags = ["-i"] if stdin is not None else []
    for key, value in (env or {}).items():
        flags += ["-e", f"{key}={value}"]
    proc = subprocess.run(
        ["podman", "exec", *flags, DEMO_HEAD, *argv], input=stdin, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        shown = " ".join(a if len(a) < 60 else a[:40] + "..." for a in argv[:4])
        raise RuntimeError(f"{shown} on {DEMO_HEAD}: rc {proc.returncode}: {proc.stderr.strip()[-800:]}")
    return proc


def portal_script(action: str, names: list[str]) -> dict[str, Any]:
    proc = on_head(
        ["runuser", "-u", DEMO_PORTAL_USER, "--", DEMO_PORTAL_PY, "-", action, BENCH_PREFIX, *names],
        stdin=PORTAL_SCRIPT,
        env={"CARME_WEBUI_CONFIG": DEMO_SETTINGS},
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def ldap_tool(tool: str, stdin: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """ldapadd/ldapdelete/ldapsearch in the head, bound as the directory admin over StartTLS (as the demo's
    roles do); -c: go on past entries that already exist or are already gone."""
    admin = (DEMO_SECRETS / "ldap-admin.password").read_text().strip()
    argv = [tool, "-x", "-ZZ", "-H", "ldap://localhost", "-D", f"cn=admin,{DEMO_LDAP_BASE}", "-w", admin, *extra]
    return on_head(argv, stdin=stdin, check=False)


def bench_names(n: int) -> list[str]:
    return [f"{BENCH_PREFIX}{i:03d}" for i in range(1, n + 1)]


def ldif_users(names: list[str]) -> str:
    group = (
        f"dn: cn={BENCH_GROUP},ou=groups,{DEMO_LDAP_BASE}\nobjectClass: top\nobjectClass: posixGroup\n"
        f"cn: {BENCH_GROUP}\ngidNumber: {BENCH_GID}\ndescription: bench/bench_portal.py users (removed after the run)\n"
        + "".join(f"memberUid: {name}\n" for name in names)
    )
    users = [
        f"dn: uid={name},ou=people,{DEMO_LDAP_BASE}\nobjectClass: top\nobjectClass: inetOrgPerson\n"
        f"objectClass: posixAccount\nobjectClass: shadowAccount\nuid: {name}\ncn: Bench {name}\nsn: {name}\n"
        f"displayName: Bench {name}\nuidNumber: {BENCH_GID + int(name[len(BENCH_PREFIX) :])}\ngidNumber: {BENCH_GID}\n"
        f"homeDirectory: /home/{name}\nloginShell: /bin/bash\n"
        for name in names
    ]
    return "\n".join([group, *users])


def remove_demo_users() -> dict[str, Any]:
    """Every bench user gone from the portal's database, Slurm's accounting and LDAP; each step is tried even when
    another fails. Returns what each step did."""
    done: dict[str, Any] = {}
    try:
        done["portal"] = portal_script("remove", [])
    except Exception as exc:  # go on with the other steps, say what failed
        done["portal"] = f"failed: {exc}"
    try:
        shown = on_head(["sacctmgr", "-n", "-P", "show", "user", "format=user"], check=False).stdout.split()
        users = sorted({u for u in shown if u.startswith(BENCH_PREFIX)})
        if users:
            on_head(["sacctmgr", "-i", "delete", "user", "name=" + ",".join(users)], timeout=180)
        done["sacctmgr"] = len(users)
    except Exception as exc:
        done["sacctmgr"] = f"failed: {exc}"
    try:
        found = ldap_tool(
            "ldapsearch", "", "-LLL", "-b", f"ou=people,{DEMO_LDAP_BASE}", f"(uid={BENCH_PREFIX}*)", "1.1"
        )
        dns = [line[4:] for line in found.stdout.splitlines() if line.startswith("dn: ")]
        group = ldap_tool("ldapsearch", "", "-LLL", "-b", f"ou=groups,{DEMO_LDAP_BASE}", f"(cn={BENCH_GROUP})", "1.1")
        dns += [line[4:] for line in group.stdout.splitlines() if line.startswith("dn: ")]
        if dns:
            gone = ldap_tool("ldapdelete", "\n".join(dns) + "\n", "-c")
            if gone.returncode != 0:
                raise RuntimeError(gone.stderr.strip()[-400:])
        done["ldap"] = len(dns)
    except Exception as exc:
        done["ldap"] = f"failed: {exc}"
    return done


def create_demo_users(n: int) -> list[str]:
    """N real users on the demo: LDAP entries (posixAccount, so sssd and Slurm resolve them, in a group of their
    own the portal's group re-check finds), Slurm associations (account research, as alice's), and their first
    login in the portal. Returns one signed session cookie per user."""
    names = bench_names(n)
    added = ldap_tool("ldapadd", ldif_users(names))
    if added.returncode != 0:
        raise RuntimeError(f"ldapadd: {added.stderr.strip()[-800:]}")
    deadline = time.monotonic() + 60
    while on_head(["getent", "passwd", names[0], names[-1]], check=False).stdout.count("\n") < 2:
        if time.monotonic() > deadline:
            raise RuntimeError(f"sssd on {DEMO_HEAD} does not resolve {names[0]} / {names[-1]}")
        time.sleep(1)
    on_head(["sacctmgr", "-i", "add", "user", "name=" + ",".join(names), f"account={DEMO_ACCOUNT}"], timeout=180)
    cookies = list(portal_script("create", names)["cookies"])
    assert len(cookies) == n
    return cookies


def probe() -> dict[str, Any]:
    """The probe runs with all capabilities (podman exec --privileged): reading another user's smaps_rollup (the
    portal's and nginx's workers) needs CAP_SYS_PTRACE, which the container's root lacks. It only reads."""
    proc = subprocess.run(
        ["podman", "exec", "-i", "--privileged", DEMO_HEAD, "python3", "-"],
        input=PROBE_SCRIPT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    doc = dict(json.loads(proc.stdout))
    unread = [q["pid"] for g in doc["groups"].values() for q in g["procs"] if q["pss_kb"] < 0]
    if unread:
        raise RuntimeError(f"smaps_rollup unreadable for pids {unread} in {DEMO_HEAD}")
    return doc


def demo_tls() -> ssl.SSLContext:
    """The demo's CA (the portal's certificate names 127.0.0.1); unverified only when the CA file is missing."""
    ca = DEMO_SECRETS / "ldap-ca" / "ca.crt"
    if ca.is_file():
        return ssl.create_default_context(cafile=str(ca))
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Stamped(list[float]):
    """Latencies, each with the time it was recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def append(self, value: float) -> None:
        self.at.append(time.monotonic())
        super().append(value)


async def guarded_user(
    cookie: str,
    stop_at: float,
    count_from: float,
    think: float,
    lat: list[float],
    errors: list[str],
    tls: ssl.SSLContext,
) -> None:
    """user_loop against nginx; a dropped connection is an error, and the user connects again (as a browser)."""
    while time.monotonic() < stop_at:
        try:
            await user_loop(DEMO_PORT, cookie, stop_at, count_from, think, lat, errors, tls)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            if time.monotonic() >= count_from:
                errors.append(type(exc).__name__)
            await asyncio.sleep(think)


async def drive_demo(
    cookies: list[str], duration: float, warmup: float, think: float
) -> tuple[list[float], list[float], list[str], dict[str, Any], dict[str, Any]]:
    """Latencies (all, and of the window's second half) and errors of the measured window, and the head's probes at
    its start and end."""
    lat = Stamped()
    errors: list[str] = []
    probes: dict[str, dict[str, Any]] = {}
    tls = demo_tls()
    start = time.monotonic()
    count_from = start + warmup
    stop_at = count_from + duration

    async def probe_at(when: float, name: str) -> None:
        await asyncio.sleep(max(0.0, when - time.monotonic()))
        probes[name] = await asyncio.to_thread(probe)

    await asyncio.gather(
        probe_at(count_from, "start"),
        probe_at(stop_at, "end"),
        *(guarded_user(c, stop_at, count_from, think, lat, errors, tls) for c in cookies),
    )
    # The second half of the window: the users' first page loads (cold per-user caches) are mostly over.
    second_half = [v for at, v in zip(lat.at, lat, strict=True) if at >= count_from + duration / 2]
    return lat, second_half, errors, probes["start"], probes["end"]


def latency_summary(lat: list[float]) -> dict[str, float | None]:
    lat = sorted(lat)

    def pct(p: float) -> float | None:
        return round(1000 * lat[min(len(lat) - 1, int(p * len(lat)))], 1) if lat else None

    return {
        "p50": pct(0.50),
        "p90": pct(0.90),
        "p99": pct(0.99),
        "max": round(1000 * lat[-1], 1) if lat else None,
        "mean": round(1000 * statistics.fmean(lat), 1) if lat else None,
    }


def counter_delta(before: dict[str, Any] | None, after: dict[str, Any] | None, section: str) -> dict[str, int]:
    if not before or not after:
        return {}
    b, a = before.get(section, {}), after.get(section, {})
    return {k: v - b.get(k, 0) for k, v in sorted(a.items()) if v - b.get(k, 0) > 0}


def memory_of(p: dict[str, Any]) -> dict[str, Any]:
    """PSS (shared pages divided among the processes that map them, so the sum counts each page once) and RSS of
    gunicorn's master + workers and nginx's master + workers."""
    groups = {}
    for name in ("gunicorn", "nginx"):
        g = p["groups"].get(name, {"pss_kb": 0, "rss_kb": 0, "procs": []})
        groups[name] = {
            "processes": len(g["procs"]),
            "pss_mb": round(g["pss_kb"] / 1024, 1),
            "rss_mb": round(g["rss_kb"] / 1024, 1),
            "per_process": [
                {k.replace("_kb", "_mb"): (round(v / 1024, 1) if k.endswith("_kb") else v) for k, v in proc.items()}
                for proc in sorted(g["procs"], key=lambda q: q["pid"])
            ],
        }
    return {
        "groups": groups,
        "total_pss_mb": round(sum(g["pss_mb"] for g in groups.values()), 1),
        "total_rss_mb": round(sum(g["rss_mb"] for g in groups.values()), 1),
    }


def restd_requests(since: float, until: float) -> dict[str, int]:
    """The requests slurmrestd logged (its ``operations_router: [peer] METHOD PATH`` line, one per request at its
    default verbosity) between two times of the head's clock, by endpoint (numbers as N)."""
    out = on_head(
        ["journalctl", "-u", "slurmrestd", "--since", f"@{int(since)}", "--until", f"@{int(until) + 1}",
         "-o", "short-unix", "--no-pager", "-q"],
        timeout=120,
    ).stdout  # fmt: skip
    plain: dict[str, int] = {}
    prefixed: dict[str, int] = {}  # the same line also arrives with the program's name (stderr and syslog)
    for line in out.splitlines():
        stamp, _, rest = line.partition(" ")
        m = re.search(r": (slurmrestd: )?operations_router: \S+ ([A-Z]+) (\S+)", rest)
        if not m or not since <= float(stamp) < until:
            continue
        endpoint = f"{m.group(2)} {re.sub(r'/[0-9]+', '/N', m.group(3).split('?', 1)[0])}"
        counts = prefixed if m.group(1) else plain
        counts[endpoint] = counts.get(endpoint, 0) + 1
    return plain if sum(plain.values()) >= sum(prefixed.values()) else prefixed


def cpu_ms_per_request(p0: dict[str, Any], p1: dict[str, Any], served: int) -> dict[str, float]:
    """CPU time per served request of each process group in the head, between the probes ``p0`` and ``p1``."""
    if not served:
        return {}
    tck = float(p1["clk_tck"])
    return {
        name: round(1000 * (g["cpu_ticks"] - p0["groups"].get(name, {}).get("cpu_ticks", 0)) / tck / served, 2)
        for name, g in sorted(p1["groups"].items())
    }


def restd_calls(p0: dict[str, Any], p1: dict[str, Any], window: float) -> dict[str, Any]:
    """slurmrestd calls, counted twice: from slurmrestd's own log, and as TCP connections (the portal's client,
    urllib, opens one per request; a closed connection stays in TIME_WAIT for 60 s on the side that closed first,
    both sides being in the head: those that entered it within the window have more than 60 s - window left)."""
    logged = restd_requests(p0["time"], p1["time"])
    calls = sum(logged.values())
    connections = sum(1 for r in p1["restd_time_wait_remaining_s"] if r > TIME_WAIT_S - window)
    state = sum(v for k, v in logged.items() if k.startswith("GET /slurm/"))
    return {
        "slurmrestd_calls": calls,
        "slurmrestd_calls_per_s": round(calls / window, 2),
        "slurmrestd": {
            "counted": "slurmrestd's log (journalctl -u slurmrestd: one operations_router line per request) over the "
            "measured window, by endpoint; cross-checked with the TCP connections to 127.0.0.1:6820 closed in the "
            "window (ss state time-wait in the head) and slurmctld's/slurmdbd's RPC counters (sdiag, sacctmgr show "
            "stats)",
            "cluster_state_per_s": round(state / window, 2),  # /slurm/...: jobs, nodes, partitions, reservations
            "accounting_per_s": round((calls - state) / window, 2),  # /slurmdb/...: per user, QUOTA_CACHE_SECONDS
            "by_endpoint": logged,
            "tcp_connections": connections,
        },
    }


def rpc_counts(p0: dict[str, Any], p1: dict[str, Any], window: float) -> dict[str, Any]:
    """slurmctld's and slurmdbd's RPCs between the probes, by type and by user."""
    ctld = counter_delta(p0.get("sdiag"), p1.get("sdiag"), "by_type")
    ctld_users = counter_delta(p0.get("sdiag"), p1.get("sdiag"), "by_user")
    dbd = counter_delta(p0.get("dbd"), p1.get("dbd"), "by_type")
    dbd_users = counter_delta(p0.get("dbd"), p1.get("dbd"), "by_user")
    bench_dbd = sum(v for k, v in dbd_users.items() if k.startswith(BENCH_PREFIX))
    return {
        "slurmctld_rpcs": {"per_s": round(sum(ctld.values()) / window, 2), "by_type": ctld, "by_user": ctld_users},
        "slurmdbd_rpcs": {
            "per_s": round(sum(dbd.values()) / window, 2),
            "by_type": dbd,
            "of_bench_users_per_s": round(bench_dbd / window, 2),  # the per-user accounting (GPU-hours) queries
            "by_user": {k: v for k, v in dbd_users.items() if not k.startswith(BENCH_PREFIX)},
        },
    }


def demo_run(cookies: list[str], duration: float, warmup: float, think: float) -> dict[str, Any]:
    users = len(cookies)
    load_before = os.getloadavg()
    client0 = time.process_time()
    lat, second_half, errors, p0, p1 = asyncio.run(drive_demo(cookies, duration, warmup, think))
    client_cpu = time.process_time() - client0
    load_after = os.getloadavg()
    window = p1["time"] - p0["time"]  # the head's clock, between the two probes
    served = len(lat) + len(errors)
    cpu = cpu_ms_per_request(p0, p1, served)
    return {
        "users": users,
        "duration_s": duration,
        "warmup_s": warmup,
        "think_time_s": think,
        "requests": len(lat),
        "errors": len(errors),
        "error_kinds": sorted(set(errors))[:5],
        "throughput_rps": round(len(lat) / duration, 1),
        "latency_ms": latency_summary(lat),
        "latency_second_half_ms": latency_summary(second_half),
        "share_over_150ms": round(sum(1 for v in lat if v > 0.150) / len(lat), 4) if lat else None,
        "share_over_500ms": round(sum(1 for v in lat if v > 0.500) / len(lat), 4) if lat else None,
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in load_after],
        "window_s": round(window, 1),
        **restd_calls(p0, p1, window),
        **rpc_counts(p0, p1, window),
        # CPU time per served request of each process group in the head (the processes of the machine's other
        # load are not in it), and of this client.
        "cpu_ms_per_request": {**cpu, "client": round(1000 * client_cpu / served, 2) if served else None},
        "memory_after": memory_of(p1),
    }


# In the head, as root: GET / straight to gunicorn's socket (no nginx, no TLS) with one user's cookie, back to back
# (scheduler cache warm) and after a pause longer than SCHEDULER_CACHE_SECONDS (cold: the cluster state is fetched
# from slurmrestd in that request), then each slurmrestd query the dashboard makes, timed alone with curl.
FLOOR_SCRIPT = r"""
set -eu
S=/run/carme-webui/gunicorn.sock
get() { curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --unix-socket $S -H "Host: 127.0.0.1:8443" \
        -H "X-Forwarded-Proto: https" -H "X-Forwarded-For: 127.0.0.1" -H "Cookie: __Host-carme_session=$CARME_COOKIE" \
        http://127.0.0.1/; }
for i in $(seq 20); do echo "warm $(get)"; done
for i in $(seq 5); do sleep 2.5; echo "cold $(get)"; done
# Tokens as the portal mints them (its key, its code), for its service user and for the bench user.
tok() { runuser -u carme-portal -- /opt/carme/webui-venv/bin/python -c \
  'import sys; from webui.slurm.jwt_tokens import TokenSource; print(TokenSource(sys.argv[1]).token(sys.argv[2]))' \
  /etc/carme/webui/jwt_hs256.key "$1"; }
restd() { n=$1 u=$2 t=$3 path=$4; shift 4; curl -s -o /dev/null -w "$n %{http_code} %{time_total}\n" -G \
          -H "X-SLURM-USER-NAME: $u" -H "X-SLURM-USER-TOKEN: $t" "$@" "http://127.0.0.1:6820$path"; }
T=$(tok carme-portal)
# the API version the portal's adapter chose (webui/slurm/client.py api_for), not one written here
V=$(runuser -u carme-portal -- /opt/carme/webui-venv/bin/python -c 'from webui import create_app
print(create_app().extensions["carme_scheduler"].client.api_for("carme-portal").version)')
for i in 1 2 3; do
  for e in jobs nodes partitions reservations; do restd $e carme-portal $T /slurm/$V/$e; done
done
T=$(tok $CARME_USER)
SINCE=$(date +%Y-%m-01T00:00:00)  # what the portal asks (webui/slurm/client.py account_jobs)
for i in 1 2 3; do
  restd associations $CARME_USER $T /slurmdb/$V/associations --data-urlencode "user=$CARME_USER"
  restd accounting_jobs $CARME_USER $T /slurmdb/$V/jobs --data-urlencode "account=$CARME_ACCOUNT" \
    --data-urlencode "start_time=$SINCE" --data-urlencode skip_steps=true
done
# The portal's own code, timed: the cluster-state refresh (every SCHEDULER_CACHE_SECONDS per worker; requests wait
# for it), the Zabbix refresh (every ZABBIX_CACHE_SECONDS per worker, single-flight: requests wait for it), and one
# user's GPU-hours (once per QUOTA_CACHE_SECONDS per user and worker).
runuser -u carme-portal -- /opt/carme/webui-venv/bin/python - "$CARME_USER" <<'PY'
import datetime as dt, sys, time
from webui import create_app
from webui.monitoring.zabbix import ZabbixSource
app = create_app()
with app.app_context():
    sched = app.extensions["carme_scheduler"]
    def timed(name, fn):
        t = time.monotonic(); fn(); print(f"{name} 200 {time.monotonic() - t:.6f}", flush=True)
    for _ in range(3):
        timed("portal_state_fetch", sched._fetch)
    if app.config.get("ZABBIX_URL"):
        src = ZabbixSource(app.config)
        for _ in range(4):
            timed("portal_zabbix_fetch", src.hosts)  # the first one logs in
    since = dt.datetime.now(dt.timezone.utc).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    accounts, start = sorted(sched._accounts_of(sys.argv[1])), int(since.timestamp())  # as the portal asks
    for _ in range(3):
        timed("portal_gpu_hours", lambda: sched.client.account_jobs(sched.service_user, accounts, start))
PY
"""


async def nginx_floor(cookie: str, n: int) -> list[float]:
    """n page loads one after another on one keep-alive HTTPS connection through nginx."""
    lat: list[float] = []
    errors: list[str] = []
    reader, writer = await asyncio.open_connection("127.0.0.1", DEMO_PORT, ssl=demo_tls(), server_hostname="127.0.0.1")
    request = http_get(DEMO_PORT, cookie)
    try:
        while len(lat) + len(errors) < n:
            t0 = time.monotonic()
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            body = await read_body(reader, head)
            if head.split(b" ", 2)[1] == b"200" and b"My sessions" in body:
                lat.append(time.monotonic() - t0)
            else:
                errors.append(head.split(b" ", 2)[1].decode())
    finally:
        writer.close()
    if errors:
        raise RuntimeError(f"GET / through nginx answered {sorted(set(errors))}: is the bench user logged in?")
    return lat


def demo_floor(cookie: str, username: str) -> dict[str, Any]:
    """One user alone (the portal otherwise idle; the machine not): where a dashboard request's time goes."""
    via_nginx = asyncio.run(nginx_floor(cookie, 20))
    out = on_head(
        ["bash", "-c", FLOOR_SCRIPT],
        env={
            "CARME_COOKIE": cookie,
            "CARME_USER": username,
            "CARME_ACCOUNT": DEMO_ACCOUNT,
            "CARME_WEBUI_CONFIG": DEMO_SETTINGS,
        },
    ).stdout
    times: dict[str, list[float]] = {}
    for line in out.splitlines():
        name, code, seconds = line.split()
        if code != "200":
            raise RuntimeError(f"floor: {name} answered {code}: {out}")
        times.setdefault(name, []).append(float(seconds))
    med = {name: round(1000 * statistics.median(ts), 1) for name, ts in times.items()}
    portal = {name: [round(1000 * t, 1) for t in times[name]] for name in list(med) if name.startswith("portal_")}
    for name in portal:
        med.pop(name)
    return {
        "note": "medians, one request at a time: through nginx+TLS from this host (keep-alive), straight to gunicorn's "
        "socket in the head (warm: scheduler cache fresh; cold: after 2.5 s, the cluster state fetched in the "
        "request), and each slurmrestd query alone (curl in the head)",
        "nginx_tls_warm_ms": round(1000 * statistics.median(via_nginx), 1),
        "gunicorn_socket_warm_ms": med.pop("warm"),
        "gunicorn_socket_cold_ms": med.pop("cold"),
        "slurmrestd_ms": med,
        "portal_code_ms": portal,  # each call, in order (the Zabbix one first logs in)
    }


def head_setup() -> dict[str, Any]:
    unit = on_head(["systemctl", "show", "-p", "ExecStart", "--value", "carme-webui.service"], check=False).stdout
    argv = re.search(r"argv\[\]=([^;]*)", unit)
    nginx = on_head(["nginx", "-v"], check=False).stderr.strip()
    maria = on_head(["mariadb", "--version"], check=False).stdout.strip()
    restd = on_head(["slurmrestd", "-V"], check=False).stdout.strip()
    return {
        "gunicorn": argv.group(1).strip() if argv else unit.strip()[:300],
        "nginx": nginx,
        "database": maria,
        "slurmrestd": restd,
    }


def big_cluster_run(cookies: list[str], queue: int, nodes: int, timing: tuple[float, float, float]) -> dict[str, Any]:
    """The most users again, with ``queue`` held jobs in Slurm's queue and ``nodes`` declared (bench/bench_queue.py)."""
    print(f"demo: {nodes} nodes declared, {queue} jobs queued ...", flush=True)
    cluster = bench_queue.declare_nodes(on_head, nodes, queue)
    cluster.update(bench_queue.fill(on_head, bench_names(len(cookies)), queue, DEMO_ACCOUNT))
    print(json.dumps(cluster), flush=True)
    time.sleep(bench_queue.SETTLE_S)  # slurmctld's burst of work on the new jobs is over, as on a site's busy day
    cluster["reads"] = bench_queue.read_costs(on_head, DEMO_SETTINGS)  # what the portal's refresh costs now
    print(f"reads over that cluster: {json.dumps(cluster['reads'])}", flush=True)
    duration, warmup, think = timing
    print(f"demo: {len(cookies)} users over that queue, {warmup + duration:.0f} s ...", flush=True)
    run = demo_run(cookies, duration, warmup, think)
    run["cluster"] = cluster
    print(json.dumps({k: v for k, v in run.items() if k != "memory_after"}), flush=True)
    return run


def prepare_demo(big: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The head reachable, what it runs, and an interrupted earlier run's users (and big cluster) removed."""
    try:
        on_head(["true"], timeout=30)
    except Exception as exc:
        raise SystemExit(f"cannot podman exec into {DEMO_HEAD} (make demo): {exc}") from exc
    setup = head_setup()
    leftovers = {**(bench_queue.restore(on_head) if big else {}), **remove_demo_users()}
    if big:
        leftovers.update(bench_queue.wait_purged(on_head))
    return setup, leftovers


def run_demo(
    counts: list[str] | list[int], duration: float, warmup: float, think: float, queue: int = 0, nodes: int = 0
) -> dict[str, Any]:
    users = [int(u) for u in counts]
    big = queue > 0 or nodes > 2
    setup, leftovers = prepare_demo(big)
    runs = []
    t0 = time.monotonic()
    try:
        cookies = create_demo_users(max(users))
        created_s = round(time.monotonic() - t0, 1)
        print(f"{len(cookies)} users created and logged in in {created_s} s", flush=True)
        floor = demo_floor(cookies[-1], bench_names(len(cookies))[-1])  # not one of the 20: its caches are cold
        print(f"floor: {json.dumps(floor)}", flush=True)
        for n in users:
            print(f"demo: {n} users, {warmup + duration:.0f} s ...", flush=True)
            run = demo_run(cookies[:n], duration, warmup, think)
            print(json.dumps({k: v for k, v in run.items() if k != "memory_after"}), flush=True)
            runs.append(run)
        if big:
            runs.append(big_cluster_run(cookies, queue, nodes, (duration, warmup, think)))
    finally:
        cleanup = {**(bench_queue.restore(on_head) if big else {}), **remove_demo_users()}
        print(f"bench users removed: {cleanup}", flush=True)
    last = runs[-1]  # the most users, and the big cluster where one was asked for
    over = f" with {queue} jobs queued and {nodes} nodes declared" if big else ""
    return {
        "benchmark": "portal dashboard on the demo's real stack (bench/bench_portal.py --target demo)",
        "goal": {
            "p99_ms": 150,
            "slurmrestd_calls": "independent of the number of users",
            "memory_total_pss_mb": 120,
            "memory_compare": "JupyterHub + its proxy: 189 MB RSS",
        },
        "setup": {
            **setup,
            "path": "https://127.0.0.1:8443 (podman port) -> nginx (TLS, HTTP/1.1 keep-alive) -> gunicorn (unix socket)"
            " -> MariaDB (unix socket), slurmrestd (JWT per user) -> slurmctld / slurmdbd, LDAP re-check (slapd)",
            "users": (
                f"{max(users)} LDAP users {BENCH_PREFIX}001.. (posixAccount, uid {BENCH_GID + 1}.., "
                f"group {BENCH_GROUP}), Slurm associations in account {DEMO_ACCOUNT}, registered in the portal as a "
                "first login does (row, TOTP enrolled, login recorded; LDAP re-checks spread over one period), "
                "cookies signed in the head with the portal's key; all removed after the run"
            ),
            "user_setup_s": created_s,
            "client": "asyncio, one keep-alive HTTPS connection per user (verified with the demo CA), closed loop",
            "leftovers_removed_before": leftovers,
            "removed_after": cleanup,
        },
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "note": "the demo's three containers and other agents' jobs share this machine",
        },
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "floor": floor,
        "runs": runs,
        "memory": {"measured": f"at the end of the {last['users']}-user run{over}", **last["memory_after"]},
    }


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    demo = doc.get("demo", {}).get("runs", [])
    if demo:
        xs = [r["users"] for r in demo]
        ax.plot(xs, [r["latency_ms"]["p50"] for r in demo], "o-", color="tab:blue", label="demo (nginx+TLS): p50")
        ax.plot(xs, [r["latency_ms"]["p99"] for r in demo], "s-", color="tab:red", label="demo (nginx+TLS): p99")
        ax.plot(xs, [r["latency_second_half_ms"]["p99"] for r in demo], "^:", color="tab:red",
                label="demo: p99 of the window's second half")  # fmt: skip
    stand_in = doc.get("runs", [])
    if stand_in:
        xs = [r["users"] for r in stand_in]
        ax.plot(xs, [r["p50_ms"] for r in stand_in], "o--", color="tab:blue", alpha=0.5, label="stand-in: p50")
        ax.plot(xs, [r["p99_ms"] for r in stand_in], "s--", color="tab:red", alpha=0.5, label="stand-in: p99")
    ax.axhline(150, color="grey", linestyle=":", label="goal: p99 150 ms")
    ax.set_xlabel("concurrent users (1 page load per user and second)")
    ax.set_ylabel("dashboard GET / latency (ms)")
    ax.set_yscale("log")
    ax.set_title("Carme portal dashboard under load")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=("stand-in", "demo"), default="stand-in",
                    help="stand-in: local gunicorn and stand-in slurmrestd (the control); demo: the demo")  # fmt: skip
    ap.add_argument("--users", default="20,200", help="comma-separated user counts, one run each (max 1000)")
    ap.add_argument("--duration", type=float, default=None,
                    help="measured seconds per run (max 300; default 60, --target demo 40)")  # fmt: skip
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--think", type=float, default=1.0, help="seconds each user waits between page loads")
    ap.add_argument("--workers", type=int, default=2, help="stand-in only (the demo runs what its role deployed)")
    ap.add_argument("--threads", type=int, default=16, help="stand-in only")
    ap.add_argument("--queue", type=int, default=0,
                    help="--target demo: the most users again over this many held jobs")  # fmt: skip
    ap.add_argument("--nodes", type=int, default=0,
                    help="--target demo: the nodes slurm.conf declares in that run")  # fmt: skip
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "portal.json")
    ap.add_argument("--plot", type=Path, default=None, help="write a PNG of latency (p50/p99) against users")
    args = ap.parse_args(argv)
    demo = args.target == "demo"
    duration = args.duration if args.duration is not None else (40.0 if demo else 60.0)
    counts = [int(u) for u in args.users.split(",")]
    limit = MAX_DEMO_USERS if demo else MAX_USERS
    if any(not 0 < u <= limit for u in counts) or not 0 < duration <= MAX_DURATION_S:
        ap.error(f"users must be 1..{limit} and duration 0..{MAX_DURATION_S:.0f} s")
    if demo and duration + 2 > TIME_WAIT_S:
        ap.error(f"--target demo counts slurmrestd calls over at most {TIME_WAIT_S - 2} s: use a shorter --duration")
    previous: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    if demo:
        nodes_ok = args.nodes == 0 or 2 <= args.nodes <= bench_queue.MAX_NODES
        if not 0 <= args.queue <= bench_queue.MAX_QUEUE or not nodes_ok:
            ap.error(f"--queue must be 0..{bench_queue.MAX_QUEUE}, --nodes 2..{bench_queue.MAX_NODES}")
        doc = {**previous, "demo": run_demo(counts, duration, args.warmup, args.think, args.queue, args.nodes)}
    else:
        doc = run_stand_in(counts, duration, args)
        if "demo" in previous:
            doc["demo"] = previous["demo"]  # the real stack's results stay
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    if args.plot is not None:
        plot(doc, args.plot)
        print(f"plot: {args.plot}")
    return 0


def run_stand_in(counts: list[int], duration: float, args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for users in counts:
        print(f"{users} users, {duration:.0f} s ...", flush=True)
        run = run_once(users, duration, args.warmup, args.think, args.workers, args.threads)
        print(json.dumps(run), flush=True)
        runs.append(run)
    return {
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


if __name__ == "__main__":
    raise SystemExit(main())
