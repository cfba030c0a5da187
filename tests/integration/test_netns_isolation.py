# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue #11 on the host: an app without authentication, started by carme-launch as one user, is unreachable by another.

Runs as root (to create two throwaway users and act as each); the launcher itself runs as the first user, with the
real ``unshare`` and the kernel's unprivileged user namespaces. The app is ``python -m http.server`` (no
authentication, like TensorBoard). No Slurm: ``scontrol`` is replaced by a runner that records its argv.
"""

from __future__ import annotations

import http.client
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from carme_runtime import front
from carme_runtime.exit_codes import ExitCode

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create users and run as them")

SECRET = "netns-host-" + "q" * 40
JOB = 7311
STUB_BIN = Path(__file__).parent.parent / "runtime" / "data" / "netns-bin"
OWNER, OTHER = "carmens-alice", "carmens-bob"
REPO = Path(__file__).resolve().parent.parent.parent
# The test venv's interpreter may sit under /root (mode 0700); the users run Debian's python3 with the repo on
# PYTHONPATH (carme_runtime is stdlib-only, and the bridge imports it by path).
PYTHON = "/usr/bin/python3"

# Runs as OWNER: carme-launch's launch_from_env with a proxy-mode app; scontrol calls go to <home>/scontrol.log.
DRIVER = r"""
import json, os, sys
from carme_runtime import launch
from carme_runtime.apps import app_from_dict
from carme_runtime.config import RuntimeConfig
env = json.loads(os.environ["DRIVER_ENV"])
log = os.path.join(env["HOME"], "scontrol.log")
def runner(argv, *, input_text=None, env=None):
    with open(log, "a") as fh:
        fh.write(json.dumps(argv) + "\n")
    return 0, "", ""
app = app_from_dict({
    "name": "board", "title": "no-auth board", "secret_mode": "proxy", "readiness_path": "{base_url}",
    "argv": [sys.executable, "-m", "http.server", "--bind", "{host}", "--directory", "{workdir}", "{port}"],
})
cfg = RuntimeConfig.from_mapping({"bind_address": "127.0.0.1", "scratch_root": "/nonexistent", "ready_timeout_s": 30})
sys.exit(launch.launch_from_env(env, runner=runner, config=cfg, apps={"board": app}))
"""

# Runs as OTHER: what a connect() to the given TCP port or Unix socket gets.
PROBE = r"""
import socket, sys
target = sys.argv[1]
family, addr = (socket.AF_UNIX, target) if target.startswith("/") else (socket.AF_INET, ("127.0.0.1", int(target)))
s = socket.socket(family, socket.SOCK_STREAM)
try:
    s.connect(addr)
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""


@dataclass
class Users:
    owner: pwd.struct_passwd
    other: pwd.struct_passwd
    root: Path


def _ensure(name: str, created: list[str]) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        created.append(name)
        return pwd.getpwnam(name)


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    if shutil.which("useradd") is None or shutil.which("unshare") is None:
        pytest.skip("useradd or unshare (util-linux) missing")
    version = subprocess.run([PYTHON, "-c", "import sys; print(sys.version_info >= (3, 11))"], capture_output=True)
    if version.stdout.strip() != b"True":
        pytest.skip(f"{PYTHON} (3.11 or later) missing")
    created: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="carme-netns-test-"))
    root.chmod(0o755)
    try:
        yield Users(_ensure(OWNER, created), _ensure(OTHER, created), root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        for name in created:
            subprocess.run(["userdel", name], check=False)


def start_driver(users: Users, name: str, path: str) -> tuple[subprocess.Popen[str], Path, Path]:
    owner = users.owner
    home = users.root / name
    work = home / "work"
    (work / "proxy" / str(JOB)).mkdir(parents=True)
    (work / "proxy" / str(JOB) / "index.html").write_text("carme netns board\n")
    for p in (home, work, work / "proxy", work / "proxy" / str(JOB), work / "proxy" / str(JOB) / "index.html"):
        os.chown(p, owner.pw_uid, owner.pw_gid)
    home.chmod(0o700)
    job_env = {
        "SLURM_JOB_ID": str(JOB),
        "CARME_APP": "board",
        "CARME_RUNTIME": "none",
        "CARME_IMAGE": "/usr",
        "CARME_WORKDIR": str(work),
        "CARME_SESSION_SECRET": SECRET,
        "HOME": str(home),
        "PATH": path,
    }
    proc = subprocess.Popen(
        [PYTHON, "-c", DRIVER],
        user=owner.pw_uid,
        group=owner.pw_gid,
        extra_groups=[],
        env={"DRIVER_ENV": json.dumps(job_env), "PATH": path, "PYTHONPATH": str(REPO)},
        cwd=str(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, home, home / "scontrol.log"


def as_other(users: Users, target: str) -> str:
    out = subprocess.run(
        [PYTHON, "-c", PROBE, target],
        user=users.other.pw_uid,
        group=users.other.pw_gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout.strip()


def get(port: int, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_other_users_reach_neither_the_port_nor_the_socket(users: Users) -> None:
    proc, home, log = start_driver(users, "ok", os.environ.get("PATH", "/usr/bin:/bin"))
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and "state=ready" in log.read_text()):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "not ready within 60 s"
            time.sleep(0.1)
        info = json.loads((home / ".carme" / "sessions" / f"{JOB}.json").read_text())
        sock_path = Path(info["app_socket"])
        assert info["isolation"] == "netns"

        # (1) through the front, with the key: the app answers; without it: 403
        status, body = get(info["port"], f"/proxy/{JOB}/", front.front_headers(SECRET, JOB))
        assert (status, body) == (200, b"carme netns board\n")
        assert get(info["port"], f"/proxy/{JOB}/", {})[0] == 403

        # (2) the app's port does not exist on the node: refused for the other user, and even for root
        assert as_other(users, str(info["app_port"])) == "ConnectionRefusedError"
        assert as_other(users, str(info["app_port"])) == "ConnectionRefusedError"
        with pytest.raises(ConnectionRefusedError):
            http.client.HTTPConnection("127.0.0.1", info["app_port"], timeout=5).connect()

        # (3) the Unix socket: in a 0700 directory of the owner, the other user gets EACCES
        assert as_other(users, str(sock_path)) == "PermissionError"
        st = sock_path.parent.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (users.owner.pw_uid, 0o700)

        # the app runs under the owner's uid (the nested user namespace maps it back), not as root
        app_uids = {
            int(line.split()[1])
            for pid in os.listdir("/proc")
            if pid.isdigit() and Path(f"/proc/{pid}/cmdline").exists()
            for cmd in [Path(f"/proc/{pid}/cmdline").read_bytes()]
            if b"http.server" in cmd and str(info["app_port"]).encode() in cmd
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("Uid:")
        }
        assert app_uids == {users.owner.pw_uid}
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 128 + signal.SIGTERM, out  # the app got the SIGTERM and died of it
    assert not sock_path.parent.exists()  # the socket directory is removed


def test_without_user_namespaces_the_launch_fails_clearly(users: Users) -> None:
    started = time.monotonic()
    proc, home, log = start_driver(users, "nouserns", f"{STUB_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    out = proc.communicate(timeout=60)[0]
    assert time.monotonic() - started < 30
    assert proc.returncode == ExitCode.NETNS_UNAVAILABLE, out
    assert "private network namespace" in out and "Operation not permitted" in out
    assert "state=failed" in log.read_text()
    assert not (home / ".carme" / "sessions" / f"{JOB}.json").exists()  # the app never started
