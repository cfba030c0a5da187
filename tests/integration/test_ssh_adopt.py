# SPDX-License-Identifier: GPL-3.0-or-later
"""``ssh node`` through the slurm_ssh_adopt role's PAM stack, against the real host Slurm (``host_slurm``).

A private sshd (OpenSSH 9.2 from Debian 12) listens on 127.0.0.1 on a free port, started as
``<tmp>/sshd-carme-adopt`` (a symlink to /usr/sbin/sshd): OpenSSH names its PAM service after its program, so its
PAM stack is ``/etc/pam.d/sshd-carme-adopt``, rendered from the role's own templates (``tests/roles/
render_ssh_adopt.yml``, with this host's ``/etc/pam.d/common-session`` as the role copies it), and removed at the
end; ``/etc/pam.d/sshd`` is never touched. The role's templates give ``pam_slurm_adopt.so`` ``service=`` for that
name (the module otherwise acts for ``sshd`` only). Keys only (one per user, in a root-owned ``AuthorizedKeysFile``).
sshd gets ``SLURM_CONF`` of the test cluster in its environment, which is where pam_slurm_adopt reads slurm.conf from.

Slurm runs with ``PrologFlags=Alloc,Contain`` for this module (``HostSlurm.slurm_conf_keys``: every job gets its extern
step at allocation), proctrack/cgroup and task/cgroup on this host's cgroup v1 hierarchy, as the role requires.

Proven here for real: bob, without a job on the node, is refused (pam_slurm_adopt's message); alice with a running job
gets in, and her ssh shell is in the job's ``step_extern`` cgroup and among ``scontrol listpids`` of the job; when
the job is cancelled, the process she left running from ssh ends with it; afterwards she is refused again; carol, in
an administrators' group (``slurm_ssh_adopt_admin_groups``), gets in without a job and is not adopted.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.hostslurm import HostSlurm
from tests.fixtures.net import free_port
from tests.fixtures.net import wait_port
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env

pytestmark = [pytest.mark.host, pytest.mark.slow]

SERVICE = "sshd-carme-adopt"
SESSION_COPY = "common-session-carme-adopt-test"
SSHD = Path("/usr/sbin/sshd")
MODULE = Path("/lib/security/pam_slurm_adopt.so")
PACKAGES = ("openssh-server", "openssh-client", "libpam-slurm-adopt")
NO_JOBS = "Access denied by pam_slurm_adopt: you have no active jobs on this node"
DEV_LOG = Path("/dev/log")
ADMIN_GROUP = "carol"  # carol's own primary group (useradd's user private group): she is the "administrator"


def _ensure_packages() -> None:
    """Install openssh-server and libpam-slurm-adopt (scripts/host-packages.txt) when missing; skip with the reason."""
    if os.geteuid() != 0:
        pytest.skip("needs root (starts sshd, writes /etc/pam.d/sshd-carme-adopt)")
    if SSHD.exists() and MODULE.exists() and shutil.which("ssh") and shutil.which("ssh-keygen"):
        return
    policy = Path("/usr/sbin/policy-rc.d")
    made = not policy.exists()
    if made:  # no daemon of these packages starts (as scripts/host-setup.sh does)
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        cmd = ["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=600", "--no-install-recommends", *PACKAGES]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"apt-get install {' '.join(PACKAGES)} failed: {exc}")
    finally:
        if made:
            policy.unlink(missing_ok=True)
    if proc.returncode != 0 or not (SSHD.exists() and MODULE.exists()):
        pytest.skip(f"apt-get install {' '.join(PACKAGES)} failed (rc={proc.returncode}): {proc.stderr[-500:]}")


class SyslogSink:
    """A datagram socket at /dev/log for the module's lifetime, only where the host has none (no syslog daemon here):
    pam_slurm_adopt (and pam_access) log only through syslog(3), so this is where their reasons can be read."""

    def __init__(self, path: Path = DEV_LOG) -> None:
        self.path = path
        self.messages: list[str] = []
        self._sock: socket.socket | None = None
        self._inode = 0
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        if self.path.exists() or self.path.is_symlink():
            return False  # the host's own syslog: leave it alone
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(self.path))
        self._inode = self.path.stat().st_ino  # what stop() removes: this socket file, nothing that replaced it
        self.path.chmod(0o666)
        sock.settimeout(0.5)
        self._sock = sock
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return True

    def _read(self) -> None:
        while self._sock is not None:
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.messages.append(data.decode(errors="replace"))

    def text(self) -> str:
        return "\n".join(self.messages)

    def wait_for(self, needle: str, timeout: float = 10) -> bool:
        """Whether ``needle`` arrives within ``timeout`` (the reader thread may not have caught up yet)."""
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def stop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                if self.path.is_socket() and self.path.stat().st_ino == self._inode:
                    self.path.unlink()
            sock.close()
        if self._thread is not None:
            self._thread.join(timeout=5)


@dataclass
class Sshd:
    port: int
    log: Path
    keys: dict[str, Path]
    pam_file: Path
    syslog: SyslogSink

    def ssh(self, user: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(user, command), capture_output=True, text=True, timeout=timeout, check=False, cwd="/"
        )

    def argv(self, user: str, command: str) -> list[str]:
        return [
            "ssh", "-F", "/dev/null", "-i", str(self.keys[user]), "-p", str(self.port),
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
            f"{user}@127.0.0.1", command,
        ]  # fmt: skip

    def log_text(self) -> str:
        sshd = self.log.read_text(errors="replace") if self.log.exists() else "(no sshd log)"
        return sshd + "\n--- syslog ---\n" + self.syslog.text()


def _render_pam(cluster: HostSlurm, out: Path, access_file: Path) -> None:
    argv = [
        _ansible_bin("ansible-playbook"), str(REPO_ROOT / "tests" / "roles" / "render_ssh_adopt.yml"),
        "-i", str(cluster.root / "inventory"), "-e", f"out_dir={out}", "-e", "ansible_connection=local",
        "-e", "common_session_file=/etc/pam.d/common-session",
        "-e", f'{{"slurm_ssh_adopt_pam_service": "{SERVICE}", "slurm_ssh_adopt_common_session": "{SESSION_COPY}",'
        f' "slurm_ssh_adopt_access_file": "{access_file}", "slurm_ssh_adopt_admin_groups": ["{ADMIN_GROUP}"],'
        f' "slurm_ssh_adopt_options": {{"log_level": "debug"}}}}',
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


@pytest.fixture(scope="module")
def contained(host_slurm: HostSlurm) -> Iterator[HostSlurm]:
    """The host cluster with PrologFlags=Alloc,Contain (the extern step pam_slurm_adopt adopts into)."""
    with host_slurm.slurm_conf_keys(PrologFlags="Alloc,Contain"):
        yield host_slurm


@pytest.fixture(scope="module")
def sshd(contained: HostSlurm) -> Iterator[Sshd]:
    _ensure_packages()
    # Not pytest's tmp_path: /tmp/pytest-of-root is 0700, and sshd reads the authorized keys as the user.
    tmp = Path(tempfile.mkdtemp(prefix="carme-sshd-adopt-", dir="/tmp"))
    tmp.chmod(0o755)
    rendered = tmp / "rendered"
    access_file = tmp / "access.conf"
    _render_pam(contained, rendered, access_file)
    installed: list[Path] = []
    made_run_dir = False
    syslog = SyslogSink()
    proc: subprocess.Popen[bytes] | None = None
    try:
        for name in (SERVICE, SESSION_COPY):
            dest = Path("/etc/pam.d") / name
            assert not dest.exists(), f"{dest} exists already (a run that did not clean up?)"
            shutil.copyfile(rendered / "etc" / "pam.d" / name, dest)
            installed.append(dest)
        shutil.copyfile(rendered / str(access_file).lstrip("/"), access_file)
        access_file.chmod(0o644)

        if not syslog.start():
            pytest.skip(f"{DEV_LOG} exists (a syslog daemon): this test reads pam_slurm_adopt's reasons from its own")
        run_dir = Path("/run/sshd")  # privilege separation directory (Debian's init scripts create it)
        if not run_dir.exists():
            run_dir.mkdir(mode=0o755)
            made_run_dir = True
        host_key = tmp / "host_ed25519"
        keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
        subprocess.run([*keygen, "-f", str(host_key)], check=True, capture_output=True, timeout=30)
        auth_dir = tmp / "authorized"
        auth_dir.mkdir(mode=0o755)
        keys: dict[str, Path] = {}
        for user in ("alice", "bob", "carol"):
            key = tmp / f"id_{user}"
            subprocess.run([*keygen, "-f", str(key)], check=True, capture_output=True, timeout=30)
            (auth_dir / user).write_text(key.with_suffix(".pub").read_text())
            (auth_dir / user).chmod(0o644)
            keys[user] = key
        port = free_port()
        log = tmp / "sshd.log"
        config = tmp / "sshd_config"
        config.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {tmp / 'sshd.pid'}\n"
            "UsePAM yes\nPubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            f"AuthorizedKeysFile {auth_dir}/%u\nStrictModes no\nPermitRootLogin no\nUseDNS no\nPrintMotd no\n"
            "LogLevel DEBUG1\nAllowUsers alice bob carol\n"
        )
        program = tmp / SERVICE  # OpenSSH's PAM service name is its program name
        program.symlink_to(SSHD)
        check = subprocess.run([str(program), "-t", "-f", str(config)], capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stderr
        env = contained.env  # SLURM_CONF: pam_slurm_adopt reads the test cluster's slurm.conf
        proc = subprocess.Popen(
            [str(program), "-D", "-f", str(config), "-E", str(log)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert wait_port(port, 20), f"sshd did not listen:\n{log.read_text() if log.exists() else ''}"
        yield Sshd(port=port, log=log, keys=keys, pam_file=installed[0], syslog=syslog)
    finally:
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for path in installed:
            path.unlink(missing_ok=True)
        if made_run_dir:
            shutil.rmtree("/run/sshd", ignore_errors=True)
        syslog.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_running(cluster: HostSlurm, job: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = cluster.job_state(job)
        if state == "RUNNING" and _extern_pids(cluster, job) is not None:
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job} is {state}, its extern step not up\n{cluster.log_tail('slurmd')}")


def _extern_pids(cluster: HostSlurm, job: int) -> set[int] | None:
    """PIDs ``scontrol listpids`` gives for the job's extern step (None until slurmd has it)."""
    out = cluster.run(["scontrol", "listpids", str(job)], check=False).stdout
    pids = set()
    seen = False
    for line in out.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[1] == str(job) and fields[2] == "extern":
            seen = True
            with contextlib.suppress(ValueError):
                pids.add(int(fields[0]))
    return pids if seen else None


