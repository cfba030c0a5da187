# SPDX-License-Identifier: GPL-3.0-or-later
"""The slurmrestd adapter (carme_runtime.slurmrest) against a real Slurm 24.11 slurmrestd in a Debian 13 container.

Opt-in (a container start and a Slurm of its own: tens of seconds): runs only with ``CARME_SLURM2411_TESTS=1`` and the
image ``localhost/carme-node:debian13`` present (``CARME_RELEASE=trixie make image``); otherwise the module is skipped
at collection, so ``make test`` neither waits for it nor counts it. ``CARME_CAPTURE_SLURMRESTD=1`` also writes the raw
answers of v0.0.40, v0.0.41 and v0.0.42 into tests/fixtures/slurmrestd/<version>/ (read by
tests/runtime/test_slurmrest.py). The container (``carme-h-restapi-<pid>``, tests/fixtures/slurm2411.py) runs
tests/integration/data/slurm2411-setup.sh restd: slurmctld, slurmd, slurmrestd (auth/jwt), no accounting.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.slurm2411 import require_opt_in

require_opt_in()

from carme_runtime import slurmrest  # noqa: E402
from tests.fixtures.net import free_port  # noqa: E402
from tests.fixtures.slurm2411 import podman  # noqa: E402
from tests.fixtures.slurm2411 import slurm2411_node  # noqa: E402
from webui.reservations.slurm import parse_reservation  # noqa: E402
from webui.slurm.client import SlurmClient  # noqa: E402
from webui.slurm.jwt_tokens import TokenSource  # noqa: E402
from webui.slurm.records import parse_job  # noqa: E402
from webui.slurm.records import parse_node  # noqa: E402
from webui.slurm.records import parse_partition  # noqa: E402

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slurmrestd"
pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def restd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """(slurmrestd URL, JWT key file, container name)."""
    port = free_port()
    with slurm2411_node("carme-h-restapi", "restd", "-p", f"127.0.0.1:{port}:6820") as name:
        key = tmp_path_factory.mktemp("jwt") / "jwt.key"
        podman("cp", f"{name}:/etc/slurm/jwt_hs256.key", str(key))
        yield f"http://127.0.0.1:{port}", key, name


def test_the_adapter_speaks_24_11(restd: tuple[str, Path, str]) -> None:
    url, key, name = restd
    client = SlurmClient(url, TokenSource(str(key)), timeout=30, api_version=slurmrest.AUTO)
    api = client.api_for("alice")
    assert api.version == "v0.0.42"
    nodes = [parse_node(n) for n in client.nodes("alice")]
    assert [n.name for n in nodes] == ["n2411"] and nodes[0].state.startswith("idle"), nodes
    parts = {p.name: p for p in (parse_partition(r) for r in client.partitions("alice"))}
    # 24.11's partitions (v0.0.40 to v0.0.42) do not say which is the default (no DEFAULT flag anywhere, measured):
    # the portal falls back to the first one (webui.slurm.scheduler.default_partition) or SESSION_DEFAULT_PARTITION
    assert parts["debug"].max_time_minutes == 1440 and parts["debug"].state == "up" and not parts["debug"].is_default
    assert parts["long"].max_time_minutes is None and not parts["long"].is_default
    payload = {"script": "#!/bin/bash\nsleep 300\n", "job": {
        "name": "carme-test", "partition": "debug", "time_limit": 30, "nodes": 1, "tasks": 1, "cpus_per_task": 1,
        "memory_per_node": 100, "current_working_directory": "/tmp", "standard_output": "/tmp/carme-%j.out",
        "environment": {"PATH": "/usr/bin:/bin", "CARME_APP": "x"}, "comment": "carme:v1;app=x;state=submitted",
        "requeue": False}}  # fmt: skip
    job_id = client.submit("alice", payload)
    jobs = {j.job_id: j for j in (parse_job(r) for r in client.jobs("alice"))}
    job = jobs[job_id]
    assert (job.user, job.name, job.time_limit_minutes, job.partition) == ("alice", "carme-test", 30, "debug")
    assert job.comment == "carme:v1;app=x;state=submitted" and job.state in ("PENDING", "RUNNING")
    client.update_job("alice", job_id, {"time_limit": 20})  # a user may lower her own job's limit
    assert {parse_job(r).job_id: parse_job(r) for r in client.jobs("alice")}[job_id].time_limit_minutes == 20
    podman("exec", name, "scontrol", "create", "reservation", "ReservationName=carme-bob-7", "StartTime=now+1day",
            "Duration=60", "Users=bob", "Nodes=n2411")  # fmt: skip
    (res,) = [parse_reservation(r) for r in client.reservations("alice")]
    assert res.users == ("bob",) and res.nodes == ("n2411",) and res.request_id() == 7
    assert (res.end - res.start).total_seconds() == 3600
    if os.environ.get("CARME_CAPTURE_SLURMRESTD") == "1":
        _capture(client, job_id)
    client.cancel("alice", job_id)


def _capture(client: SlurmClient, job_id: int) -> None:
    """The raw answers of each version 24.11 serves, for the unit tests."""
    spec = client.request("GET", "/openapi/v3", "alice")
    for version in ("v0.0.40", "v0.0.41", "v0.0.42"):
        api = slurmrest.SlurmRestApi(version)
        out = FIXTURES / version
        out.mkdir(parents=True, exist_ok=True)
        for endpoint in ("jobs", "nodes", "partitions", "reservations", "ping", f"job/{job_id}"):
            doc = client.request("GET", api.path(endpoint), "alice")
            (out / f"{endpoint.split('/')[0]}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        paths = {p: {} for p in spec.get("paths", {}) if p.startswith(f"/slurm/{version}/")}
        (out / "openapi.json").write_text(json.dumps({"paths": paths}, indent=1, sort_keys=True) + "\n")
