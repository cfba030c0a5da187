# SPDX-License-Identifier: GPL-3.0-or-later
"""carme-launch: secret handling, connection file, readiness probe, publication. Only 127.0.0.1."""

from __future__ import annotations

import http.server
import json
import os
import pwd
import signal
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from carme_runtime import front
from carme_runtime import launch
from carme_runtime import launch_plan
from carme_runtime import launch_run
from carme_runtime import probe
from carme_runtime import publish
from carme_runtime.apps import app_from_dict
from carme_runtime.apps import load_apps
from carme_runtime.config import RuntimeConfig
from carme_runtime.exit_codes import ExitCode
from tests.fixtures.net import serve_http

SECRET = "s3cr3t-" + "x" * 40  # the session secret (CARME_SESSION_SECRET)
APP_SECRET = front.app_secret(SECRET, 77)  # what the app gets as its token or password

# The "app": records its argv and environment in ./seen.json, answers 403 without the token header, 200 with it,
# then exits 0 (after the first good request, or with a 3rd argument "quit" after a good request to .../quit).
CHILD = r"""
import http.server, json, os, sys
json.dump(dict(argv=sys.argv, env=dict(os.environ)), open("seen.json", "w"))  # no braces: argv is a template
token = os.environ["MYAPP_TOKEN"]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.headers.get("Authorization") == "token " + token
        self.send_response(200 if ok else 403)
        self.end_headers()
        self.server.done = ok and (sys.argv[3:] != ["quit"] or self.path.endswith("/quit"))
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), H)
srv.done = False
while not srv.done:
    srv.handle_request()
srv.server_close()
"""

TEST_APP = app_from_dict(
    {
        "name": "myapp",
        "title": "Test app",
        "argv": [sys.executable, "-c", CHILD, "{host}", "{port}"],
        "env": {"MYAPP_TOKEN": "{secret}"},
        "secret_mode": "token",
        "readiness_path": "{base_url}api/status",
        "secret_header": {"name": "Authorization", "value": "token {secret}"},
    }
)


