# SPDX-License-Identifier: GPL-3.0-or-later
"""A SIGKILL of carme ends its ansible-playbook too (carme_admin/playbook.py ``write_child_wrapper``).

ansible-runner starts ansible-playbook with pexpect in a session of its own that ignores SIGHUP: on the demo a
``carme upgrade`` killed with its process group left the drain's ansible-playbook running. Here a parent spawns a
stand-in for ansible-playbook the way ansible-runner does (``pexpect.spawn(..., ignore_sighup=True)``), once plainly
and once through the wrapper, and is killed with SIGKILL: the plain child lives on, the wrapped one dies."""

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


def spawn_and_kill_parent(command: Path, pidfile: Path) -> int:
    """The child's pid once its parent was SIGKILLed (with its process group, as a lost terminal's session)."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(command)], start_new_session=True)
    deadline = time.monotonic() + 30
    while not pidfile.is_file() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "the stand-in never started"
        time.sleep(0.1)
    os.killpg(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    return int(pidfile.read_text())


def ends_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is not installed")
def test_a_killed_carme_takes_its_ansible_playbook_along(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pidfile = tmp_path / "pid"
    standin = tmp_path / "ansible-playbook-standin"  # stands in for ansible-playbook: writes its pid, waits
    standin.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 120\n")
    standin.chmod(0o755)

    plain = spawn_and_kill_parent(standin, pidfile)
    try:
        assert not ends_within(plain, 3), "without the wrapper the child should outlive its parent"
    finally:
        os.kill(plain, signal.SIGKILL)
    pidfile.unlink()

    real_which = shutil.which

    def which(name: str, path: str | None = None) -> str | None:
        return str(standin) if name == "ansible-playbook" else real_which(name)

    monkeypatch.setattr(playbook.shutil, "which", which)
    project = tmp_path / "project"
    project.mkdir()
    playbook.prepare_private_data_dir(project)
    wrapper = playbook.wrapper_dir(project) / "ansible-playbook"
    assert stat.S_IMODE(wrapper.stat().st_mode) == 0o700 and "--pdeathsig KILL" in wrapper.read_text()
    wrapped = spawn_and_kill_parent(wrapper, pidfile)
    try:
        assert ends_within(wrapped, 10), "the wrapped ansible-playbook outlived carme"
    finally:
        if alive(wrapped):
            os.kill(wrapped, signal.SIGKILL)


def test_the_runner_finds_the_wrapper_first(tmp_path: Path) -> None:
    kwargs = playbook.runner_kwargs(PlaybookRun(project=tmp_path, playbook="site.yml"), tmp_path / "site.yml", "x")
    first = kwargs["envvars"]["PATH"].split(os.pathsep)[0]
    assert first == str(playbook.wrapper_dir(tmp_path))
    playbook.prepare_private_data_dir(tmp_path)
    text = (Path(first) / "ansible-playbook").read_text()
    assert str(Path(sys.executable).parent / "ansible-playbook") in text, text
