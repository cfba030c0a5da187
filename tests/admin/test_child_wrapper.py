# SPDX-License-Identifier: GPL-3.0-or-later
"""A SIGKILL of carme ends its ansible-playbook too (carme_admin/playbook.py ``write_child_wrapper``).

ansible-runner starts ansible-playbook with pexpect in a session of its own that ignores SIGHUP: on the demo a
``carme upgrade`` killed with its process group left the drain's ansible-playbook running. Here a parent spawns a
stand-in for ansible-playbook the way ansible-runner does (``pexpect.spawn(..., ignore_sighup=True)``), once plainly
and once through the wrapper, and is killed with SIGKILL: the plain child and the process it forked in a session of
its own (as ansible-playbook forks a worker per running task, which calls setsid) live on, the wrapped ones die."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from carme_admin import child
from carme_admin import playbook
from carme_admin.playbook import PlaybookRun

PARENT = """
import sys, time, pexpect
pexpect.spawn(sys.argv[1], [], ignore_sighup=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    return state != "Z"


def spawn_and_kill_parent(command: Path, pidfile: Path) -> list[int]:
    """The stand-in's pid and its fork's once their parent was SIGKILLed (with its process group, as a lost
    terminal's session)."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(command)], start_new_session=True)
    deadline = time.monotonic() + 30
    while not pidfile.is_file() or len(pidfile.read_text().split()) < 2:
        assert time.monotonic() < deadline, "the stand-in never started"
        time.sleep(0.1)
    os.killpg(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    return [int(pid) for pid in pidfile.read_text().split()]


def end_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def kill(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(shutil.which("setpriv") is None or shutil.which("setsid") is None, reason="needs util-linux")
def test_a_killed_carme_takes_its_ansible_playbook_along(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pidfile = tmp_path / "pid"
    # stands in for ansible-playbook: forks a "worker" that leaves its session (WorkerProcess._detach), waits
    standin = tmp_path / "ansible-playbook-standin"
    standin.write_text(f"#!/bin/sh\nsetsid sleep 120 &\necho $$ $! > {pidfile}\nwait\n")
    standin.chmod(0o755)

    plain = spawn_and_kill_parent(standin, pidfile)
    try:
        assert not end_within(plain, 3), "without the wrapper the child should outlive its parent"
    finally:
        kill(plain)
    pidfile.unlink()

    real_which = shutil.which

    def which(name: str, path: str | None = None) -> str | None:
        return str(standin) if name == "ansible-playbook" else real_which(name)

    monkeypatch.setattr(playbook.shutil, "which", which)
    project = tmp_path / "project"
    project.mkdir()
    playbook.prepare_private_data_dir(project)
    wrapper = playbook.wrapper_dir(project) / "ansible-playbook"
    assert stat.S_IMODE(wrapper.stat().st_mode) == 0o700 and "--pdeathsig TERM" in wrapper.read_text()
    wrapped = spawn_and_kill_parent(wrapper, pidfile)
    try:
        assert end_within(wrapped, 10), "the wrapped ansible-playbook or its worker outlived carme"
    finally:
        kill(wrapped)


def test_the_wrapped_exit_status_is_ansible_playbooks() -> None:
    def status(*argv: str) -> int:  # in a process of its own: main() sets signal handlers that end the group
        return subprocess.run([sys.executable, "-m", child.__name__, *argv], check=False).returncode

    assert (status(), status("sh", "-c", "exit 4"), status("true")) == (2, 4, 0)


def test_the_runner_finds_the_wrapper_first(tmp_path: Path) -> None:
    kwargs = playbook.runner_kwargs(PlaybookRun(project=tmp_path, playbook="site.yml"), tmp_path / "site.yml", "x")
    first = kwargs["envvars"]["PATH"].split(os.pathsep)[0]
    assert first == str(playbook.wrapper_dir(tmp_path))
    playbook.prepare_private_data_dir(tmp_path)
    text = (Path(first) / "ansible-playbook").read_text()
    assert str(Path(sys.executable).parent / "ansible-playbook") in text, text


def test_a_cancel_reaches_ansible_playbook_as_sigint_and_a_hangup_is_ignored(tmp_path: Path) -> None:
    """ansible-runner's cancel (after a Ctrl-C) sends SIGHUP, then SIGINT: ansible-playbook stops as at a Ctrl-C."""
    ready = tmp_path / "ready"
    # a Python program as ansible-playbook is one: its SIGINT handler runs at once (dash defers a trap until its
    # foreground `sleep` ends; under the CI's load this test once waited 20 s for it)
    script = (f"import signal, sys, time; signal.signal(signal.SIGINT, lambda *a: sys.exit(130)); "
              f"open({str(ready)!r}, 'w').close(); time.sleep(120)")  # fmt: skip
    argv = [sys.executable, "-m", child.__name__, sys.executable, "-c", script]
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert proc.poll() is None  # ignored, as pexpect's ignore_sighup did
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
    finally:
        if proc.poll() is None:  # never left running for a later test to find (an unraisable ResourceWarning there)
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the wrapper and what it started
            proc.wait()


def test_the_wrapper_never_runs_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ansible-playbook outside this interpreter's directory (the site test's controller): found on PATH, wrapped by
    its absolute path; found nowhere: no wrapper at all (a wrapper naming a bare ansible-playbook found itself first
    on the runner's PATH and started itself again and again: seen in the clean-clone CI)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "ansible-playbook").write_text("#!/bin/sh\nexit 0\n")
    (elsewhere / "ansible-playbook").chmod(0o755)
    monkeypatch.setattr(playbook.sys, "executable", str(tmp_path / "nobin" / "python3"))
    wrapper = playbook.wrapper_dir(tmp_path) / "ansible-playbook"
    monkeypatch.setenv("PATH", f"{playbook.wrapper_dir(tmp_path)}{os.pathsep}{elsewhere}")
    playbook.prepare_private_data_dir(tmp_path)
    assert str(elsewhere / "ansible-playbook") in wrapper.read_text()
    monkeypatch.setenv("PATH", str(playbook.wrapper_dir(tmp_path)))
    playbook.prepare_private_data_dir(tmp_path)
    assert not wrapper.exists()


def test_a_worker_whose_parent_died_is_still_a_descendant(tmp_path: Path) -> None:
    """Under the subreaper, a worker whose ansible-playbook died first is still found (and so killed)."""
    pidfile = tmp_path / "pid"
    script = tmp_path / "subreaper.py"
    script.write_text(
        "import subprocess, time\n"
        "from carme_admin import child\n"
        "child._become_subreaper()\n"  # the parent below ends at once: its setsid'd child stays below this process
        f"subprocess.run(['sh', '-c', 'setsid sleep 120 & echo $! > {pidfile}'], check=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not pidfile.is_file() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline, "the worker never started"
            time.sleep(0.1)
        assert int(pidfile.read_text()) in child.descendants(proc.pid)
    finally:
        kill([*child.descendants(proc.pid), proc.pid])
        proc.wait()