def job_env(tmp_path: Path, **over: str) -> dict[str, str]:
    env = {
        "SLURM_JOB_ID": "77",
        "CARME_APP": "myapp",
        "CARME_IMAGE": sys.prefix,
        "CARME_RUNTIME": "none",
        "CARME_WORKDIR": str(tmp_path),
        "CARME_SESSION_SECRET": SECRET,
        "HOME": str(tmp_path / "home"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    env.update(over)
    return env


def config(tmp_path: Path) -> RuntimeConfig:
    return RuntimeConfig.from_mapping(
        {"bind_address": "127.0.0.1", "scratch_root": str(tmp_path / "scratch"), "ready_timeout_s": 30}
    )


class TokenHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.headers.get("Authorization") == f"token {APP_SECRET}"
        self.send_response(200 if ok else 403)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def token_server() -> Iterator[int]:
    with serve_http(TokenHandler) as srv:
        yield srv.server_address[1]


def test_probe_http_with_and_without_secret(token_server: int) -> None:
    assert probe.probe_http("127.0.0.1", token_server, "/", {}, 5.0) == 403
    assert probe.probe_http("127.0.0.1", token_server, "/", {"Authorization": f"token {APP_SECRET}"}, 5.0) == 200
    assert not probe.is_ready_status(403)
    assert probe.is_ready_status(200)


def test_probe_http_nothing_listening() -> None:
    port = launch.pick_free_port("127.0.0.1")
    assert probe.probe_http("127.0.0.1", port, "/", {}, 1.0) is None


def test_connection_file_mode_0600_in_0700_dir(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = publish.write_connection_file(str(tmp_path), 77, {"app_secret": APP_SECRET, "port": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / ".carme").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / ".carme" / "sessions").st_mode) == 0o700
    assert json.loads(Path(path).read_text())["app_secret"] == APP_SECRET


def test_connection_file_refuses_symlinked_dir(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / ".carme").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(launch_plan.LaunchError):
        publish.write_connection_file(str(tmp_path), 77, {})


def test_launch_end_to_end_with_real_child(tmp_path: Path, fake_runner) -> None:
    env = job_env(tmp_path)
    rc = launch.launch_from_env(
        env,
        runner=fake_runner,
        config=config(tmp_path),
        apps={"myapp": TEST_APP},
        log=lambda _m: None,
    )
    assert rc == 0
    conn = tmp_path / "home" / ".carme" / "sessions" / "77.json"
    info = json.loads(conn.read_text())
    assert info["host"] == "127.0.0.1"
    assert info["app_secret"] == APP_SECRET  # the user's token / password: never the session secret
    assert "secret" not in info and SECRET not in conn.read_text()
    seen = json.loads((tmp_path / "seen.json").read_text())  # what the app process really got
    assert seen["env"]["MYAPP_TOKEN"] == APP_SECRET and "CARME_SESSION_SECRET" not in seen["env"]
    assert not any(SECRET in v for v in [*seen["argv"], *seen["env"].values()])
    assert info["base_url"] == "/proxy/77/"
    assert info["app_port"] != info["port"]  # the app is behind the front
    assert front.PORT_RANGE[0] <= info["port"] <= front.PORT_RANGE[1]
    assert stat.S_IMODE(conn.stat().st_mode) == 0o600
    assert fake_runner.calls == [
        [
            "scontrol",
            "update",
            "JobId=77",
            "Requeue=0",  # a session on a lost node ends; slurmrestd 22.05 ignores requeue: false at submit
            f"Comment=carme:v1;app=myapp;host=127.0.0.1;port={info['port']};state=ready",
        ]
    ]
    assert not any(SECRET in arg for call in fake_runner.calls for arg in call)


@pytest.mark.parametrize("secret", [None, "", "too-short"])
def test_refuses_missing_or_short_secret(tmp_path: Path, fake_runner, secret: str | None) -> None:
    env = job_env(tmp_path)
    if secret is None:
        del env["CARME_SESSION_SECRET"]
    else:
        env["CARME_SESSION_SECRET"] = secret
    spawned: list[list[str]] = []

    def spawn(argv: list[str], env: dict[str, str], cwd: str) -> launch_run.Process:
        spawned.append(argv)
        raise AssertionError("must not start")

    rc = launch.launch_from_env(
        env,
        runner=fake_runner,
        config=config(tmp_path),
        apps={"myapp": TEST_APP},
        spawn=spawn,
        log=lambda _m: None,
    )
    assert rc == ExitCode.SECRET_MISSING
    assert spawned == [] and fake_runner.calls == []
    assert not (tmp_path / "home" / ".carme").exists()


def test_not_in_job_and_unknown_app(tmp_path: Path, fake_runner) -> None:
    env = job_env(tmp_path)
    del env["SLURM_JOB_ID"]
    cfg = config(tmp_path)
    assert launch.launch_from_env(env, runner=fake_runner, config=cfg, apps={}, log=lambda _m: None) == (
        ExitCode.NOT_IN_JOB
    )
    env = job_env(tmp_path, CARME_APP="nope")
    assert launch.launch_from_env(env, runner=fake_runner, config=cfg, apps={}, log=lambda _m: None) == (
        ExitCode.CONFIG
    )


def test_plan_for_jupyter_in_apptainer(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    env = job_env(
        tmp_path,
        CARME_APP="jupyterlab",
        CARME_RUNTIME="apptainer",
        CARME_IMAGE="/opt/images/pytorch.sif",
        CUDA_VISIBLE_DEVICES="0",
    )
    sockets = tmp_path / "sock"
    plan = launch_plan.plan_launch(
        env, load_apps([]), config(tmp_path), home=home, host="10.0.0.5", port=41234, socket_dir=str(sockets)
    )
    assert plan.app_socket == str(sockets / "app.sock")
    assert f"--ServerApp.sock={sockets}/app.sock" in plan.argv
    assert plan.argv[:6] == ["apptainer", "exec", "--nv", "--contain", "--cleanenv", "--no-eval"]
    assert plan.argv[6:9] == ["--pwd", str(tmp_path), "--bind"]
    assert plan.argv[9] == f"{home}:{home},{sockets}:{sockets}"  # the app's socket directory, seen outside too
    assert plan.argv[10] == "/opt/images/pytorch.sif"
    assert plan.argv[11:13] == ["jupyter", "lab"]
    assert plan.env["APPTAINERENV_JUPYTER_TOKEN"] == APP_SECRET
    assert "CARME_SESSION_SECRET" not in plan.env
    assert not any(SECRET in a for a in plan.argv)
    assert not any(SECRET in v for v in plan.env.values())
    assert plan.probe_headers == {"Authorization": f"token {APP_SECRET}"}
    assert plan.secret == SECRET and plan.app_secret == APP_SECRET
    assert plan.readiness_path == "/proxy/77/api/status"


class StuckProcess:
    pid = 4242

    def __init__(self) -> None:
        self.signals: list[int] = []
        self.rc: int | None = None

    def poll(self) -> int | None:
        return self.rc

    def wait(self, timeout: float | None = None) -> int:
        self.rc = -15
        return self.rc

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    def kill(self) -> None:
        self.signals.append(signal.SIGKILL)


def test_not_ready_publishes_failed_and_stops_app(tmp_path: Path, fake_runner) -> None:
    plan = launch_plan.plan_launch(
        job_env(tmp_path), {"myapp": TEST_APP}, config(tmp_path), home=str(tmp_path), host="127.0.0.1", port=9
    )
    child = StuckProcess()
    rc = launch_run.run_launch(
        plan,
        home=str(tmp_path),
        runner=fake_runner,
        spawn=lambda a, e, c: child,
        probe=lambda *a: None,
        ready_timeout=0.05,
        interval=0.01,
        install_signals=False,
        log=lambda _m: None,
    )
    assert rc == ExitCode.APP_NOT_READY
    assert child.signals == [signal.SIGTERM]
    assert fake_runner.calls[-1][-1].endswith("state=failed")


def test_sigterm_is_forwarded_to_app(tmp_path: Path, fake_runner) -> None:
    plan = launch_plan.plan_launch(
        job_env(tmp_path), {"myapp": TEST_APP}, config(tmp_path), home=str(tmp_path), host="127.0.0.1", port=9
    )

    class Child(StuckProcess):
        def wait(self, timeout: float | None = None) -> int:
            os.kill(os.getpid(), signal.SIGTERM)  # Slurm cancels the job while the app runs
            return -15 if signal.SIGTERM in self.signals else 0

    child = Child()
    rc = launch_run.run_launch(
        plan,
        home=str(tmp_path),
        runner=fake_runner,
        spawn=lambda a, e, c: child,
        probe=lambda *a: 200,
        log=lambda _m: None,
    )
    assert child.signals == [signal.SIGTERM]
    assert rc == 128 + 15
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# An app without authentication (like TensorBoard): answers everything with 200, exits on .../quit.
OPEN_CHILD = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"open")
        self.server.done = self.path.endswith("/quit")
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), H)
srv.done = False
while not srv.done:
    srv.handle_request()