def _listpids(cluster: HostSlurm, job: int) -> set[int]:
    out = cluster.run(["scontrol", "listpids", str(job)], check=False).stdout
    return {int(f[0]) for f in (line.split() for line in out.splitlines()[1:]) if f and f[0].isdigit()}


def _refused(result: subprocess.CompletedProcess[str], sshd: Sshd) -> str:
    """Why the login was refused: ssh's stderr, sshd's log and what the PAM modules sent to syslog."""
    assert result.returncode == 255, f"ssh was let in (rc={result.returncode}): {result.stdout}{result.stderr}"
    sshd.syslog.wait_for(NO_JOBS)
    return result.stderr + sshd.log_text()


def test_user_without_a_job_is_refused(sshd: Sshd, contained: HostSlurm) -> None:
    result = sshd.ssh("bob", "id -un")
    why = _refused(result, sshd)
    assert NO_JOBS in why, why[-3000:]
    assert "Access denied for user bob by PAM account configuration" in sshd.log_text()


def test_admin_group_gets_in_without_a_job_and_is_not_adopted(sshd: Sshd) -> None:
    result = sshd.ssh("carol", "id -un; cat /proc/self/cgroup")
    assert result.returncode == 0, result.stderr + sshd.log_text()[-3000:]
    assert result.stdout.splitlines()[0] == "carol"
    assert "job_" not in result.stdout, result.stdout


