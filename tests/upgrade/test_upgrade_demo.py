# SPDX-License-Identifier: GPL-3.0-or-later
"""The upgrade scenario of issue 34 on the demo: ``carme upgrade`` takes the Debian 12 demo (Slurm 22.05) to Debian 13
(Slurm 24.11), killed halfway and run again, and nothing the users had is lost (docs/upgrade.md "Upgrade path").

Before: alice and bob log in with password and a TOTP key they enrol; alice has a file in her home and a finished
2-GPU job in accounting; carol approves alice's reservation request for next week; bob's monthly budget is set to one
GPU-hour above what he has used (his 2-GPU job of about a minute), as a site would declare it (``sacctmgr`` now, the
same limit in the upgrade's inventory with ``-e``).
Then ``carme upgrade -i inventories/demo/hosts.yml``, its process group killed with SIGKILL once the hosts stage has
run for ``KILL_AFTER_S`` (nothing of its ansible-playbook may run on ``ORPHAN_GRACE_S`` later), and ``carme
upgrade`` again (the ``-e`` kept) until it finishes.
After, on Debian 13 / Slurm 24.11: alice and bob log in with their password and the key of before (no enrolment
asked), alice's file has the same sha256, her job is listed under "Before the upgrade" in her history with its
GPU-hours, the reservation is in Slurm and in her calendar, and bob's next 2-GPU job, which the declared budget
alone would take, is held by what he used before.

The second test recreates the hosts from Debian 12's image and runs ``carme upgrade --rollback``: the same checks on
Debian 12 / Slurm 22.05.

``make test-upgrade`` (about 27 min; the last step of ``make test``'s demo line) brings up a fresh Debian 12 demo
(``CARME_RELEASE=bookworm make demo``) and runs this module with ``CARME_UPGRADE_TESTS=1``, without which it skips;
it leaves a Debian 12 demo behind (a Debian 13 one when the rollback test fails early).
Bounded: each ``carme upgrade`` run by ``UPGRADE_TIMEOUT_S``; it only runs ``carme`` against the demo's inventory and
``podman exec`` in the demo's containers.
The times go to ``.artifacts/upgrade/times.json`` (copied into bench/results/upgrade.json by hand).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import NODE_PREFIX
from tests.fixtures.demo import REPO
from tests.fixtures.demo import Demo
from tests.fixtures.demo import demo_debian_version
from tests.fixtures.demo import enrol
from tests.fixtures.demo import fill_login
from tests.fixtures.demo import goto_until
from tests.fixtures.demo import on_head
from tests.fixtures.demo import password_of
from tests.fixtures.demo import wait_job_end
from tests.fixtures.reservations import approve
from tests.fixtures.reservations import day_at
from tests.fixtures.reservations import request

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.environ.get("CARME_UPGRADE_TESTS") != "1",
        reason="runs under make test-upgrade (a fresh Debian 12 demo first)",
    ),
]

CARME = str(REPO / ".venv" / "bin" / "carme")
INVENTORY = REPO / "inventories" / "demo" / "hosts.yml"
STATE = REPO / ".artifacts" / "upgrade" / "state.json"
UPGRADE_TIMEOUT_S = 2400
KILL_AFTER_S = 90  # into the hosts stage: apt runs on the hosts (an async job that survives the kill)
ORPHAN_GRACE_S = 15  # after the kill, for carme_admin.child to end ansible-playbook and every worker below it
HOSTS = ("head", "node1", "node2")
BUDGET_MARGIN_MIN = 60  # bob's budget: one GPU-hour above his usage
FILE = "upgrade-e2e.bin"


@dataclass
class Before:
    """What the users had before the upgrade."""

    secrets: dict[str, str]
    file_sha: str
    job: str
    job_gpu_hours: str
    reservation: str
    reservation_day: str
    bob_limit: int


def as_user(user: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return on_head("runuser", "-u", user, "--", *argv, timeout=timeout)


def submit(user: str, *options: str) -> subprocess.CompletedProcess[str]:
    return as_user(user, "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", *options)


def sbatch(user: str, *options: str) -> str:
    done = submit(user, *options)
    assert done.returncode == 0, f"{user}'s sbatch {options}: {done.stderr.strip()}"
    return done.stdout.strip().split(";")[0]


def bob_usage() -> int:
    """bob's GPU-minutes as slurmctld counts them against GrpTRESMins (the N of gres/gpu=LIMIT(N))."""
    shown = on_head("scontrol", "show", "assoc_mgr", "users=bob", "flags=assoc").stdout
    found = re.search(r"GrpTRESMins=[^ \n]*gres/gpu=[^(]*\((\d+)\)", shown)
    assert found, shown
    return int(found.group(1))