srv.server_close()
"""

OPEN_APP = app_from_dict(
    {
        "name": "openapp",
        "title": "No-auth app",
        "argv": [sys.executable, "-c", OPEN_CHILD, "{host}", "{port}"],
        "secret_mode": "proxy",
        "readiness_path": "{base_url}",
    }
)


def test_an_app_without_auth_is_reachable_only_through_the_front(tmp_path: Path, fake_runner) -> None:
    """The app listens on 127.0.0.1 only; the node address (here 127.0.0.2) has the front, which wants the key."""
    import http.client
    import socket
    import time

    env = job_env(tmp_path, CARME_APP="openapp")
    cfg = RuntimeConfig.from_mapping(
        {"bind_address": "127.0.0.2", "scratch_root": str(tmp_path / "scratch"), "ready_timeout_s": 30}
    )
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(
            launch.launch_from_env(
                env, runner=fake_runner, config=cfg, apps={"openapp": OPEN_APP}, install_signals=False, log=print
            )
        ),
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + 30
    while not any(c[-1].endswith("state=ready") for c in fake_runner.calls):
        assert time.monotonic() < deadline and thread.is_alive(), fake_runner.calls
        time.sleep(0.05)
    info = json.loads((tmp_path / "home" / ".carme" / "sessions" / "77.json").read_text())
    assert info["host"] == "127.0.0.2"
    assert fake_runner.calls[-1][-1] == f"Comment=carme:v1;app=openapp;host=127.0.0.2;port={info['port']};state=ready"

    def get(port: int, path: str, headers: dict[str, str]) -> int:
        conn = http.client.HTTPConnection("127.0.0.2", port, timeout=10)
        try:
            conn.request("GET", path, headers=headers)
            return conn.getresponse().status
        finally:
            conn.close()

    with pytest.raises(ConnectionRefusedError):  # the app is not on the node address
        socket.create_connection(("127.0.0.2", info["app_port"]), timeout=5).close()
    assert get(info["port"], "/proxy/77/", {}) == 403
    assert front.verify_endpoint("127.0.0.2", info["port"], 77, SECRET, 5.0)
    assert get(info["port"], "/proxy/77/quit", front.front_headers(SECRET, 77)) == 200
    thread.join(30)
    assert result == [0]


def _passwd(shell: str) -> pwd.struct_passwd:
    return pwd.struct_passwd(("alice", "*", 20001, 20000, "Alice", "/home/alice", shell))


def test_login_environment_fills_what_a_rest_submission_leaves_out() -> None:
    env = launch.login_environment({"PATH": "/usr/bin", "CARME_APP": "jupyterlab"}, _passwd("/bin/bash"))
    assert env == {
        "PATH": "/usr/bin",
        "CARME_APP": "jupyterlab",
        "HOME": "/home/alice",
        "USER": "alice",
        "LOGNAME": "alice",
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
    }


def test_login_environment_keeps_the_jobs_own_values_and_skips_nologin() -> None:
    env = launch.login_environment({"HOME": "/scratch/a", "LC_ALL": "de_DE.UTF-8"}, _passwd("/usr/sbin/nologin"))
    assert env["HOME"] == "/scratch/a" and "LANG" not in env and "SHELL" not in env
