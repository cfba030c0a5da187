# SPDX-License-Identifier: GPL-3.0-or-later
"""The job list is read in full only after a job changed (webui/slurm/changed.py, issue 32).

A stand-in slurmrestd on 127.0.0.1 answers ``GET /slurm/v0.0.42/jobs`` with records captured from Slurm 24.11
(tests/fixtures/slurmrestd/v0.0.42) and follows slurmctld's rule for ``update_time``, measured on the demo's 24.11:
no jobs and ``last_update`` 0 when the last job change (whole seconds) is not after it, else every job and the
stamp. The node list is read in full every time. Its clock is set by the test, as is the portal's, so the
same-second case is exact.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.parse
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from typing import ClassVar

import pytest

from tests.fixtures.net import QuietHandler
from tests.fixtures.net import serve_http
from webui.slurm.changed import SETTLE_S
from webui.slurm.changed import ChangedList
from webui.slurm.client import SlurmClient
from webui.slurm.errors import SlurmUnavailable
from webui.slurm.jwt_tokens import TokenSource
from webui.slurm.records import parse_job
from webui.slurm.scheduler import SlurmScheduler
from webui.slurm.state import Job

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurmrestd" / "v0.0.42"
TEMPLATE = json.loads((FIXTURES / "jobs.json").read_text())
NODES = json.loads((FIXTURES / "nodes.json").read_text())


class Slurm24Jobs(QuietHandler):
    """slurmctld's job and node lists as slurmrestd 24.11 serves them; ``last_change`` is the last change of the
    jobs (seconds), ``nodes_change`` of the nodes."""

    jobs: ClassVar[list[int]] = []  # job ids, each one the fixture's job under that id
    last_change: ClassVar[int] = 1_800_000_000
    nodes_change: ClassVar[int] = 1_800_000_000
    legacy: ClassVar[bool] = False  # answer as 22.05's v0.0.38 does: no last_update
    delay: ClassVar[float] = 0.0  # seconds before any answer (a big queue: the job list takes 4 to 9 s)
    queries: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        self.queries.append(self.path)
        time.sleep(self.delay)
        what = path.rstrip("/").rsplit("/", 1)[-1]
        if what in ("jobs", "nodes"):
            since = urllib.parse.parse_qs(query).get("update_time")
            change = self.last_change if what == "jobs" else self.nodes_change
            doc = {k: v for k, v in (TEMPLATE if what == "jobs" else NODES).items() if k != what}
            if since is not None and change <= int(since[0]):
                doc.update({what: [], "last_update": {"set": True, "infinite": False, "number": 0}})
            else:
                doc[what] = [self._job(i) for i in self.jobs] if what == "jobs" else NODES["nodes"]
                doc["last_update"] = {"set": True, "infinite": False, "number": change}
            if self.legacy:
                doc.pop("last_update")
        else:
            doc = json.loads((FIXTURES / f"{what}.json").read_text()) if (FIXTURES / f"{what}.json").exists() else {}
        self.send_body(200, json.dumps(doc).encode(), "application/json")

    @staticmethod
    def _job(job_id: int) -> dict[str, Any]:
        job = copy.deepcopy(TEMPLATE["jobs"][0])
        job["job_id"] = job_id
        return dict(job)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def restd() -> Iterator[ThreadingHTTPServer]:
    Slurm24Jobs.jobs, Slurm24Jobs.last_change, Slurm24Jobs.legacy = [1, 2], 1_800_000_000, False
    Slurm24Jobs.nodes_change, Slurm24Jobs.delay = 1_800_000_000, 0.0
    Slurm24Jobs.queries = []
    with serve_http(Slurm24Jobs) as server:
        yield server


def client(server: ThreadingHTTPServer, tmp_path: Path, version: str = "v0.0.42", **timeouts: float) -> SlurmClient:
    key = tmp_path / "jwt.key"
    key.write_bytes(b"k" * 32)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return SlurmClient(url, TokenSource(str(key)), api_version=version, **timeouts)


def jobs_of(server: ThreadingHTTPServer, tmp_path: Path, clock: Clock) -> ChangedList[Job]:
    return ChangedList(client(server, tmp_path), "jobs", parse_job, clock)


def ids(jobs: tuple[Any, ...]) -> list[int]:
    return [j.job_id for j in jobs]


def test_an_unchanged_queue_is_not_read_again(restd: ThreadingHTTPServer, tmp_path: Path) -> None:
    clock = Clock()
    reader = jobs_of(restd, tmp_path, clock)
    raw, first = reader.read("carme-portal")
    assert raw is not None and ids(first) == [1, 2]
    clock.now += SETTLE_S  # the same stamp, read again in full once it is old enough: now settled
    assert reader.read("carme-portal")[0] is not None
    for _ in range(3):
        clock.now += 2
        raw, jobs = reader.read("carme-portal")
        assert raw is None and ids(jobs) == [1, 2]  # nothing sent, the parsed jobs kept
    assert (reader.full_reads, reader.unchanged_reads) == (2, 3)
    assert Slurm24Jobs.queries[-1].endswith("/jobs?update_time=1800000000")


def test_a_change_is_read_at_the_next_refresh(restd: ThreadingHTTPServer, tmp_path: Path) -> None:
    clock = Clock()
    reader = jobs_of(restd, tmp_path, clock)
    reader.read("u")
    clock.now += 2
    reader.read("u")
    Slurm24Jobs.jobs, Slurm24Jobs.last_change = [1, 2, 3], Slurm24Jobs.last_change + 5  # a job submitted
    clock.now += 2
    raw, jobs = reader.read("u")
    assert raw is not None and ids(jobs) == [1, 2, 3]


def test_a_change_in_the_same_second_as_the_read_is_not_missed(restd: ThreadingHTTPServer, tmp_path: Path) -> None:
    """The launcher marks a session ready in the second its job started, just after the portal read the list: the
    stamp does not move, and the next read must still bring the change."""
    clock = Clock()
    reader = jobs_of(restd, tmp_path, clock)
    reader.read("u")
    Slurm24Jobs.jobs = [1, 2, 3]  # changed in the same second: last_change stays what the read returned
    clock.now += 2
    raw, jobs = reader.read("u")
    assert raw is not None and ids(jobs) == [1, 2, 3]
    assert Slurm24Jobs.queries[-1].endswith("update_time=1799999999")  # one second earlier: a full answer


def test_a_quick_second_read_does_not_settle_the_stamp(restd: ThreadingHTTPServer, tmp_path: Path) -> None:
    clock = Clock()
    reader = jobs_of(restd, tmp_path, clock)
    reader.read("u")
    clock.now += 0.5  # slurmctld's clock may still be in that second
    reader.read("u")
    Slurm24Jobs.jobs = [1, 2, 4]
    clock.now += 0.5
    assert ids(reader.read("u")[1]) == [1, 2, 4]


def test_slurm_22_05_is_read_in_full_every_time(restd: ThreadingHTTPServer, tmp_path: Path) -> None:
    Slurm24Jobs.legacy = True
    clock = Clock()
    reader = jobs_of(restd, tmp_path, clock)
    for _ in range(3):
        clock.now += 2
        assert reader.read("u")[0] is not None
    assert not any("update_time" in q for q in Slurm24Jobs.queries)


def test_the_scheduler_keeps_its_jobs_and_its_shared_file(restd: ThreadingHTTPServer, tmp_path: Path) -> None:
    share = tmp_path / "state.json"
    sched = SlurmScheduler(client(restd, tmp_path), service_user="carme-portal", cache_seconds=0,
                           quota_cache_seconds=60, app_dirs=(), share_file=str(share))  # fmt: skip
    clock = Clock()
    sched._jobs._clock = clock
    sched.state()
    clock.now += SETTLE_S
    second = sched.state()
    written = share.stat().st_mtime_ns
    clock.now += 2
    later = sched.state()
    assert later is not second and later.jobs is second.jobs  # nodes and partitions read anew
    assert share.stat().st_mtime_ns == written  # no job changed: the 77 MB of a big queue are not written again
    assert sched._jobs.unchanged_reads == 1 and later.nodes == second.nodes
    assert not any("nodes?" in q for q in Slurm24Jobs.queries)  # the nodes in full, every time
    Slurm24Jobs.jobs, Slurm24Jobs.last_change = [1, 2, 5], Slurm24Jobs.last_change + 3  # a job changed
    clock.now += 2
    assert ids(sched.state().jobs) == [1, 2, 5]
    assert [j["job_id"] for j in json.loads(share.read_text())["jobs"]] == [1, 2, 5]
    assert json.loads(share.read_text())["nodes"] == NODES["nodes"]


def test_the_job_list_may_take_longer_than_a_request(restd: ThreadingHTTPServer, tmp_path: Path) -> None:
    """A big queue's job list takes seconds (SLURM_LIST_TIMEOUT_SECONDS); the other calls keep their short timeout,
    so a hung slurmrestd still shows the banner soon."""
    Slurm24Jobs.delay = 0.6
    slow = client(restd, tmp_path, timeout=0.3, list_timeout=3.0)
    raw, jobs = ChangedList(slow, "jobs", parse_job).read("u")
    assert raw is not None and ids(jobs) == [1, 2]
    with pytest.raises(SlurmUnavailable, match="timed out"):
        slow.partitions("u")
