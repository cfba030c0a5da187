# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme-launch``: runs inside the session job and starts the app.

1. reads the job environment set by :mod:`carme_runtime.sessions` (``SLURM_JOB_ID``, ``CARME_APP``,
   ``CARME_IMAGE``, ``CARME_RUNTIME``, ``CARME_WORKDIR``, ``CARME_SESSION_SECRET``) and refuses to start
   without a secret of at least 24 characters;
2. starts the session front (:mod:`carme_runtime.front`) on the node's address (``bind_address`` in the
   config; default: the address of the node's hostname) at a random port of :data:`front.PORT_RANGE`, and
   picks a free port on ``127.0.0.1`` for the app: the app itself is never on the node's address; only the
   front is, and it forwards nothing without the session's front key;
3. renders the app spec with the session's *app secret* (:func:`carme_runtime.front.app_secret`, an HMAC of the
   job id with the session secret S) and wraps it in the runtime (Apptainer or a venv/conda prefix); starts it
   with :class:`subprocess.Popen` (argv, no shell). The app secret reaches the app only through its own variable
   (``JUPYTER_TOKEN``, ``PASSWORD``); S itself never reaches the app: ``CARME_SESSION_SECRET`` is removed from
   its environment, and a plan whose argv or environment holds S is refused. The front key and the challenge
   answer are derived from S in other domains, so the app secret (which JupyterLab writes into its pages) lets no
   one compute them; the front adds the app's secret header itself (``app_headers``);
4. writes ``~/.carme/sessions/<jobid>.json`` (host, port, app_port, app_secret, app, base_url; never S) with
   mode 0600 in a 0700 directory, so only the user (and root) can read it;
   Apps with ``isolation = "socket"`` (JupyterLab, code-server) listen on a Unix socket in a fresh 0700
   directory of the user and on no TCP port: no other user on the node can connect to them. Apps with
   ``isolation = "netns"`` (TensorBoard: no authentication of its own, no Unix socket) start in a private network
   namespace of the user (:mod:`carme_runtime.netns`): their ``127.0.0.1:<port>`` exists only there, and the
   front reaches them through a Unix socket in such a directory. Without working user namespaces such an
   app is refused (:attr:`ExitCode.NETNS_UNAVAILABLE`), never started on the node's loopback;
5. probes the app's readiness on ``127.0.0.1`` (or through that Unix socket) with the app secret until ready or
   timeout, then checks that its own front answers the portal's challenge;
6. publishes the front with ``scontrol update JobId=<id> Comment=carme:v1;app=..;host=..;port=..;
   state=ready``. The secret is never published: the comment is visible to every user via ``squeue``. The
   comment is only a hint (the user can edit it): the portal proxies to it only after the endpoint proved
   it knows the session secret (:func:`carme_runtime.front.verify_endpoint`);
7. forwards SIGTERM/SIGINT to the app and returns the app's exit code.

The app's environment also holds the session's rendezvous variables (``MASTER_ADDR`` = this node's address,
``MASTER_PORT`` = a free port on it, ``NNODES``/``WORLD_SIZE``; :mod:`carme_runtime.rendezvous`), for work the
user starts on the job's nodes with ``srun`` (multi-node sessions).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING

from carme_runtime import datasets
from carme_runtime.command_runner import spawn as spawn_child
from carme_runtime.exit_codes import ExitCode
from carme_runtime.images import ImageError
from carme_runtime.images import verify_image
from carme_runtime.launch_plan import LaunchError
from carme_runtime.launch_plan import LaunchPlan
from carme_runtime.launch_plan import plan_launch
from carme_runtime.launch_run import Probe
from carme_runtime.launch_run import Spawn
from carme_runtime.launch_run import run_launch
from carme_runtime.launch_run import say_on_stderr
from carme_runtime.netns import check_userns
from carme_runtime.probe import is_ready_status as is_ready_status  # re-exported: the portal and benches use it
from carme_runtime.probe import probe_http as probe_http  # re-exported: the portal and benches use it
from carme_runtime.publish import publish_argv
from carme_runtime.publish import published_comment
from carme_runtime.rendezvous import rendezvous_env

if TYPE_CHECKING:
    from carme_runtime.apps import AppSpec
    from carme_runtime.command_runner import Runner
    from carme_runtime.config import RuntimeConfig

#: where the app listens; only the front (on the node's address) is reachable from the portal
APP_HOST = "127.0.0.1"


