# SPDX-License-Identifier: GPL-3.0-or-later
"""carme-launch and the session secret S (issue #27, item 5): the app gets only the app secret (front.app_secret);
S stays with the launcher and the front, and the front adds the app's token itself. Only 127.0.0.x."""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from pathlib import Path

import pytest

from carme_runtime import front
from carme_runtime import launch
from carme_runtime import launch_plan
from carme_runtime.apps import app_from_dict
from carme_runtime.apps import load_apps
from carme_runtime.config import RuntimeConfig
from carme_runtime.exit_codes import ExitCode
from tests.runtime.test_launch import APP_SECRET
from tests.runtime.test_launch import CHILD
from tests.runtime.test_launch import SECRET
from tests.runtime.test_launch import TEST_APP
from tests.runtime.test_launch import config
from tests.runtime.test_launch import job_env

# The token app of test_launch, which here runs until a request with its token reaches .../quit.
QUIT_APP = app_from_dict(
    {
        "name": "myapp",
        "title": "Test app",
        "argv": [sys.executable, "-c", CHILD, "{host}", "{port}", "quit"],
        "env": {"MYAPP_TOKEN": "{secret}"},
        "secret_mode": "token",
        "readiness_path": "{base_url}api/status",
        "secret_header": {"name": "Authorization", "value": "token {secret}"},
    }
)


@pytest.mark.parametrize("runtime", ["none", "apptainer"])
@pytest.mark.parametrize("name", ["jupyterlab", "code-server", "tensorboard"])
def test_the_app_is_rendered_with_the_app_secret_and_never_sees_the_session_secret(
    tmp_path: Path, name: str, runtime: str
) -> None:
    env = job_env(tmp_path, CARME_APP=name, CARME_RUNTIME=runtime, CARME_IMAGE="/opt/images/x.sif")
    socket_dir = str(tmp_path / "sock")
    plan = launch_plan.plan_launch(
        env, load_apps([]), config(tmp_path), home=str(tmp_path), host="127.0.0.1", port=41234, socket_dir=socket_dir
    )
    assert not any(SECRET in v for v in [*plan.argv, *plan.env.values()])
    if plan.app.secret_mode != "proxy":
        assert any(v == APP_SECRET for v in plan.env.values())
    other_job = launch_plan.plan_launch(
        {**env, "SLURM_JOB_ID": "78"},
        load_apps([]),
        config(tmp_path),
        home=str(tmp_path),
        host="127.0.0.1",
        port=41234,
        socket_dir=socket_dir,
    )
    assert other_job.app_secret == front.app_secret(SECRET, 78) != plan.app_secret


def test_a_plan_that_would_hand_the_session_secret_to_the_app_is_refused(tmp_path: Path) -> None:
    env = job_env(tmp_path, SOME_VARIABLE=f"x{SECRET}")  # only CARME_SESSION_SECRET is removed by name
    with pytest.raises(launch_plan.LaunchError) as err:
        launch_plan.plan_launch(
            env, {"myapp": TEST_APP}, config(tmp_path), home=str(tmp_path), host="127.0.0.1", port=9
        )
    assert err.value.code == ExitCode.CONFIG


def get(port: int, path: str, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.2", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_front_hands_the_app_its_token_and_the_token_alone_opens_nothing(tmp_path: Path, fake_runner) -> None:
    """A token app behind the front on 127.0.0.2: nginx sends only the front key; what the app would show (its
    token, the app secret) gets a 403 from the front without the key; S is nowhere in the app's process."""
    cfg = RuntimeConfig.from_mapping(
        {"bind_address": "127.0.0.2", "scratch_root": str(tmp_path / "scratch"), "ready_timeout_s": 30}
    )
    result: list[int] = []

    def run() -> None:
        env, apps = job_env(tmp_path), {"myapp": QUIT_APP}
        result.append(
            launch.launch_from_env(env, runner=fake_runner, config=cfg, apps=apps, install_signals=False, log=print)
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not any(c[-1].endswith("state=ready") for c in fake_runner.calls):
        assert time.monotonic() < deadline and thread.is_alive(), fake_runner.calls
        time.sleep(0.05)
    port = json.loads((tmp_path / "home" / ".carme" / "sessions" / "77.json").read_text())["port"]
    token = {"Authorization": f"token {APP_SECRET}"}
    try:
        assert get(port, "/proxy/77/api/status", token) == 403  # the app secret is no front key
        assert get(port, "/proxy/77/api/status", {front.FRONT_HEADER: APP_SECRET}) == 403
        assert get(port, "/proxy/77/api/status", front.front_headers(SECRET, 77)) == 200  # the front adds the token
        forged = {**front.front_headers(SECRET, 77), "Authorization": "token forged"}
        assert get(port, "/proxy/77/api/status", forged) == 200  # replaced by the front's own
        seen = json.loads((tmp_path / "seen.json").read_text())
        assert not any(SECRET in v for v in [*seen["argv"], *seen["env"].values()])
    finally:
        get(port, "/proxy/77/quit", front.front_headers(SECRET, 77))
        thread.join(30)
    assert result == [0]