def test_user_with_a_job_is_adopted_into_it_and_refused_after(sshd: Sshd, contained: HostSlurm) -> None:
    job = contained.sbatch("alice", "sleep 300", "--mem=100", "--time=5")
    try:
        _wait_running(contained, job)
        # The ssh session prints its shell's PID and cgroups, then stays (exec sleep) while we look from outside.
        proc = subprocess.Popen(
            sshd.argv("alice", "echo PID=$$; cat /proc/$$/cgroup; echo END; exec sleep 120"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd="/",
        )
        try:
            lines = _read_until(proc, "END", timeout=30)
            text = "\n".join(lines)
            match = re.search(r"PID=(\d+)", text)
            assert match, f"no PID from the ssh session: {text}\n{sshd.log_text()[-3000:]}"
            pid = int(match.group(1))
            # Adopted into the job's extern step: the cgroup path of the shell names the job and step_extern.
            memory = [line for line in lines if re.match(r"^\d+:memory:", line)]
            assert memory and f"/job_{job}/step_extern" in memory[0], text
            assert any(f"/job_{job}/step_extern" in line for line in lines if ":freezer:" in line), text
            # slurmd counts the ssh shell among the job's processes
            assert pid in _listpids(contained, job), contained.run(["scontrol", "listpids", str(job)]).stdout
            # Ending the job ends what the user started over ssh (proctrack/cgroup kills the extern step too).
            contained.run(["scancel", str(job)])
            assert contained.wait_job(job) == "CANCELLED"
            deadline = time.monotonic() + 30
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not Path(f"/proc/{pid}").exists(), f"the ssh session's process {pid} outlived job {job}"
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=30)
    finally:
        contained.run(["scancel", str(job)], check=False)
    # No job any more: refused again.
    result = sshd.ssh("alice", "id -un")
    assert NO_JOBS in _refused(result, sshd)


def _read_until(proc: subprocess.Popen[bytes], marker: str, timeout: float) -> list[str]:
    """The session's output lines up to ``marker`` (raw reads with a deadline: the session stays open after it)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
            lines = data.decode(errors="replace").splitlines()
            if marker in lines:
                return lines[: lines.index(marker)]
    raise AssertionError(f"ssh session did not print {marker} in {timeout} s: {data!r} (rc={proc.poll()})")