def node_address(configured: str) -> str:
    """``bind_address`` from the config, or the address the node's hostname resolves to.

    Debian maps the hostname to 127.0.1.1 in /etc/hosts by default; sites must then set ``bind_address``
    (the portal proxy cannot reach a loopback address).
    """
    if configured:
        return configured
    return socket.gethostbyname(socket.gethostname())


def pick_free_port(host: str) -> int:
    """Ask the kernel for a free port on ``host`` (the app binds it right after; a race is unlikely)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def launch_from_env(
    env: Mapping[str, str],
    *,
    runner: Runner,
    config: RuntimeConfig,
    apps: Mapping[str, AppSpec],
    home: str | None = None,
    spawn: Spawn = spawn_child,
    probe: Probe = probe_http,
    install_signals: bool = True,
    log: Callable[[str], None] | None = None,
) -> int:
    """Prepare the session from the job environment (:func:`prepare_launch`), then run it (:func:`run_launch`);
    the socket directory it made is removed however the launch ends."""
    say = log or say_on_stderr
    home = home or env.get("HOME") or os.path.expanduser("~")
    made: list[str] = []
    try:
        try:
            host, plan = prepare_launch(env, apps, config, home=home, runner=runner, made=made)
        except LaunchError as exc:
            say(str(exc))
            return exc.code
        except OSError as exc:
            say(f"cannot prepare the session: {exc}")
            return ExitCode.ERROR
        if host.startswith("127.") and not config.bind_address:
            say(f"warning: the hostname resolves to {host}; set bind_address so the portal can reach the app")
        for note in datasets.link_datasets(home, config.datasets):
            say(f"datasets: {note}")
        return run_launch(
            plan,
            home=home,
            runner=runner,
            spawn=spawn,
            probe=probe,
            ready_timeout=float(config.ready_timeout_s),
            install_signals=install_signals,
            log=say,
        )
    finally:
        for path in made:
            _remove_socket_dir(path)


def prepare_launch(
    env: Mapping[str, str],
    apps: Mapping[str, AppSpec],
    config: RuntimeConfig,
    *,
    home: str,
    runner: Runner,
    made: list[str],
) -> tuple[str, LaunchPlan]:
    """The node's address and the plan. The image and the user namespaces are checked first (each publishes
    ``state=failed`` when it fails); a socket directory made for the app is appended to ``made``."""
    host = node_address(config.bind_address)
    port = pick_free_port(APP_HOST)
    job_id_s = env.get("SLURM_JOB_ID", "")
    scratch = os.path.join(config.scratch_root, job_id_s) if job_id_s.isdigit() else None
    if scratch and not os.path.isdir(scratch):
        scratch = None
    wanted = apps.get(env.get("CARME_APP", ""))
    unshare = "unshare"
    socket_dir = ""
    if wanted is not None and job_id_s.isdigit():
        env = check_image(wanted, env, config, host, int(job_id_s), runner)
        if wanted.isolation == "netns":
            unshare = prepare_netns(wanted, env, host, int(job_id_s), runner)
        if wanted.isolation in ("netns", "socket"):
            where = env
            if (env.get("CARME_RUNTIME") or config.runtime) == "charliecloud":
                # ch-run shares the host's /tmp at /tmp (and $TMPDIR there too): the socket must be in /tmp
                # to have the same path inside the container and outside
                where = {k: v for k, v in env.items() if k != "TMPDIR"}
            socket_dir = make_socket_dir(where, int(job_id_s))
            made.append(socket_dir)
    plan = plan_launch(
        env,
        apps,
        config,
        home=home,
        host=APP_HOST,
        port=port,
        scratch=scratch,
        public_host=host,
        socket_dir=socket_dir,
        unshare=unshare,
        rendezvous=rendezvous_env(env, host, pick_free_port(host)),
    )
    return host, plan


#: longest Unix socket path (``sun_path`` is 108 bytes with its NUL)
MAX_SOCKET_PATH = 107


def make_socket_dir(env: Mapping[str, str], job_id: int) -> str:
    """A fresh directory (mode 0700, random name, so no other user can pre-create or enter it) for the app's
    Unix socket: in ``$TMPDIR`` when the socket path fits there, else in ``/tmp``."""
    for parent in (env.get("TMPDIR", ""), "/tmp"):
        if parent and os.path.isdir(parent) and len(parent) + 40 <= MAX_SOCKET_PATH:
            return tempfile.mkdtemp(prefix=f"carme-{job_id}-", dir=parent)
    raise LaunchError(ExitCode.ERROR, "no directory for the app's Unix socket ($TMPDIR and /tmp unusable)")


def _remove_socket_dir(path: str) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


#: runtimes whose image is a container image the catalogue records with its digest
CONTAINER_RUNTIMES = ("apptainer", "charliecloud")


def check_image(
    app: AppSpec, env: Mapping[str, str], config: RuntimeConfig, public: str, job_id: int, runner: Runner
) -> Mapping[str, str]:
    """For a container runtime: verify ``CARME_IMAGE`` (``PATH@sha256:HEX``) before anything starts; return the
    environment with ``CARME_IMAGE`` set to the checked path.

    A missing or altered image publishes ``state=failed;reason=image`` and raises :class:`LaunchError`
    (``IMAGE_INVALID``): the session fails within seconds with the reason, the node is not drained.
    """
    if (env.get("CARME_RUNTIME") or config.runtime) not in CONTAINER_RUNTIMES:
        return env
    reference = env.get("CARME_IMAGE", "")
    if not reference.startswith("/"):
        return env  # a registry reference (docker://, library://): the runtime fetches and checks it
    try:
        path = verify_image(reference)
    except ImageError as exc:
        runner(publish_argv(job_id, published_comment(app, public, 0, "failed", reason="image")))
        raise LaunchError(ExitCode.IMAGE_INVALID, str(exc)) from exc
    return {**env, "CARME_IMAGE": path}


def prepare_netns(app: AppSpec, env: Mapping[str, str], public: str, job_id: int, runner: Runner) -> str:
    """The ``unshare`` to use for an ``isolation = "netns"`` app, after checking that it can make the namespaces.

    Raises :class:`LaunchError` (``NETNS_UNAVAILABLE``) and publishes ``state=failed`` otherwise: such an app
    is never started on the node's loopback instead.
    """
    found = shutil.which("unshare", path=env.get("PATH", "/usr/bin:/bin"))
    problem = "unshare (util-linux) not found in PATH" if found is None else check_userns(found, dict(env))
    if found is None or problem is not None:
        runner(publish_argv(job_id, published_comment(app, public, 0, "failed")))
        raise LaunchError(
            ExitCode.NETNS_UNAVAILABLE,
            f"{app.name} runs only in a private network namespace (isolation = netns), and this node cannot make "
            f"one as this user: {problem}. Unprivileged user namespaces must be enabled "
            "(user.max_user_namespaces > 0; kernel.unprivileged_userns_clone = 1 where it exists).",
        )
    return found


def main_argv_env(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Entry used by ``carme-launch`` (no options besides ``--help``: everything comes from the job env)."""
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return ExitCode.OK
    if argv:
        print("carme-launch takes no arguments; it reads the job environment", file=sys.stderr)
        return ExitCode.USAGE
    from carme_runtime.apps import AppSpecError
    from carme_runtime.apps import load_apps
    from carme_runtime.command_runner import SubprocessRunner
    from carme_runtime.config import ConfigError
    from carme_runtime.config import RuntimeConfig

    try:
        config = RuntimeConfig.load(env)
        apps = load_apps(config.apps_dirs)
    except (ConfigError, AppSpecError) as exc:
        print(f"carme-launch: {exc}", file=sys.stderr)
        return ExitCode.CONFIG
    return launch_from_env(login_environment(env), runner=SubprocessRunner(), config=config, apps=apps)


