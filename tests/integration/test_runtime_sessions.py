# SPDX-License-Identifier: GPL-3.0-or-later
"""Interactive sessions and Slurm hooks of carme_runtime on a real Slurm (``host_slurm``), issue 5's acceptance.

* A JupyterLab session with one GPU is submitted with the runtime's sbatch argv and environment
  (:func:`tests.runtime.sbatch_submit.submit_with_sbatch`, run as alice), ``carme-launch`` starts a real JupyterLab
  from the ``none`` runtime's venv (``/opt/carme-test-envs/jupyter``), publishes ``carme:v1;...;state=ready``
  in the job comment, answers HTTP only with its front key (the front adds Jupyter's token, the app secret; the
  session secret itself reaches neither the app nor the connection file) and sees exactly one GPU.
* bob cannot read alice's connection details.
* The node's Prolog/Epilog are the carme hooks (fixture shims): a malformed hook environment logs one clear
  line and the node is not drained; the job still runs.

Everything talks to 127.0.0.1 (the node's hostname resolves there on this host). Waits are bounded; nothing
asserts a duration. ``CARME_TEST_TIMINGS`` (a file path) collects measured durations for reports.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import stat
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from carme_runtime.apps import AppSpec
from carme_runtime.apps import load_apps
from carme_runtime.front import app_secret
from carme_runtime.front import front_headers
from carme_runtime.sessions import REST_SUBMIT_PATH
from carme_runtime.sessions import SessionRequest
from carme_runtime.sessions import build_rest_payload
from carme_runtime.slurm_formats import ENDED_STATES
from carme_runtime.slurm_formats import parse_comment
from tests.fixtures.carmeenvs import ensure_jupyter_env
from tests.fixtures.carmeenvs import ensure_runtime_env
from tests.fixtures.carmeenvs import launch_on_path
from tests.fixtures.hostslurm import HostSlurm
from tests.runtime.sbatch_submit import submit_with_sbatch

pytestmark = [pytest.mark.host, pytest.mark.slow]

READY_TIMEOUT_S = 300.0


def record_timing(name: str, seconds: float) -> None:
    path = os.environ.get("CARME_TEST_TIMINGS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"name": name, "seconds": round(seconds, 3)}) + "\n")


class UserRunner:
    """A :class:`carme_runtime.command_runner.Runner` that runs argv as ``user`` (runuser) against the test cluster.

    The environment is the one the package gives (the job environment for sbatch) plus ``SLURM_CONF``;
    ``--export`` lists names only, so nothing else of this process reaches the job.
    """

    def __init__(self, cluster: HostSlurm, user: str) -> None:
        self.cluster = cluster
        self.user = user
        self.calls: list[list[str]] = []

    def __call__(
        self, argv: Sequence[str], *, input_text: str | None = None, env: Mapping[str, str] | None = None
    ) -> tuple[int, str, str]:
        run_env = dict(env or {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        run_env["SLURM_CONF"] = str(self.cluster.slurm_conf)
        self.calls.append(list(argv))
        proc = subprocess.run(
            ["/usr/sbin/runuser", "-u", self.user, "--", *argv],
            input=input_text,
            env=run_env,
            cwd=self.cluster.user_dir(self.user),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr


def job_fields(cluster: HostSlurm, job_id: int) -> dict[str, str]:
    """``scontrol show job -o`` as a dict (values without spaces, which is all this test reads)."""
    out = cluster.run(["scontrol", "show", "job", "-o", str(job_id)], check=False).stdout
    fields: dict[str, str] = {}
    for token in out.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def http_status(url: str, headers: Mapping[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def wait_ready(cluster: HostSlurm, job_id: int, output: Path) -> dict[str, str]:
    """Wait (bounded) until the launcher publishes ``state=ready`` in the job comment; returns the parsed comment."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    fields: dict[str, str] = {}
    parsed: dict[str, str] | None = None
    while time.monotonic() < deadline:
        fields = job_fields(cluster, job_id)
        parsed = parse_comment(fields.get("Comment", ""))
        if parsed and parsed.get("state") in ("ready", "failed"):
            break
        if fields.get("JobState") in ENDED_STATES:
            break
        time.sleep(0.5)
    log = output.read_text(errors="replace") if output.exists() else "(no output file)"
    assert parsed is not None and parsed.get("state") == "ready", (
        f"job {job_id} not ready: {fields}\n{log}\n{cluster.log_tail('slurmd')}"
    )
    return parsed


