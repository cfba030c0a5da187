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

import contextlib
import http.client
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Protocol

from carme_runtime import datasets
from carme_runtime.apps import MIN_SECRET_LENGTH
from carme_runtime.apps import AppRenderError
from carme_runtime.exit_codes import ExitCode
from carme_runtime.front import Front
from carme_runtime.front import app_secret
from carme_runtime.front import bind_front_socket
from carme_runtime.front import verify_endpoint
from carme_runtime.images import ImageError
from carme_runtime.images import verify_image
from carme_runtime.netns import SOCKET_NAME
from carme_runtime.netns import check_userns
from carme_runtime.netns import namespace_argv
from carme_runtime.rendezvous import rendezvous_env
from carme_runtime.runtimes import AllowedBind
from carme_runtime.runtimes import ApptainerRuntime
from carme_runtime.runtimes import Bind
from carme_runtime.runtimes import BindNotAllowed
from carme_runtime.runtimes import CharliecloudRuntime
from carme_runtime.runtimes import NoneRuntime
from carme_runtime.runtimes import default_allow_list
from carme_runtime.runtimes import default_binds
from carme_runtime.slurm_formats import format_comment

if TYPE_CHECKING:
    from carme_runtime.apps import AppSpec
    from carme_runtime.command_runner import Runner
    from carme_runtime.config import RuntimeConfig
    from carme_runtime.runtimes import Runtime


class LaunchError(RuntimeError):
    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Process(Protocol):
    """What the launcher needs of a child process (``subprocess.Popen`` satisfies it)."""

    pid: int

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


Spawn = Callable[[list[str], dict[str, str], str], Process]
#: where the app listens; only the front (on the node's address) is reachable from the portal
APP_HOST = "127.0.0.1"
Probe = Callable[[str, int, str, Mapping[str, str], float], "int | None"]


def popen_spawn(argv: list[str], env: dict[str, str], cwd: str) -> Process:
    return subprocess.Popen(argv, env=env, cwd=cwd)


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the Unix socket of an ``isolation = "netns"`` app."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def probe_http(host: str, port: int, path: str, headers: Mapping[str, str], timeout: float) -> int | None:
    """One HTTP GET; the status code, or ``None`` when nothing answers. Redirects are not followed.

    A ``host`` starting with ``/`` is a Unix socket path (``port`` is then ignored).
    """
    conn = (
        UnixHTTPConnection(host, timeout)
        if host.startswith("/")
        else http.client.HTTPConnection(host, port, timeout=timeout)
    )
    try:
        conn.request("GET", path, headers=dict(headers))
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def is_ready_status(status: int | None) -> bool:
    return status is not None and 200 <= status < 400


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


def connection_info(
    app: AppSpec, job_id: int, host: str, port: int, app_key: str, app_port: int | None = None, app_socket: str = ""
) -> dict[str, object]:
    """What the connection file holds: where the session is, and the app secret ``app_key`` (the user's token or
    code-server password); never the session secret, from which the front key is derived."""
    return {
        "app_socket": app_socket,
        "isolation": app.isolation,
        "job_id": job_id,
        "app": app.name,
        "host": host,
        "port": port,
        # a socket app has no TCP port at all
        "app_port": None if app.isolation == "socket" else (app_port if app_port is not None else port),
        "base_url": app.base_url(job_id),
        "app_secret": app_key,
        "secret_mode": app.secret_mode,
    }