#: login shells that are no shell: a terminal in the app falls back to ``sh`` rather than to these
NO_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false", "/usr/bin/false")


def login_environment(env: Mapping[str, str], entry: pwd.struct_passwd | None = None) -> dict[str, str]:
    """The job environment with the user's login variables where the submission left them out.

    A session submitted through slurmrestd carries only what the portal sent (``PATH`` and ``CARME_*``), so the app
    and the terminals it opens would have no ``HOME`` (``~`` unexpanded) and run ``sh``. ``HOME``, ``USER``,
    ``LOGNAME`` and ``SHELL`` come from the user's passwd entry (LDAP through SSSD), ``LANG`` defaults to
    ``C.UTF-8``; what the job already has is kept.
    """
    out = dict(env)
    try:
        entry = entry or pwd.getpwuid(os.getuid())
    except KeyError:
        return out
    login = {"HOME": entry.pw_dir, "USER": entry.pw_name, "LOGNAME": entry.pw_name}
    if entry.pw_shell and entry.pw_shell not in NO_SHELLS:
        login["SHELL"] = entry.pw_shell
    if not (out.get("LANG") or out.get("LC_ALL")):
        login["LANG"] = "C.UTF-8"
    for key, value in login.items():
        if value and not out.get(key):
            out[key] = value
    return out