@dataclass
class Session:
    job_id: int
    user: str
    app: AppSpec
    secret: str
    host: str
    port: int
    comment: dict[str, str]
    ready_s: float
    output: Path

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}{self.app.base_url(self.job_id)}"


@pytest.fixture(scope="module")
def jupyter_env(host_slurm: HostSlurm) -> Iterator[Path]:
    env = ensure_jupyter_env()
    runtime = ensure_runtime_env()
    with launch_on_path(runtime):
        yield env


@pytest.fixture(scope="module")
def jupyter_session(host_slurm: HostSlurm, jupyter_env: Path) -> Iterator[Session]:
    """alice's JupyterLab session with 1 GPU, submitted with the package's sbatch path; cancelled at the end."""
    user = "alice"
    app = load_apps([])["jupyterlab"]
    workdir = host_slurm.user_dir(user)
    request = SessionRequest(
        user=user,
        app=app.name,
        image=str(jupyter_env),
        gpus=1,
        cpus=1,
        mem_mb=1000,
        time_minutes=15,
        workdir=str(workdir),
    )
    secret = secrets.token_urlsafe(32)
    runner = UserRunner(host_slurm, user)
    t0 = time.monotonic()
    job_id = submit_with_sbatch(request, app, "none", secret, runner)
    output = workdir / f"carme-{app.name}-{job_id}.out"
    try:
        parsed = wait_ready(host_slurm, job_id, output)
        ready_s = time.monotonic() - t0
        record_timing("session_submit_to_ready", ready_s)
        yield Session(
            job_id=job_id,
            user=user,
            app=app,
            secret=secret,
            host=parsed["host"],
            port=int(parsed["port"]),
            comment=parsed,
            ready_s=ready_s,
            output=output,
        )
    finally:
        host_slurm.run(["scancel", str(job_id)], check=False)
        host_slurm.wait_job(job_id, timeout=120)


def test_session_becomes_ready_and_publishes_where_it_listens(host_slurm: HostSlurm, jupyter_session: Session) -> None:
    s = jupyter_session
    assert s.comment["app"] == "jupyterlab"
    assert s.host == "127.0.0.1"  # this host's name resolves to 127.0.0.1 (the launcher warns about it)
    assert 1024 <= s.port <= 65535
    fields = job_fields(host_slurm, s.job_id)
    assert fields["JobState"] == "RUNNING", fields
    assert fields["UserId"].startswith("alice("), fields
    # the secret is in no world-readable place: not in the comment, not in the job's command lines
    assert s.secret not in fields.get("Comment", "")
    for pid in job_pids(host_slurm, s.job_id):
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            assert s.secret.encode() not in fh.read(), f"secret in argv of pid {pid}"


def test_session_answers_only_with_its_secret(jupyter_session: Session) -> None:
    s = jupyter_session
    url = s.base + "api/contents"
    key = front_headers(s.secret, s.job_id)  # the published port is the session front (carme_runtime.front)
    token = s.app.proxy_headers(app_secret(s.secret, s.job_id))  # Jupyter's token: the app secret
    assert http_status(url, key) == 200  # the key alone, as nginx sends it: the front adds Jupyter's token
    assert http_status(url, {"Authorization": "token forged"} | key) == 200  # replaced by the front's own
    assert http_status(url, token) == 403  # the token (which Jupyter writes into its pages) does not pass the front
    assert http_status(url, {"Authorization": f"token {s.secret}"}) == 403
    assert http_status(url) == 403
    assert http_status(url, {"Authorization": "token " + secrets.token_urlsafe(32)}) == 403


def job_pids(cluster: HostSlurm, job_id: int) -> list[int]:
    out = cluster.run(["scontrol", "listpids", str(job_id)], check=False).stdout
    pids = []
    for line in out.splitlines()[1:]:
        first = line.split()[0] if line.split() else ""
        if first.isdigit() and Path(f"/proc/{first}").exists():
            pids.append(int(first))
    return pids


def process_environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        raw = fh.read().split(b"\0")
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw if b"=" in item)


