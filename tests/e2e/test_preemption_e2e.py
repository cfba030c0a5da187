# SPDX-License-Identifier: GPL-3.0-or-later
"""Instant interactive access by preemption, on the live demo cluster (issue 15).

Against the deployed demo (policy in inventories/demo/group_vars/all/slurm.yml: ``PreemptType=preempt/qos``,
``PreemptMode=REQUEUE``; QOS ``interactive``, the portal's, has ``Preempt=normal``; ``normal``, where plain sbatch
lands, is requeued when preempted; ``interactive`` does not list itself):

* with both nodes filled by bob's batch jobs in ``normal`` (one per node, all its CPUs), alice's 1-GPU JupyterLab
  session started through the portal answers 200 through the proxy within 30 s of the start request;
* the batch job whose node it took is requeued, not lost: pending again with ``Restarts=1``, its first run
  ``PREEMPTED`` in sacct; bob's other job runs on;
* alice cannot preempt another interactive session: with every CPU held by interactive-QOS jobs (her session,
  carol's portal session and an sbatch job of carol's in QOS ``interactive``), her second session through the portal
  waits, and the dashboard says why in words; nothing of carol's or her own is ever selected for preemption
  (``PreemptTime=None``, ``Restarts=0``), and both sessions still answer through the proxy.

bob's and carol's jobs and alice's sessions are cancelled at the end. Uses the ``demo`` fixture's helpers
(tests/fixtures/demo.py): skips without a demo unless ``CARME_E2E_REQUIRED=1``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import Demo
from tests.fixtures.demo import connect
from tests.fixtures.demo import csrf_headers
from tests.fixtures.demo import goto_until
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head
from tests.fixtures.demo import proxied
from webui.sessions.pending_reasons import explain

pytestmark = pytest.mark.e2e

START_BOUND_S = 30.0
USERS = ("alice", "bob", "carol")
CPUS_PER_NODE = 2  # the demo's node group (slurm.yml)
TERMINAL = ("FAILED", "CANCELLED", "COMPLETED", "TIMEOUT", "PREEMPTED", "gone")


@dataclass
class Scene:
    demo: Demo
    alice: Any = None  # alice's page
    carol_page: Any = None
    carol_session: int = 0
    session: int = 0  # alice's first session (1 GPU)
    second: int = 0  # alice's second session, which must wait
    bob: list[int] = field(default_factory=list)
    carol: list[int] = field(default_factory=list)
    requeued: int = 0

    @property
    def api(self) -> Any:
        return self.alice.context.request


def sbatch(user: str, *args: str) -> int:
    argv = ["runuser", "-u", user, "--", "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "--time=60",
            *args, "--wrap=sleep 3600"]  # fmt: skip
    proc = on_head(*argv)
    assert proc.returncode == 0, f"sbatch as {user} {args}: {proc.stderr}"
    return int(proc.stdout.strip().split(";")[0])


def job(job_id: int) -> dict[str, str]:
    """``scontrol show job -o`` as a dict (JobState, Reason, Restarts, PreemptTime, QOS, NodeList, ...)."""
    out = on_head("scontrol", "show", "job", "-o", str(job_id)).stdout
    return dict(token.split("=", 1) for token in out.split() if "=" in token)


def wait_state(job_id: int, state: str, timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    info = job(job_id)
    while info.get("JobState") != state and time.monotonic() < deadline:
        time.sleep(1)
        info = job(job_id)
    return info


def requeued(info: dict[str, str]) -> bool:
    return info.get("JobState") == "PENDING" and int(info.get("Restarts", "0")) >= 1


def never_preempted(job_id: int) -> None:
    info = job(job_id)
    assert info.get("JobState") == "RUNNING", info
    assert info.get("PreemptTime", "None") == "None" and info.get("Restarts") == "0", info


def start_session(page: Any, gpus: int) -> int:
    body = {"app": "jupyterlab", "image": "jupyter", "gpus": gpus, "time_minutes": 20}
    resp = page.context.request.post(f"{BASE}/api/sessions", data=body, headers=csrf_headers(page.context))
    assert resp.status == 201, resp.text()
    return int(resp.json()["job_id"])


def view(page: Any, job_id: int) -> dict[str, Any]:
    views = page.context.request.get(f"{BASE}/api/sessions").json()["sessions"]
    return next((v for v in views if v["job_id"] == job_id), {"state": "gone"})


def answers(page: Any, job_id: int, timeout: float = 60) -> bool:
    """The session is ready, and its app answers 200 through the proxy (after the Connect ticket)."""
    deadline = time.monotonic() + timeout
    while not view(page, job_id).get("ready"):
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    connect(page.context.request, job_id)
    return status(page, job_id) == 200


def status(page: Any, job_id: int) -> int:
    """The HTTP status of the session's app (``api/status``) through the proxy, in the page's browser context."""
    return int(page.context.request.get(proxied(job_id, "api/status"), max_redirects=0).status)


def queue_of(*users: str) -> list[str]:
    return on_head("squeue", "--noheader", "--user", ",".join(users), "--format=%i").stdout.split()


@pytest.fixture(scope="module")
def scene(demo: Demo) -> Iterator[Scene]:
    for user in USERS:
        on_head("scancel", "--user", user)  # leftovers of an interrupted run
    deadline = time.monotonic() + 60
    while queue_of(*USERS):
        assert time.monotonic() < deadline, on_head("squeue").stdout
        time.sleep(2)
    others = on_head("squeue", "--noheader", "--states=RUNNING", "--format=%i %u %N").stdout.strip()
    assert not others, f"other jobs hold the demo's nodes; this test needs them to itself:\n{others}"
    reservations = on_head("scontrol", "-o", "show", "reservation").stdout.splitlines()
    reservations = [r for r in reservations if "State=ACTIVE" in r]
    assert not reservations, f"an active reservation holds nodes; this test needs them to itself:\n{reservations}"
    policy = on_head("sacctmgr", "-n", "-P", "show", "qos", "interactive", "format=preempt").stdout.strip()
    assert "normal" in policy.split(","), f"QOS interactive may not preempt normal ({policy!r}): deploy the policy"
    state = Scene(demo=demo)
    try:
        state.alice, _ = login(demo, "alice")
        yield state
    finally:
        for user in ("bob", "carol"):
            on_head("scancel", "--user", user)
        for job_id in (state.session, state.second, state.carol_session):
            if job_id:
                on_head("scancel", str(job_id))
        deadline = time.monotonic() + 90
        while queue_of("bob", "carol") and time.monotonic() < deadline:
            time.sleep(2)
        for page in (state.alice, state.carol_page):
            if page is not None:
                page.context.close()
        assert not queue_of("bob", "carol"), "bob's or carol's jobs are still queued after scancel"


def test_alices_session_preempts_bobs_batch_jobs_and_answers_within_30_s(scene: Scene) -> None:
    # both nodes full: one batch job of bob's per node, holding all its CPUs, in his default QOS (normal)
    scene.bob = [sbatch("bob", "--partition=batch", "--nodes=1", f"--cpus-per-task={CPUS_PER_NODE}", "--mem=200")
                 for _ in range(2)]  # fmt: skip
    infos = [wait_state(b, "RUNNING") for b in scene.bob]
    assert all(i.get("JobState") == "RUNNING" and i.get("QOS") == "normal" for i in infos), infos
    assert len({i.get("NodeList") for i in infos}) == 2, infos
    scene.demo.steps.shot(scene.alice, "preemption-nodes-full")

    t0 = time.monotonic()
    scene.session = start_session(scene.alice, gpus=1)
    seen: list[str] = []  # what the API said while the session waited
    while not (current := view(scene.alice, scene.session)).get("ready"):
        assert current["state"] not in TERMINAL, current
        if current["state"] == "PENDING" and current.get("reason") not in seen:
            seen.append(current["reason"])
        elapsed = time.monotonic() - t0
        assert elapsed < START_BOUND_S, f"alice's session not ready {elapsed:.0f} s after Start: {current}; {seen}"
        time.sleep(0.5)
    connect(scene.api, scene.session)
    while (code := status(scene.alice, scene.session)) != 200:
        elapsed = time.monotonic() - t0
        assert elapsed < START_BOUND_S, f"no 200 through the proxy {elapsed:.0f} s after Start ({code})"
        time.sleep(0.5)
    elapsed = time.monotonic() - t0
    print(f"alice's session answered 200 through the proxy {elapsed:.1f} s after Start; waiting reasons: {seen}")
    assert elapsed <= START_BOUND_S
    scene.alice.goto(f"{BASE}/")
    scene.demo.steps.shot(scene.alice, "preemption-alice-session-running")

    # bob's job on her node was requeued, not lost; his other one runs on
    deadline = time.monotonic() + 30
    while not any(requeued(job(b)) for b in scene.bob):
        assert time.monotonic() < deadline, [job(b) for b in scene.bob]
        time.sleep(1)
    states = {b: job(b) for b in scene.bob}
    taken = [b for b, i in states.items() if requeued(i)]
    assert len(taken) == 1, states  # one CPU and one GPU were needed: one node, one job
    scene.requeued = taken[0]
    other = next(b for b in scene.bob if b != scene.requeued)
    assert states[other].get("JobState") == "RUNNING" and states[other].get("Restarts") == "0", states
    assert scene.requeued in [int(j) for j in queue_of("bob")]
    deadline = time.monotonic() + 60  # slurmdbd learns of the first run asynchronously
    while True:
        runs = on_head("sacct", "-j", str(scene.requeued), "--duplicates", "--allocations", "--noheader",
                       "--parsable2", "--format=JobID,State").stdout.split()  # fmt: skip
        if any(r.endswith("|PREEMPTED") or r.endswith("|REQUEUED") for r in runs):
            break
        assert time.monotonic() < deadline, runs
        time.sleep(2)


def test_alice_cannot_preempt_another_interactive_session(scene: Scene) -> None:
    assert scene.session and scene.requeued, "no running session (previous step failed)"
    # carol's interactive work takes every other CPU: her portal session the free one beside alice's session (no
    # preemption needed), then an sbatch job of hers in QOS interactive the whole second node (preempting bob's other
    # batch job)
    scene.carol_page, _ = login(scene.demo, "carol")
    scene.carol_session = start_session(scene.carol_page, gpus=0)
    assert answers(scene.carol_page, scene.carol_session), view(scene.carol_page, scene.carol_session)
    scene.carol.append(sbatch("carol", "--partition=interactive", "--qos=interactive",
                              f"--cpus-per-task={CPUS_PER_NODE}", "--mem=100"))  # fmt: skip
    assert wait_state(scene.carol[0], "RUNNING", timeout=90).get("JobState") == "RUNNING", job(scene.carol[0])
    assert all(requeued(job(b)) for b in scene.bob), [job(b) for b in scene.bob]  # queued, not lost

    # every CPU is held by interactive work now: alice's second session waits, and the portal says why
    scene.second = start_session(scene.alice, gpus=0)
    deadline = time.monotonic() + 60
    while (current := view(scene.alice, scene.second)).get("slurm_reason") in (None, "", "None"):
        assert current["state"] == "PENDING", current
        assert time.monotonic() < deadline, current
        time.sleep(1)
    assert current["state"] == "PENDING" and current["reason"] == explain(current["slurm_reason"]), current
    # the dashboard may come from another portal worker, whose snapshot can be a scheduler pass older or newer
    words = {explain(r) for r in (current["slurm_reason"], "Resources", "Priority")}
    goto_until(scene.alice, f"{BASE}/", f"tr[data-job='{scene.second}']")  # its own reload may interrupt a load
    row = scene.alice.inner_text(f"tr[data-job='{scene.second}']")
    assert "PENDING" in row and any(w in row for w in words), (row, words)
    scene.demo.steps.shot(scene.alice, "preemption-second-session-waits")

    time.sleep(20)  # a preemption is chosen at the scheduler's first pass; give it several
    assert job(scene.second).get("JobState") == "PENDING", job(scene.second)
    for interactive in (scene.session, scene.carol_session, *scene.carol):
        never_preempted(interactive)
    assert status(scene.alice, scene.session) == 200 and status(scene.carol_page, scene.carol_session) == 200
    assert all(requeued(job(b)) for b in scene.bob), [job(b) for b in scene.bob]