def write_connection_file(home: str, job_id: int, info: Mapping[str, object]) -> str:
    """Write ``<home>/.carme/sessions/<jobid>.json`` with mode 0600, directories 0700; return the path.

    Written to a temporary file then renamed, with ``O_NOFOLLOW``/``O_EXCL`` so a planted symlink cannot
    redirect it; modes are set explicitly (the umask does not matter).
    """
    base = os.path.join(home, ".carme")
    sessions = os.path.join(base, "sessions")
    for directory in (base, sessions):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.lstat(directory)
        import stat

        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise LaunchError(ExitCode.ERROR, f"{directory} is not a real directory")
        os.chmod(directory, 0o700)
    path = os.path.join(sessions, f"{job_id}.json")
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (json.dumps(dict(info), indent=2, sort_keys=True) + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def published_comment(app: AppSpec, host: str, port: int, state: str, reason: str = "") -> str:
    if reason:
        return format_comment(app=app.name, host=host, port=port, state=state, reason=reason)
    return format_comment(app=app.name, host=host, port=port, state=state)


def publish_argv(job_id: int, comment: str) -> list[str]:
    """The job comment the portal reads, and requeue off: a session on a lost node ends (NODE_FAIL) rather than
    start again later, elsewhere, behind its user's back. The submission asks for that too (``requeue: false``,
    ``--no-requeue``), but slurmrestd 22.05 ignores the key (measured on the demo: Requeue=1 whatever its value);
    a job's owner may set it on the running job, in the same call."""
    return ["scontrol", "update", f"JobId={job_id}", "Requeue=0", f"Comment={comment}"]


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
            return CharliecloudRuntime(allowed, home=home, user=user or _user_name())
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
    job_id_s = env.get("SLURM_JOB_ID", "")
    if not job_id_s.isdigit():
        raise LaunchError(ExitCode.NOT_IN_JOB, "SLURM_JOB_ID missing: carme-launch runs inside a Slurm job")
    job_id = int(job_id_s)
    secret = env.get("CARME_SESSION_SECRET", "")
    if len(secret) < MIN_SECRET_LENGTH:
        raise LaunchError(
            ExitCode.SECRET_MISSING,
            f"CARME_SESSION_SECRET missing or shorter than {MIN_SECRET_LENGTH} characters; refusing to start",
        )
    app_name = env.get("CARME_APP", "")
    if app_name not in apps:
        raise LaunchError(ExitCode.CONFIG, f"unknown app {app_name!r}; known: {', '.join(sorted(apps))}")
    app = apps[app_name]
    workdir = env.get("CARME_WORKDIR") or home
    app_socket = ""
    if app.isolation in ("netns", "socket"):
        if not socket_dir:
            raise LaunchError(
                ExitCode.NETNS_UNAVAILABLE, f"{app.name} needs a socket directory (isolation = {app.isolation})"
            )
        app_socket = os.path.join(socket_dir, SOCKET_NAME)
    app_key = app_secret(secret, job_id)  # the app never sees the session secret itself
    try:
        rendered = app.render(
            host=host,
            port=port,
            secret=app_key,
            job_id=job_id,
            workdir=workdir,
            logdir=env.get("CARME_LOGDIR"),
            socket=app_socket if app.isolation == "socket" else "",
        )
    except AppRenderError as exc:
        raise LaunchError(ExitCode.CONFIG, str(exc)) from exc
    runtime_name = env.get("CARME_RUNTIME") or config.runtime
    image = env.get("CARME_IMAGE", "")
    socket_bind = socket_dir if app.isolation == "socket" else ""  # the app listens there, inside a container too
    runtime = make_runtime(runtime_name, image, config, home, socket_bind, env.get("USER", ""))
    binds: list[Bind] = default_binds(home, scratch, config.all_dataset_dirs())
    if socket_bind:
        binds.append(Bind(socket_bind, socket_bind))
    gpus = len([g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()])
    try:
        if isinstance(runtime, CharliecloudRuntime):  # the working directory is set inside the container
            argv = runtime.wrap(rendered.argv, image=image, binds=binds, gpus=gpus, env=rendered.env, workdir=workdir)
        else:
            argv = runtime.wrap(rendered.argv, image=image, binds=binds, gpus=gpus, env=rendered.env)
    except (BindNotAllowed, ValueError) as exc:
        raise LaunchError(ExitCode.CONFIG, str(exc)) from exc
    if app.isolation == "netns":
        argv = namespace_argv(
            argv,
            socket_path=app_socket,
            port=port,
            uid=os.getuid(),
            gid=os.getgid(),
            unshare=unshare,
            python=sys.executable,
        )
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


def _user_name() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _exit_code(rc: int) -> int:
    return 128 - rc if rc < 0 else rc  # killed by signal N -> 128+N, like a shell


def run_launch(
    plan: LaunchPlan,
    *,
    home: str,
    runner: Runner,
    spawn: Spawn = popen_spawn,
    probe: Probe = probe_http,
    ready_timeout: float = 300.0,
    interval: float = 0.5,
    install_signals: bool = True,
    log: Callable[[str], None] | None = None,
) -> int:
    """Start the front and the app, write the connection file, wait for readiness, publish, wait for the app."""
    say = log or (lambda msg: print(f"carme-launch: {msg}", file=sys.stderr, flush=True))
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
    try:
        return _run_app(
            plan,
            front,
            public,
            home=home,
            runner=runner,
            spawn=spawn,
            probe=probe,
            ready_timeout=ready_timeout,
            interval=interval,
            install_signals=install_signals,
            say=say,
        )
    finally:
        front.stop()


def _run_app(
    plan: LaunchPlan,
    front: Front,
    public: str,
    *,
    home: str,
    runner: Runner,
    spawn: Spawn,
    probe: Probe,
    ready_timeout: float,
    interval: float,
    install_signals: bool,
    say: Callable[[str], None],
) -> int:
    info = connection_info(
        plan.app, plan.job_id, public, front.port, plan.app_secret, app_port=plan.port, app_socket=plan.app_socket
    )
    path = write_connection_file(home, plan.job_id, info)
    say(f"connection details in {path}")
    try:
        child = spawn(plan.argv, plan.env, plan.workdir)
    except OSError as exc:
        say(f"cannot start {plan.argv[0]}: {exc}")
        runner(publish_argv(plan.job_id, published_comment(plan.app, public, front.port, "failed")))
        return ExitCode.APP_START_FAILED
    previous: dict[int, object] = {}
    if install_signals:

        def forward(signum: int, _frame: object) -> None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

        for forwarded in (signal.SIGTERM, signal.SIGINT):
            previous[forwarded] = signal.signal(forwarded, forward)
    try:
        deadline = time.monotonic() + ready_timeout
        ready = False
        while time.monotonic() < deadline:
            if child.poll() is not None:
                break
            upstream = plan.app_socket or plan.host
            if is_ready_status(probe(upstream, plan.port, plan.readiness_path, plan.probe_headers, 5.0)):
                ready = verify_endpoint(public, front.port, plan.job_id, plan.secret, 5.0)
                if not ready:
                    say(f"the session front on {public}:{front.port} does not answer its challenge")
                break
            time.sleep(interval)
        if not ready:
            rc = child.poll()
            reason = "exited" if rc is not None else f"not ready after {ready_timeout:g} s"
            say(f"{plan.app.name} {reason}")
            runner(publish_argv(plan.job_id, published_comment(plan.app, public, front.port, "failed")))
            if rc is None:
                child.send_signal(signal.SIGTERM)
                try:
                    rc = child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
                return ExitCode.APP_NOT_READY
            return _exit_code(rc) or ExitCode.APP_START_FAILED
        prc, _out, err = runner(publish_argv(plan.job_id, published_comment(plan.app, public, front.port, "ready")))
        if prc != 0:
            say(f"could not publish the session in the job comment: {err.strip()[:200]}")
        where = {"netns": f"{plan.app_socket} (own network namespace)", "socket": plan.app_socket}.get(
            plan.app.isolation, f"{plan.host}:{plan.port}"
        )
        say(f"{plan.app.name} ready on {where}, behind the front on {public}:{front.port}")
        return _exit_code(child.wait())
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, handler)  # type: ignore[arg-type]


