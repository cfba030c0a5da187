# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme-launch`` once the plan is made (:func:`run_launch`): the session front on the node's address, the
connection file, the app (argv, no shell), its readiness behind the front, the job comment, and SIGTERM/SIGINT
forwarded to the app, whose exit code it returns."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Protocol

from carme_runtime.command_runner import spawn as spawn_child
from carme_runtime.exit_codes import ExitCode
from carme_runtime.front import Front
from carme_runtime.front import bind_front_socket
from carme_runtime.front import verify_endpoint
from carme_runtime.probe import is_ready_status
from carme_runtime.probe import probe_http
from carme_runtime.publish import connection_info
from carme_runtime.publish import publish_argv
from carme_runtime.publish import published_comment
from carme_runtime.publish import write_connection_file

if TYPE_CHECKING:
    from carme_runtime.command_runner import Runner
    from carme_runtime.launch_plan import LaunchPlan


class Process(Protocol):
    """What the launcher needs of a child process (``subprocess.Popen`` satisfies it)."""

    pid: int

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


Spawn = Callable[[list[str], dict[str, str], str], Process]
Probe = Callable[[str, int, str, Mapping[str, str], float], "int | None"]


def say_on_stderr(msg: str) -> None:
    print(f"carme-launch: {msg}", file=sys.stderr, flush=True)


def run_launch(
    plan: LaunchPlan,
    *,
    home: str,
    runner: Runner,
    spawn: Spawn = spawn_child,
    probe: Probe = probe_http,
    ready_timeout: float = 300.0,
    interval: float = 0.5,
    install_signals: bool = True,
    log: Callable[[str], None] | None = None,
) -> int:
    """Start the front and the app, write the connection file, wait for readiness, publish, wait for the app."""
    say = log or say_on_stderr
    public = plan.public_host or plan.host
    try:
        sock = bind_front_socket(public)
    except OSError as exc:
        say(f"cannot start the session front: {exc}")
        runner(publish_argv(plan.job_id, published_comment(plan.app, public, 0, "failed")))
        return ExitCode.ERROR
    front = Front(
        sock,
        app_host=plan.host,
        app_port=plan.port,
        secret=plan.secret,
        job_id=plan.job_id,
        base_path=plan.app.base_url(plan.job_id),
        app_unix=plan.app_socket or None,
        strip_prefix=plan.app.strip_prefix,
        app_headers=plan.probe_headers,
    ).start()
    run = _AppRun(plan, public, front.port, runner, say)
    try:
        return run.run(home, spawn, probe, ready_timeout, interval, install_signals)
    finally:
        front.stop()


class _AppRun:
    """The app's life behind a started front (on ``public``:``front_port``)."""

    def __init__(
        self, plan: LaunchPlan, public: str, front_port: int, runner: Runner, say: Callable[[str], None]
    ) -> None:
        self.plan = plan
        self.public = public
        self.front_port = front_port
        self.runner = runner
        self.say = say

    def publish(self, state: str) -> tuple[int, str, str]:
        comment = published_comment(self.plan.app, self.public, self.front_port, state)
        return self.runner(publish_argv(self.plan.job_id, comment))

    def run(
        self, home: str, spawn: Spawn, probe: Probe, ready_timeout: float, interval: float, install_signals: bool
    ) -> int:
        plan = self.plan
        info = connection_info(
            plan.app,
            plan.job_id,
            self.public,
            self.front_port,
            plan.app_secret,
            app_port=plan.port,
            app_socket=plan.app_socket,
        )
        self.say(f"connection details in {write_connection_file(home, plan.job_id, info)}")
        try:
            child = spawn(plan.argv, plan.env, plan.workdir)
        except OSError as exc:
            self.say(f"cannot start {plan.argv[0]}: {exc}")
            self.publish("failed")
            return ExitCode.APP_START_FAILED
        previous = _forward_signals(child) if install_signals else {}
        try:
            if not self.wait_ready(child, probe, ready_timeout, interval):
                return self.not_ready(child, ready_timeout)
            prc, _out, err = self.publish("ready")
            if prc != 0:
                self.say(f"could not publish the session in the job comment: {err.strip()[:200]}")
            where = {"netns": f"{plan.app_socket} (own network namespace)", "socket": plan.app_socket}.get(
                plan.app.isolation, f"{plan.host}:{plan.port}"
            )
            self.say(f"{plan.app.name} ready on {where}, behind the front on {self.public}:{self.front_port}")
            return _exit_code(child.wait())
        finally:
            for restored, handler in previous.items():
                signal.signal(restored, handler)  # type: ignore[arg-type]

    def wait_ready(self, child: Process, probe: Probe, ready_timeout: float, interval: float) -> bool:
        """Whether the app answers its readiness path, and then the front its challenge, before the timeout."""
        plan = self.plan
        upstream = plan.app_socket or plan.host
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if child.poll() is not None:
                return False
            if is_ready_status(probe(upstream, plan.port, plan.readiness_path, plan.probe_headers, 5.0)):
                ready = verify_endpoint(self.public, self.front_port, plan.job_id, plan.secret, 5.0)
                if not ready:
                    self.say(f"the session front on {self.public}:{self.front_port} does not answer its challenge")
                return ready
            time.sleep(interval)
        return False

    def not_ready(self, child: Process, ready_timeout: float) -> int:
        """Publish ``state=failed``, stop an app still running, and say how it ended."""
        rc = child.poll()
        self.say(f"{self.plan.app.name} {'exited' if rc is not None else f'not ready after {ready_timeout:g} s'}")
        self.publish("failed")
        if rc is not None:
            return _exit_code(rc) or ExitCode.APP_START_FAILED
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return ExitCode.APP_NOT_READY


def _forward_signals(child: Process) -> dict[int, object]:
    """Forward SIGTERM and SIGINT to ``child``; the handlers they replace, to restore."""

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    return {forwarded: signal.signal(forwarded, forward) for forwarded in (signal.SIGTERM, signal.SIGINT)}


def _exit_code(rc: int) -> int:
    return 128 - rc if rc < 0 else rc  # killed by signal N -> 128+N, like a shell