def test_session_sees_exactly_one_gpu(host_slurm: HostSlurm, jupyter_session: Session) -> None:
    s = jupyter_session
    jupyter = []
    for pid in job_pids(host_slurm, s.job_id):
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
        if any(re.search(rb"jupyter", a) for a in argv[:2]):
            jupyter.append(pid)
    assert jupyter, f"no jupyter process among the job's pids: {job_pids(host_slurm, s.job_id)}"
    env = process_environ(jupyter[0])
    cvd = env.get("CUDA_VISIBLE_DEVICES", "")
    assert cvd != "" and len(cvd.split(",")) == 1, env.get("CUDA_VISIBLE_DEVICES")
    assert len(env.get("SLURM_JOB_GPUS", "").split(",")) == 1, env.get("SLURM_JOB_GPUS")
    assert "CARME_SESSION_SECRET" not in env  # the app gets only the app secret, as JUPYTER_TOKEN
    assert env.get("JUPYTER_TOKEN") == app_secret(s.secret, s.job_id) != s.secret
    assert not any(s.secret in v for v in env.values())
    assert env.get("VIRTUAL_ENV") == str(Path(env["PATH"].split(":")[0]).parent)


def test_connection_details_are_private_to_the_user(host_slurm: HostSlurm, jupyter_session: Session) -> None:
    s = jupyter_session
    path = host_slurm.home(s.user) / ".carme" / "sessions" / f"{s.job_id}.json"
    info = json.loads(path.read_text())
    assert info["app_secret"] == app_secret(s.secret, s.job_id) and info["port"] == s.port and info["host"] == s.host
    assert "secret" not in info and s.secret not in path.read_text()  # the session secret stays with the launcher
    st = path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == pwd.getpwnam(s.user).pw_uid
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
    # bob can enter alice's home (0755) but neither list nor read her session files
    for argv in (["cat", str(path)], ["ls", str(path.parent)], ["cat", str(path.parent.parent / "sessions")]):
        proc = host_slurm.run(argv, user="bob", check=False)
        assert proc.returncode != 0, argv
        assert "Permission denied" in proc.stderr, (argv, proc.stderr)
    # the owner can
    assert json.loads(host_slurm.run(["cat", str(path)], user=s.user).stdout)["job_id"] == s.job_id


