# SPDX-License-Identifier: GPL-3.0-or-later
"""Notifications by mail on the live demo (issue 31): "a mail arrives at the test's SMTP server when bob's session
is ready and when the project passes 80 %".

The demo's portal mails through ``127.0.0.1:2525`` of the head (``carme_webui_mail_relay`` in the demo inventory),
where nothing listens but this test's SMTP server (``tests/fixtures/smtp.py`` copied into the head and run there; it
appends each mail to a file as a JSON line). The portal's tick (``flask --app webui carme-tick``: the timer's service
where it is installed, else the command) finds the events and mails them; bob's address is his LDAP ``mail``.

Bounded: one JupyterLab session (until ready), one 100-s job in a fresh account with a 2 GPU-minute budget (deleted
afterwards), each mail waited for at most ``MAIL_TIMEOUT_S``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import HEAD
from tests.fixtures.demo import PORTAL_CLI
from tests.fixtures.demo import REPO
from tests.fixtures.demo import Demo
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import run
from tests.fixtures.demo import start_jupyterlab
from tests.fixtures.demo import wait_job_end
from tests.fixtures.demo import wait_session_ready

pytestmark = pytest.mark.e2e

PORT = 2525
SCRIPT, OUT, PIDFILE = "/tmp/carme-e2e-smtp.py", "/tmp/carme-e2e-mails.jsonl", "/tmp/carme-e2e-smtp.pid"
BOB = "bob@carme.demo"  # inventories/demo/group_vars/all/users.yml
MAIL_TIMEOUT_S = 120.0
TICK_UNIT = "carme-webui-tick.service"  # roles/carme_webui: the timer runs it every minute


@pytest.fixture
def smtp_on_head() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The SMTP server on the head's 127.0.0.1:2525; yields a function reading the mails it got so far."""
    assert run(["podman", "cp", str(REPO / "tests" / "fixtures" / "smtp.py"), f"{HEAD}:{SCRIPT}"]).returncode == 0
    on_head("rm", "-f", OUT, PIDFILE)
    started = run(["podman", "exec", "-d", HEAD, "python3", SCRIPT, str(PORT), OUT, PIDFILE])
    assert started.returncode == 0, started.stderr
    deadline = time.monotonic() + 20
    while on_head("test", "-s", PIDFILE).returncode != 0:
        assert time.monotonic() < deadline, "the SMTP server did not start on the head"
        time.sleep(0.5)

    def mails() -> list[dict[str, Any]]:
        text = on_head("cat", OUT).stdout
        found = [json.loads(line) for line in text.splitlines() if line.strip()]
        return [{**m, "data": re.sub(r"\n[ \t]+", " ", m["data"])} for m in found]  # long headers unfolded

    try:
        yield mails
    finally:
        pid = on_head("cat", PIDFILE).stdout.strip()
        if pid.isdigit():
            on_head("kill", pid)


def tick() -> str:
    """One run of the portal's tick: the timer's service where the role installed it, else the command."""
    if on_head("systemctl", "cat", TICK_UNIT).returncode == 0:
        proc = on_head("systemctl", "start", TICK_UNIT, timeout=120)
    else:
        proc = run([*PORTAL_CLI, "carme-tick"], timeout=120)
    return proc.stdout + proc.stderr


def wait_mail(mails: Callable[[], list[dict[str, Any]]], to: str, subject: str) -> dict[str, Any]:
    deadline = time.monotonic() + MAIL_TIMEOUT_S
    while True:
        said = tick()
        found = [m for m in mails() if to in m["recipients"] and f"Subject: {subject}" in m["data"]]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no mail to {to} with {subject!r}; got {mails()}; tick said {said}"
        time.sleep(5)


def test_a_mail_arrives_when_bobs_session_is_ready(demo: Demo, smtp_on_head: Any) -> None:
    page, _ = login(demo, "bob")
    job = start_jupyterlab(page)
    try:
        wait_session_ready(page.context.request, job)
        mail = wait_mail(smtp_on_head, BOB, f"[Carme] Your session {job}")
        assert "is ready" in mail["data"]
        page.goto(f"{BASE}/notifications/")
        assert page.locator(f"tr[data-kind=session_ready]:has-text('session {job}')").count() == 1
    finally:
        on_head("scancel", str(job))


def test_a_mail_arrives_when_a_project_passes_80_percent(demo: Demo, smtp_on_head: Any) -> None:
    """A fresh account with a budget of 1 GPU-minute and bob as its member; his 1-GPU job of 50 s uses 83 %."""
    name = f"notify{int(time.time()) % 100000}"
    try:
        made = on_head("sacctmgr", "-i", "add", "account", name, "Description=e2e notifications",
                       "GrpTRESMins=gres/gpu=1", "QOS=normal", "DefaultQOS=normal")  # fmt: skip
        assert made.returncode == 0, made.stdout + made.stderr
        assert on_head("sacctmgr", "-i", "add", "user", "bob", f"account={name}").returncode == 0
        argv = ["runuser", "-u", "bob", "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null",
                "--mem=100", f"--account={name}", "--gres=gpu:1", "--time=1", "--wrap=sleep 50"]  # fmt: skip
        proc = on_head(*argv)
        assert proc.returncode == 0, proc.stderr
        job = proc.stdout.strip().split(";")[0]
        assert (state := wait_job_end(job, 240, poll_s=5)) == "COMPLETED", state
        mail = wait_mail(smtp_on_head, BOB, f"[Carme] Project {name} has used 80 % of its GPU budget")
        assert "0.01 of 0.02 GPU-hours used in" in mail["data"]  # 50 s of a budget of 1 GPU-minute
    finally:
        on_head("sacctmgr", "-i", "delete", "user", "bob", f"account={name}")
        on_head("sacctmgr", "-i", "delete", "account", name)