def prepare(demo: Demo) -> Before:
    secrets = {}
    pages = {}
    for user in ("alice", "bob", "carol"):
        pages[user], _code, secrets[user] = enrol(demo, user)
    made = as_user("alice", "sh", "-c", f"head -c 1048576 /dev/urandom > ~/{FILE} && sha256sum ~/{FILE}")
    assert made.returncode == 0, made.stderr
    job = sbatch("alice", "--gres=gpu:2", "--time=2", "--wrap=sleep 20")
    bobs = sbatch("bob", "--gres=gpu:2", "--time=3", "--wrap=sleep 65")
    assert wait_job_end(job, 300) == "COMPLETED" and wait_job_end(bobs, 300) == "COMPLETED"
    elapsed = on_head("sacct", "-X", "-n", "-P", "-j", job, "-o", "ElapsedRaw").stdout.strip()
    used = bob_usage()
    assert used >= 2, f"bob's 2-GPU job of 65 s counted {used} GPU-minutes"
    limit = used + BUDGET_MARGIN_MIN
    modified = on_head("sacctmgr", "-i", "modify", "user", "bob", "set", f"GrpTRESMins=gres/gpu={limit}")
    assert modified.returncode == 0, modified.stdout + modified.stderr
    request_id = request(pages["alice"], day_at(7, 10), day_at(7, 12), purpose="e2e: before the upgrade")
    message, name = approve(pages["carol"], request_id, demo.steps)
    assert name, message
    return Before(secrets=secrets, file_sha=made.stdout.split()[0], job=job,
                  job_gpu_hours=f"{2 * int(elapsed) / 3600:.2f}", reservation=name,
                  reservation_day=day_at(7, 10).date().isoformat(), bob_limit=limit)  # fmt: skip


def upgrade(*args: str, log: Path) -> subprocess.Popen[bytes]:
    """``carme upgrade ARGS`` in a process group of its own, its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen([CARME, "upgrade", *args], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip


def stage(name: str) -> dict[str, Any]:
    try:
        record: dict[str, Any] = json.loads(STATE.read_text())["stages"].get(name, {})
    except (OSError, ValueError):
        return {}
    return record


def still_running(marker: str) -> list[str]:
    """This machine's live processes (zombies left out) whose command line names ``marker``: "pid state command"."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in args and state != "Z":
            found.append(f"{proc.name} {state} {args[:300]}")
    return found


def kill_in_the_hosts_stage(first: subprocess.Popen[bytes]) -> list[str]:
    """Wait for the hosts stage, let it run KILL_AFTER_S, SIGKILL the process group of ``carme upgrade``; return what
    of its hosts stage (ansible-playbook upgrade_hosts.yml and its workers) still runs ORPHAN_GRACE_S later."""
    deadline = time.monotonic() + UPGRADE_TIMEOUT_S
    while not stage("hosts").get("started"):
        assert first.poll() is None, f"carme upgrade ended (rc {first.returncode}) before the hosts stage"
        assert time.monotonic() < deadline, "the hosts stage did not start"
        time.sleep(2)
    time.sleep(KILL_AFTER_S)
    assert first.poll() is None, f"carme upgrade ended (rc {first.returncode}) {KILL_AFTER_S} s into the hosts stage"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(30)
    assert not stage("hosts").get("finished"), "the hosts stage finished before the kill"
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while (left := still_running("upgrade_hosts.yml")) and time.monotonic() < deadline:
        time.sleep(1)
    return left


def login_again(demo: Demo, user: str, secret: str) -> Any:
    """Log in with the password and the TOTP key of before: the portal asks for a code, not for an enrolment."""
    import pyotp

    page = demo.context(viewport={"width": 1400, "height": 900}).new_page()
    fill_login(page, user, password_of(user))
    page.click("button[type=submit]")
    page.wait_for_selector("input[name=code]", timeout=20_000)
    assert page.locator("code.secret").count() == 0, f"{user} is asked to enrol again"
    page.fill("input[name=code]", pyotp.TOTP(secret).now())
    page.click("button[type=submit]")
    page.wait_for_selector("text=My sessions", timeout=20_000)
    demo.steps.shot(page, f"{user}-after-upgrade")
    return page


def bob_is_held_by_his_budget(before: Before) -> None:
    """A 2-GPU job within the declared budget (its limit) but over what is left of it (BUDGET_MARGIN_MIN) once the
    usage of before counts."""
    minutes = before.bob_limit // 2
    assert 2 * minutes > BUDGET_MARGIN_MIN
    done = submit("bob", "--gres=gpu:2", f"--time={minutes}", "--wrap=sleep 1")
    if done.returncode != 0:  # refused at submit
        assert "GRESMinutes" in done.stderr or "GrpTRESMins" in done.stderr or "limit" in done.stderr, done.stderr
        return
    job = done.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while (reason := on_head("squeue", "-h", "-j", job, "-o", "%T %r").stdout.strip()) != (
            "PENDING AssocGrpGRESMinutes"
        ):
            assert time.monotonic() < deadline, f"bob's job {job} of {minutes} min on 2 GPUs: {reason!r}"
            time.sleep(3)
    finally:
        on_head("scancel", job)