def listening_tcp_inodes() -> set[str]:
    """Inodes of the TCP sockets in LISTEN state (0A) in this network namespace (the node's)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            for line in fh.readlines()[1:]:
                parts = line.split()
                if len(parts) > 9 and parts[3] == "0A":
                    inodes.add(parts[9])
    return inodes


def socket_inodes(pid: int) -> set[str]:
    found: set[str] = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[len("socket:[") : -1])
    return found


def test_jupyter_has_no_tcp_port_and_only_its_owner_reaches_its_socket(
    host_slurm: HostSlurm, jupyter_session: Session
) -> None:
    """isolation = "socket": another user on the node finds no port to connect to, and cannot open the socket."""
    s = jupyter_session
    info = json.loads((host_slurm.home(s.user) / ".carme" / "sessions" / f"{s.job_id}.json").read_text())
    assert info["isolation"] == "socket" and info["app_port"] is None, info
    sock = Path(info["app_socket"])
    assert stat.S_ISSOCK(sock.stat().st_mode)
    directory = sock.parent.stat()
    assert stat.S_IMODE(directory.st_mode) == 0o700 and directory.st_uid == pwd.getpwnam(s.user).pw_uid
    jupyter = [
        pid
        for pid in job_pids(host_slurm, s.job_id)
        if b"jupyter" in b" ".join(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2])
    ]
    assert jupyter, f"no jupyter process among the job's pids: {job_pids(host_slurm, s.job_id)}"
    listening = listening_tcp_inodes()
    for pid in jupyter:
        assert not socket_inodes(pid) & listening, f"jupyter (pid {pid}) listens on a TCP port"
    probe = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(sock)!r})"
    denied = host_slurm.run(["python3", "-c", probe], user="bob", check=False)
    assert denied.returncode != 0 and "PermissionError" in denied.stderr, denied.stderr
    assert host_slurm.run(["python3", "-c", probe], user=s.user, check=False).returncode == 0


def test_session_submitted_through_slurmrestd(host_slurm: HostSlurm, jupyter_env: Path) -> None:
    """The portal's path: ``build_rest_payload`` POSTed to slurmrestd v0.0.38 with bob's JWT."""
    user = "bob"
    app = load_apps([])["jupyterlab"]
    workdir = host_slurm.user_dir(user)
    request = SessionRequest(
        user=user, app=app.name, image=str(jupyter_env), gpus=1, mem_mb=1000, time_minutes=15, workdir=str(workdir)
    )
    request.validate()
    secret = secrets.token_urlsafe(32)
    payload = build_rest_payload(request, app, "none", secret)
    job = payload["job"]
    assert isinstance(job, dict) and isinstance(job["environment"], dict)
    # A real node reads /etc/slurm/slurm.conf; the test cluster's config lives elsewhere.
    job["environment"]["SLURM_CONF"] = str(host_slurm.slurm_conf)
    headers = host_slurm.rest_headers(user) | {"Content-Type": "application/json"}
    req = urllib.request.Request(
        host_slurm.restd_url + REST_SUBMIT_PATH, data=json.dumps(payload).encode(), headers=headers, method="POST"
    )
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=30) as response:
        answer = json.loads(response.read())
    assert answer.get("errors") == [], answer
    job_id = int(answer["job_id"])
    try:
        parsed = wait_ready(host_slurm, job_id, workdir / f"carme-{app.name}-{job_id}.out")
        record_timing("rest_session_submit_to_ready", time.monotonic() - t0)
        fields = job_fields(host_slurm, job_id)
        assert fields["UserId"].startswith(f"{user}("), fields
        assert fields["TresPerNode"] == "gres:gpu:1", fields
        base = f"http://{parsed['host']}:{parsed['port']}{app.base_url(job_id)}"
        assert http_status(base + "api/status", front_headers(secret, job_id)) == 200
        assert http_status(base + "api/status", app.proxy_headers(app_secret(secret, job_id))) == 403
    finally:
        host_slurm.run(["scancel", str(job_id)], check=False)
        host_slurm.wait_job(job_id, timeout=120)


# --- multi-node sessions (issue 15), on this one node ---------------------------------------------------------

MULTINODE = Path(__file__).resolve().parents[1] / "fixtures" / "multinode"


def jupyter_environ(cluster: HostSlurm, job_id: int) -> dict[str, str]:
    """The environment of the session's JupyterLab: what its terminals and notebook kernels inherit."""
    for pid in job_pids(cluster, job_id):
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
        if any(re.search(rb"jupyter", a) for a in argv[:2]):
            return process_environ(pid)
    raise AssertionError(f"no jupyter process among the job's pids: {job_pids(cluster, job_id)}")


