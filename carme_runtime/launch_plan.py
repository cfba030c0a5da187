# SPDX-License-Identifier: GPL-3.0-or-later
"""What ``carme-launch`` decides before the app starts (:func:`plan_launch`, no side effects): the app, its argv
wrapped in the session's runtime, its environment, and the secrets it may and may not see.

The app is rendered with the session's *app secret* (:func:`carme_runtime.front.app_secret`, an HMAC of the job id
with the session secret S); S never reaches the app: ``CARME_SESSION_SECRET`` is removed from its environment, and a
plan whose argv or environment holds S is refused.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from carme_runtime import datasets
from carme_runtime.apps import MIN_SECRET_LENGTH
from carme_runtime.apps import AppRenderError
from carme_runtime.exit_codes import ExitCode
from carme_runtime.front import app_secret
from carme_runtime.netns import SOCKET_NAME
from carme_runtime.netns import namespace_argv
from carme_runtime.runtimes import AllowedBind
from carme_runtime.runtimes import ApptainerRuntime
from carme_runtime.runtimes import Bind
from carme_runtime.runtimes import BindNotAllowed
from carme_runtime.runtimes import CharliecloudRuntime
from carme_runtime.runtimes import NoneRuntime
from carme_runtime.runtimes import default_allow_list
from carme_runtime.runtimes import default_binds

if TYPE_CHECKING:
    from carme_runtime.apps import AppSpec
    from carme_runtime.apps import RenderedApp
    from carme_runtime.config import RuntimeConfig
    from carme_runtime.runtimes import Runtime


class LaunchError(RuntimeError):
    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class LaunchPlan:
    """Everything decided before the app starts (pure: built by :func:`plan_launch`).

    ``host``/``port``: where the app listens (``127.0.0.1``); ``public_host``: where the front listens;
    ``app_socket``: the Unix socket that leads to the app when it runs in its own network namespace;
    ``secret``: the session secret (front key, challenge), ``app_secret``: what the app was rendered with;
    ``probe_headers``: the app's secret header for ``app_secret``, which the front adds to every request.
    """

    job_id: int
    app: AppSpec
    host: str
    port: int
    argv: list[str]
    env: dict[str, str]
    workdir: str
    readiness_path: str
    probe_headers: dict[str, str]
    secret: str
    app_secret: str
    public_host: str = ""
    app_socket: str = ""


def make_runtime(
    name: str, image: str, config: RuntimeConfig, home: str, socket_dir: str = "", user: str = ""
) -> Runtime:
    """The session's runtime; ``socket_dir`` (the 0700 directory of a socket app's Unix socket) may be bound."""
    if name in ("apptainer", "charliecloud"):
        allowed = default_allow_list(home, config.scratch_root, config.all_dataset_dirs())
        if socket_dir:
            allowed.append(AllowedBind(socket_dir))
        if name == "charliecloud":
            return CharliecloudRuntime(
                allowed, home=home, user=user or _user_name(), version=config.charliecloud_version
            )
        return ApptainerRuntime(allowed)
    if name == "none":
        return NoneRuntime(image or config.env_prefix)
    raise LaunchError(ExitCode.CONFIG, f"unknown runtime {name!r}")


def plan_launch(
    env: Mapping[str, str],
    apps: Mapping[str, AppSpec],
    config: RuntimeConfig,
    *,
    home: str,
    host: str,
    port: int,
    scratch: str | None = None,
    public_host: str | None = None,
    socket_dir: str = "",
    unshare: str = "unshare",
    rendezvous: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """Decide the app's argv and environment from the job environment (no side effects).

    An ``isolation = "netns"`` or ``"socket"`` app needs ``socket_dir`` (a 0700 directory of the user) for its
    Unix socket. ``rendezvous`` (:mod:`carme_runtime.rendezvous`) goes into the app's environment the way the
    runtime hands variables to the app (``APPTAINERENV_`` for Apptainer).
    """
    job_id, secret = _job_and_secret(env)
    app = _requested_app(env, apps)
    workdir = env.get("CARME_WORKDIR") or home
    app_socket = _app_socket(app, socket_dir)
    app_key = app_secret(secret, job_id)  # the app never sees the session secret itself
    rendered = _render(app, env, host=host, port=port, app_key=app_key, job_id=job_id, workdir=workdir, sock=app_socket)
    socket_bind = socket_dir if app.isolation == "socket" else ""  # the app listens there, inside a container too
    runtime, argv = _in_runtime(rendered, env, config, home=home, scratch=scratch, workdir=workdir, bind=socket_bind)
    if app.isolation == "netns":
        argv = _in_namespace(argv, app_socket, port, unshare)
    # SLURM_EXPORT_ENV is sbatch's --export (the job's few variable names): left in the app's environment, every
    # ``srun`` from the session's terminal would hand its tasks only those, without the rendezvous variables
    base = {k: v for k, v in env.items() if k not in ("CARME_SESSION_SECRET", "SLURM_EXPORT_ENV")}
    app_env = {**(rendezvous or {}), **rendered.env, **datasets.session_env(home, config.datasets)}
    proc_env = runtime.environment(app_env, base)
    if any(secret in v for v in (*argv, *proc_env.values())):
        raise LaunchError(ExitCode.CONFIG, "the session secret would reach the app; refusing to start")
    return LaunchPlan(
        job_id=job_id,
        app=app,
        host=host,
        port=port,
        argv=argv,
        env=proc_env,
        workdir=workdir,
        readiness_path=rendered.readiness_path,
        probe_headers=app.proxy_headers(app_key),
        secret=secret,
        app_secret=app_key,
        public_host=public_host or host,
        app_socket=app_socket,
    )


def _job_and_secret(env: Mapping[str, str]) -> tuple[int, str]:
    """The job id and the session secret S, or :class:`LaunchError` when either is missing."""
    job_id_s = env.get("SLURM_JOB_ID", "")
    if not job_id_s.isdigit():
        raise LaunchError(ExitCode.NOT_IN_JOB, "SLURM_JOB_ID missing: carme-launch runs inside a Slurm job")
    secret = env.get("CARME_SESSION_SECRET", "")
    if len(secret) < MIN_SECRET_LENGTH:
        raise LaunchError(
            ExitCode.SECRET_MISSING,
            f"CARME_SESSION_SECRET missing or shorter than {MIN_SECRET_LENGTH} characters; refusing to start",
        )
    return int(job_id_s), secret


def _requested_app(env: Mapping[str, str], apps: Mapping[str, AppSpec]) -> AppSpec:
    app_name = env.get("CARME_APP", "")
    if app_name not in apps:
        raise LaunchError(ExitCode.CONFIG, f"unknown app {app_name!r}; known: {', '.join(sorted(apps))}")
    return apps[app_name]


def _app_socket(app: AppSpec, socket_dir: str) -> str:
    """The Unix socket of a ``netns`` or ``socket`` app in ``socket_dir``; "" for an app on a TCP port."""
    if app.isolation not in ("netns", "socket"):
        return ""
    if not socket_dir:
        raise LaunchError(
            ExitCode.NETNS_UNAVAILABLE, f"{app.name} needs a socket directory (isolation = {app.isolation})"
        )
    return os.path.join(socket_dir, SOCKET_NAME)


def _render(
    app: AppSpec, env: Mapping[str, str], *, host: str, port: int, app_key: str, job_id: int, workdir: str, sock: str
) -> RenderedApp:
    """The app spec rendered with the app secret ``app_key``; the Unix socket ``sock`` goes to a socket app only."""
    try:
        return app.render(
            host=host,
            port=port,
            secret=app_key,
            job_id=job_id,
            workdir=workdir,
            logdir=env.get("CARME_LOGDIR"),
            socket=sock if app.isolation == "socket" else "",
        )
    except AppRenderError as exc:
        raise LaunchError(ExitCode.CONFIG, str(exc)) from exc


def _in_namespace(argv: list[str], socket_path: str, port: int, unshare: str) -> list[str]:
    """``argv`` behind the bridge that starts it in a private network namespace, as this user (:mod:`.netns`)."""
    uid, gid = os.getuid(), os.getgid()
    return namespace_argv(
        argv, socket_path=socket_path, port=port, uid=uid, gid=gid, unshare=unshare, python=sys.executable
    )


def _in_runtime(
    rendered: RenderedApp,
    env: Mapping[str, str],
    config: RuntimeConfig,
    *,
    home: str,
    scratch: str | None,
    workdir: str,
    bind: str,
) -> tuple[Runtime, list[str]]:
    """The session's runtime, and the rendered argv wrapped in it (``bind``: a socket directory to bind, or "")."""
    image = env.get("CARME_IMAGE", "")
    runtime = make_runtime(env.get("CARME_RUNTIME") or config.runtime, image, config, home, bind, env.get("USER", ""))
    binds: list[Bind] = default_binds(home, scratch, config.all_dataset_dirs())
    if bind:
        binds.append(Bind(bind, bind))
    gpus = len([g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()])
    try:
        argv = runtime.wrap(rendered.argv, image=image, binds=binds, gpus=gpus, env=rendered.env, workdir=workdir)
    except (BindNotAllowed, ValueError) as exc:
        raise LaunchError(ExitCode.CONFIG, str(exc)) from exc
    return runtime, argv


def _user_name() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name