def users_kept_what_they_had(demo: Demo, before: Before, debian: str, slurm: str, history: str) -> None:
    """The acceptance's checks, on the release the cluster is now on; ``history`` is the table that must list
    alice's job of before (the archive after the upgrade, Slurm's accounting after a rollback)."""
    assert [demo_debian_version(h)[:3] for h in HOSTS] == [debian] * 3, [demo_debian_version(h) for h in HOSTS]
    version = on_head("sinfo", "-V").stdout  # Debian's build says "slurm-wlm 24.11.5"
    assert version.split()[-1].startswith(slurm + "."), version
    deadline = time.monotonic() + 180
    while not all(n.endswith(" idle") for n in on_head("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n") if n):
        assert time.monotonic() < deadline, on_head("sinfo", "-N", "-l").stdout
        time.sleep(5)

    alice = login_again(demo, "alice", before.secrets["alice"])
    login_again(demo, "bob", before.secrets["bob"])
    kept = as_user("alice", "sh", "-c", f"sha256sum ~/{FILE}").stdout.split()
    assert kept and kept[0] == before.file_sha, f"alice's file changed: {kept}"
    alice.goto(f"{BASE}/history/")
    demo.steps.shot(alice, f"alice-history-debian-{debian}")
    row = alice.locator(f"{history} tr[data-job='{before.job}']")
    assert row.count() == 1, alice.inner_text("main")[:2000]
    assert before.job_gpu_hours in row.inner_text(), (before.job_gpu_hours, row.inner_text())

    shown = on_head("scontrol", "show", "reservation", before.reservation).stdout
    assert "Users=alice" in shown and f"StartTime={before.reservation_day}T10:00:00" in shown, shown
    goto_until(alice, f"{BASE}/reservations/?date={before.reservation_day}",
               f"[data-reservation='{before.reservation}']")  # fmt: skip
    demo.steps.shot(alice, f"alice-calendar-debian-{debian}")
    bob_is_held_by_his_budget(before)


def run_to_the_end(runs: list[subprocess.Popen[bytes]], log: Path) -> None:
    try:
        assert runs[-1].wait(UPGRADE_TIMEOUT_S) == 0, log.read_text()[-6000:]
    finally:
        for proc in runs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def keep_times(demo: Demo) -> None:
    times = REPO / ".artifacts" / "upgrade" / "times.json"
    with times.open("w") as out:
        subprocess.run([CARME, "upgrade", "--status", "--json"], cwd=REPO, check=True, timeout=60, stdout=out)
    shutil.copy(times, demo.steps.directory / "upgrade-state.json")


@pytest.fixture(scope="module")
def upgraded() -> dict[str, Before]:
    """What the users had before, once the upgrade test has got that far (the rollback test needs it)."""
    return {}


def test_carme_upgrade_killed_and_run_again_keeps_what_users_had(demo: Demo, upgraded: dict[str, Before]) -> None:
    assert demo_debian_version("node1").startswith("12."), "needs the Debian 12 demo: CARME_RELEASE=bookworm make demo"
    if STATE.exists():
        STATE.rename(STATE.with_name(f"state.json.{int(time.time())}"))
    before = prepare(demo)
    log = demo.steps.directory / "carme-upgrade.log"
    budget = json.dumps({"carme_slurm_user_overrides": {"bob": {"GrpTRESMins": f"gres/gpu={before.bob_limit}"}}})
    runs = [upgrade("-i", str(INVENTORY), "-e", budget, "-e", "carme_upgrade_drain_timeout=60", log=log)]
    left = ["(not killed)"]
    try:
        left = kill_in_the_hosts_stage(runs[0])
    finally:
        runs.append(upgrade(log=log))
        run_to_the_end(runs, log)
    keep_times(demo)
    upgraded["before"] = before
    users_kept_what_they_had(demo, before, "13.", "24.11", "section.archived")
    assert not left, f"{ORPHAN_GRACE_S} s after the SIGKILL of carme upgrade its hosts stage still ran: {left}"


def test_rollback_brings_back_the_debian_12_cluster(demo: Demo, upgraded: dict[str, Before]) -> None:
    """The site reinstalls every host with Debian 12 (here: the containers recreated from Debian 12's image; /home
    and the head's backup volume kept), then ``carme upgrade --rollback``."""
    assert "before" in upgraded, "the upgrade test did not get as far as the upgrade"
    before = upgraded["before"]
    subprocess.run(["podman", "rm", "-f", "-t", "10", *(NODE_PREFIX + h for h in HOSTS)], check=True, timeout=120)
    # make exports the default release's image name: Debian 12's is named here, not inherited
    env = {**os.environ, "CARME_RELEASE": "bookworm", "CARME_NODE_IMAGE": "localhost/carme-node:debian12"}
    subprocess.run([CARME, "demo", "up", "--no-deploy"], cwd=REPO, env=env, check=True, timeout=600)
    log = demo.steps.directory / "carme-upgrade-rollback.log"
    run_to_the_end([upgrade("--rollback", log=log)], log)
    keep_times(demo)
    try:
        users_kept_what_they_had(demo, before, "12.", "22.05", "#history-jobs")
    finally:
        on_head("scontrol", "delete", f"ReservationName={before.reservation}")