def launch_from_env(
    env: Mapping[str, str],
    *,
    runner: Runner,
    config: RuntimeConfig,
    apps: Mapping[str, AppSpec],
    home: str | None = None,
    spawn: Spawn = popen_spawn,
    probe: Probe = probe_http,
    install_signals: bool = True,
    log: Callable[[str], None] | None = None,
) -> int:
    say = log or (lambda msg: print(f"carme-launch: {msg}", file=sys.stderr, flush=True))
    home = home or env.get("HOME") or os.path.expanduser("~")
    socket_dir = ""
    try:
        host = node_address(config.bind_address)
        port = pick_free_port(APP_HOST)
        job_id_s = env.get("SLURM_JOB_ID", "")
        scratch = os.path.join(config.scratch_root, job_id_s) if job_id_s.isdigit() else None
        if scratch and not os.path.isdir(scratch):
            scratch = None
        wanted = apps.get(env.get("CARME_APP", ""))
        if wanted is not None and job_id_s.isdigit():
            env = check_image(wanted, env, config, host, int(job_id_s), runner)
        unshare = "unshare"
        if wanted is not None and wanted.isolation == "netns" and job_id_s.isdigit():
            unshare = prepare_netns(wanted, env, host, int(job_id_s), runner)
        if wanted is not None and wanted.isolation in ("netns", "socket") and job_id_s.isdigit():
            where = env
            if (env.get("CARME_RUNTIME") or config.runtime) == "charliecloud":
                # ch-run shares the host's /tmp at /tmp (and $TMPDIR there too): the socket must be in /tmp
                # to have the same path inside the container and outside
                where = {k: v for k, v in env.items() if k != "TMPDIR"}
            socket_dir = make_socket_dir(where, int(job_id_s))
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
    except LaunchError as exc:
        say(str(exc))
        _remove_socket_dir(socket_dir)
        return exc.code
    except OSError as exc:
        say(f"cannot prepare the session: {exc}")
        _remove_socket_dir(socket_dir)
        return ExitCode.ERROR
    if host.startswith("127.") and not config.bind_address:
        say(f"warning: the hostname resolves to {host}; set bind_address so the portal can reach the app")
    for note in datasets.link_datasets(home, config.datasets):
        say(f"datasets: {note}")
    try:
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
        _remove_socket_dir(socket_dir)


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