def test_srun_with_pmix_and_the_rendezvous_from_the_sessions_environment(
    host_slurm: HostSlurm, jupyter_session: Session
) -> None:
    """From the app's environment, as a user's terminal has it: the rendezvous variables name this (first) node,
    ``srun --mpi=pmix`` starts an MPI program compiled with ``mpicc`` inside the session's allocation (MpiDefault
    pmix, PMIx loaded by slurmd), and the all-reduce check meets at ``MASTER_ADDR:MASTER_PORT``. One node here;
    the demo's e2e test (tests/e2e/test_multinode_e2e.py) does the same over two."""
    s = jupyter_session
    env = jupyter_environ(host_slurm, s.job_id)
    assert env.get("MASTER_ADDR") == s.host, env.get("MASTER_ADDR")
    assert 0 < int(env.get("MASTER_PORT", "0")) < 65536
    assert env.get("WORLD_SIZE") == env.get("NNODES") == "1"
    assert env.get("CARME_MASTER_NODE") == env.get("SLURM_JOB_NODELIST"), env
    assert "MpiDefault=pmix" in host_slurm.slurm_conf.read_text()

    workdir = host_slurm.user_dir(s.user) / "multinode"
    workdir.mkdir(exist_ok=True)
    for name in ("mpi_hello.c", "allreduce_check.py"):
        (workdir / name).write_bytes((MULTINODE / name).read_bytes())
    pw = pwd.getpwnam(s.user)
    for path in (workdir, *workdir.iterdir()):
        os.chown(path, pw.pw_uid, pw.pw_gid)
    user_env = {**env, "SLURM_CONF": str(host_slurm.slurm_conf)}

    def as_user(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/usr/sbin/runuser", "-u", s.user, "--", *argv],
            env=user_env,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    built = as_user("mpicc", "-o", "mpi_hello", "mpi_hello.c")
    assert built.returncode == 0, built.stderr
    hello = as_user("srun", "--mpi=pmix", "./mpi_hello")
    assert hello.returncode == 0, f"{hello.stdout}\n{hello.stderr}\n{host_slurm.log_tail('slurmd')}"
    assert re.fullmatch(r"mpi-hello rank=0 size=1 node=\S+ sum=1", hello.stdout.strip()), hello.stdout
    check = as_user("srun", "python3", "allreduce_check.py")
    assert check.returncode == 0, f"{check.stdout}\n{check.stderr}"
    assert check.stdout.strip().endswith(f"master={s.host}:{env['MASTER_PORT']} sum=1"), check.stdout


# --- hooks ------------------------------------------------------------------------------------------------


def hook_log(cluster: HostSlurm, name: str) -> str:
    assert cluster.carme_log_dir is not None
    path = cluster.carme_log_dir / f"{name}.log"
    return path.read_text() if path.exists() else ""


def node_in_service(cluster: HostSlurm, timeout: float = 30) -> str:
    """The node's state once it has left COMPLETING (other tests' jobs may keep it MIXED/ALLOCATED)."""
    deadline = time.monotonic() + timeout
    state = cluster.node_state()
    while time.monotonic() < deadline and "COMPLETING" in state:
        time.sleep(0.3)
        state = cluster.node_state()
    return state


#: what marks a Carme session for the hooks (carme_runtime.sessions submits every session with it); the hooks leave
#: other jobs alone (tests/integration/test_foreign_jobs.py)
CARME_JOB = "--comment=carme:v1;app=test;state=submitted"


def test_hooks_log_every_carme_job(host_slurm: HostSlurm) -> None:
    job = host_slurm.sbatch("bob", "echo ran\n", "--mem=100", "--time=2", "--gres=gpu:1", CARME_JOB)
    assert host_slurm.wait_job(job) == "COMPLETED", host_slurm.job_output("bob", job)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "epilog" not in hook_log(host_slurm, str(job)):
        time.sleep(0.3)
    log = hook_log(host_slurm, str(job))
    assert re.search(rf"prolog job={job} user=bob uid=\d+ node={host_slurm.node} gpus=\d ", log), log
    assert "result=ok" in log, log
    assert f"epilog job={job} user=bob" in log, log


@pytest.mark.parametrize("hook", ["prolog", "epilog"])
def test_malformed_hook_environment_logs_and_does_not_drain(host_slurm: HostSlurm, hook: str) -> None:
    job = host_slurm.sbatch("bob", "echo ran\n", "--hold", "--mem=100", "--time=2", CARME_JOB)
    flag = host_slurm.malform_hook_env(job, hook)
    try:
        host_slurm.run(["scontrol", "release", str(job)])
        state = host_slurm.wait_job(job)
        assert state == "COMPLETED", f"{state}\n{host_slurm.log_tail('slurmd')}"
        assert host_slurm.job_output("bob", job).strip() == "ran"
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline and not line:
            line = next((ln for ln in hook_log(host_slurm, "hooks").splitlines() if f"{hook} malformed-env" in ln), "")
            time.sleep(0.3)
        assert "SLURM_JOB_ID: missing" in line and "exit 0 (node not drained)" in line, line
        assert f"node={host_slurm.node!r}" in line, line
        node = node_in_service(host_slurm)
        assert node.split("+")[0] in ("IDLE", "MIXED", "ALLOCATED"), node
        assert "DRAIN" not in node and "DOWN" not in node and "FAIL" not in node, node
        reason = host_slurm.run(["sinfo", "--noheader", "-R", "--format=%E"]).stdout.strip()
        assert reason == "", reason
        # and the node still takes the next job, whose hooks run normally
        nxt = host_slurm.sbatch("bob", "echo next\n", "--mem=100", "--time=2", CARME_JOB)
        assert host_slurm.wait_job(nxt) == "COMPLETED"
        assert f"prolog job={nxt} " in hook_log(host_slurm, str(nxt))
    finally:
        flag.unlink(missing_ok=True)
        host_slurm.run(["scancel", str(job)], check=False)
