# SPDX-License-Identifier: GPL-3.0-or-later
"""``isolation = "netns"``: the pure parts (spec validation, argv, plan) and the Unix-socket paths, with real sockets.

The namespace itself (real ``unshare``, other uids) is tested as root in tests/integration/test_netns_isolation.py.
"""

from __future__ import annotations

import http.client
import http.server
import os
import socket
import stat
import struct
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from carme_runtime import front
from carme_runtime import launch
from carme_runtime import launch_plan
from carme_runtime import netns
from carme_runtime import probe
from carme_runtime.apps import AppSpecError
from carme_runtime.apps import app_from_dict
from carme_runtime.apps import load_apps
from carme_runtime.config import RuntimeConfig
from carme_runtime.exit_codes import ExitCode
from tests.fixtures.net import QuietHandler

SECRET = "netns-secret-" + "z" * 40
FIXTURE_BIN = Path(__file__).parent / "data" / "netns-bin"


def spec(**over: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": "board",
        "title": "Board",
        "argv": ["board", "--host={host}", "--port={port}"],
        "secret_mode": "proxy",
        "readiness_path": "{base_url}",
    }
    data.update(over)
    return data


def test_proxy_apps_default_to_netns_and_others_to_none() -> None:
    assert app_from_dict(spec()).isolation == "netns"
    token = app_from_dict(spec(secret_mode="token", env={"T": "{secret}"}))
    assert token.isolation == "none"
    assert app_from_dict(spec(secret_mode="token", env={"T": "{secret}"}, isolation="netns")).isolation == "netns"
    assert load_apps([])["tensorboard"].isolation == "netns"
    assert load_apps([])["jupyterlab"].isolation == "socket"
    assert load_apps([])["code-server"].isolation == "socket"


@pytest.mark.parametrize(("over", "field"), [({"isolation": "none"}, "isolation"), ({"isolation": "vm"}, "isolation")])
def test_proxy_apps_cannot_opt_out_and_unknown_values_fail(over: dict[str, object], field: str) -> None:
    with pytest.raises(AppSpecError) as err:
        app_from_dict(spec(**over), source="site.toml")
    assert err.value.field == field


def test_namespace_argv_wraps_the_bridge_then_the_app() -> None:
    argv = netns.namespace_argv(
        ["board", "--port=5000"],
        socket_path="/tmp/d/app.sock",
        port=5000,
        uid=1001,
        gid=1002,
        unshare="/u",
        python="/py",
    )
    assert argv[:5] == ["/u", "--user", "--map-root-user", "--net", "--"]
    assert argv[5:8] == ["/py", "-I", "-c"] and "carme_runtime.netns import main" in argv[8]
    assert "--socket=/tmp/d/app.sock" in argv and "--uid=1001" in argv and "--gid=1002" in argv
    assert argv[-3:] == ["--", "board", "--port=5000"]


def test_ifreq_layout_is_40_bytes() -> None:
    assert struct.calcsize(netns._IFREQ) == 40  # sizeof(struct ifreq) on Linux


def test_plan_for_a_netns_app(tmp_path: Path) -> None:
    app = app_from_dict(spec(argv=[sys.executable, "-m", "http.server", "--bind={host}", "{port}"]))
    env = {"SLURM_JOB_ID": "9", "CARME_APP": "board", "CARME_RUNTIME": "none", "CARME_IMAGE": sys.prefix}
    env["CARME_SESSION_SECRET"] = SECRET
    cfg = RuntimeConfig.from_mapping({"scratch_root": str(tmp_path)})
    kw = {"home": str(tmp_path), "host": "127.0.0.1", "port": 5000}
    plan = launch_plan.plan_launch(env, {"board": app}, cfg, socket_dir="/run/x", unshare="/usr/bin/unshare", **kw)
    assert plan.app_socket == "/run/x/app.sock"
    assert plan.argv[:4] == ["/usr/bin/unshare", "--user", "--map-root-user", "--net"]
    assert plan.argv[-6:] == ["--", sys.executable, "-m", "http.server", "--bind=127.0.0.1", "5000"]
    with pytest.raises(launch_plan.LaunchError) as err:
        launch_plan.plan_launch(env, {"board": app}, cfg, **kw)
    assert err.value.code == ExitCode.NETNS_UNAVAILABLE


def test_socket_dir_is_private_and_fresh(tmp_path: Path) -> None:
    first = launch.make_socket_dir({"TMPDIR": str(tmp_path)}, 7)
    second = launch.make_socket_dir({"TMPDIR": str(tmp_path)}, 7)
    assert first != second and Path(first).parent == tmp_path
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o700
    assert launch.make_socket_dir({"TMPDIR": "/" + "x" * 100}, 7).startswith("/tmp/carme-7-")


class Echo(QuietHandler):
    def do_GET(self) -> None:
        self.send_body(200, f"{self.path} {self.headers.get(front.FRONT_HEADER)}".encode())


class UnixHTTPServer(http.server.ThreadingHTTPServer):
    address_family = socket.AF_UNIX

    def server_bind(self) -> None:
        self.socket.bind(self.server_address)

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        conn, _ = self.socket.accept()
        return conn, ("local", 0)


@pytest.fixture
def unix_app(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "app.sock")
    server = UnixHTTPServer(path, Echo)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield path
    server.shutdown()
    server.server_close()


def test_probe_over_a_unix_socket(unix_app: str, tmp_path: Path) -> None:
    assert probe.probe_http(unix_app, 0, "/x", {}, 5.0) == 200
    assert probe.probe_http(str(tmp_path / "missing.sock"), 0, "/x", {}, 1.0) is None


def test_front_reaches_the_app_through_the_unix_socket(unix_app: str) -> None:
    sock = front.bind_front_socket("127.0.0.1")
    fr = front.Front(
        sock, app_host="127.0.0.1", app_port=1, secret=SECRET, job_id=5, base_path="/p/5/", app_unix=unix_app
    ).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", fr.port, timeout=10)
        conn.request("GET", "/p/5/x", headers=front.front_headers(SECRET, 5))
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, b"/p/5/x None")  # the key is not passed on
        conn.close()
    finally:
        fr.stop()


def test_check_userns_reports_a_failing_unshare_in_one_line() -> None:
    problem = netns.check_userns(str(FIXTURE_BIN / "unshare"), {"PATH": "/usr/bin:/bin"})
    assert problem is not None and "Operation not permitted" in problem and "\n" not in problem


def test_check_userns_does_not_hang(tmp_path: Path) -> None:
    stub = tmp_path / "unshare"
    stub.write_text("#!/bin/sh\nexec sleep 30\n")
    stub.chmod(0o755)
    problem = netns.check_userns(str(stub), {"PATH": "/usr/bin:/bin"}, timeout=0.5)
    assert problem is not None and "did not finish" in problem
