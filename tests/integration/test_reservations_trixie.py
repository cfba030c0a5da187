# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU reservations on Slurm 24.11 (Debian 13), made by the portal's own code (issue 33).

webui.reservations.slurm.SlurmReservations, with its scontrol run as ``podman exec <node> scontrol``, against a
one-node Slurm 24.11 with accounting and 4 fake GPUs, each bound to a core (tests/fixtures/slurm2411.py:
tests/integration/data/slurm2411-setup.sh limits, without job_submit.lua). It asks the version (24.11) and reserves
1 GPU and its share of CPUs for alice (``TRES=cpu=1,gres/gpu=1``, not the node). Alice's job runs in the reservation,
bob is refused by Slurm, bob's GPU job outside it runs beside it, and so does a reservation of 1 GPU for bob; 4 GPUs
are refused. Opt-in, like the other 24.11 container tests: runs only with ``CARME_SLURM2411_TESTS=1`` and the image
present, otherwise skipped at collection. The container is ``carme-h-resv-<pid>``, removed at the end.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pytest

from tests.fixtures.slurm2411 import require_opt_in

require_opt_in()

from tests.fixtures.slurm2411 import podman  # noqa: E402
from tests.fixtures.slurm2411 import sbatch  # noqa: E402
from tests.fixtures.slurm2411 import scontrol_fields  # noqa: E402
from tests.fixtures.slurm2411 import slurm2411_node  # noqa: E402
from webui.reservations.slurm import ReservationSpec  # noqa: E402
from webui.reservations.slurm import SlurmReservations  # noqa: E402
from webui.slurm.client import SlurmClient  # noqa: E402
from webui.slurm.errors import SlurmError  # noqa: E402
from webui.slurm.jwt_tokens import TokenSource  # noqa: E402

pytestmark = [pytest.mark.slow]

DENIED = "Access denied to requested reservation"


@pytest.fixture(scope="module")
def node() -> Iterator[str]:
    # --tz=local: scontrol reads the portal's times in the local time zone of the host it runs on
    with slurm2411_node("carme-h-resv", "limits", "--cap-add", "MKNOD", "--tz=local") as name:
        yield name


def portal(node: str) -> SlurmReservations:
    """The portal's reservations backend; slurmrestd is not asked (create and delete use scontrol only)."""
    client = SlurmClient("http://127.0.0.1:1", TokenSource("/nonexistent"))
    return SlurmReservations(client, service_user="carme-portal", cache_seconds=1,
                             scontrol=("podman", "exec", node, "scontrol"))  # fmt: skip


def request(name: str, gpus: int, user: str = "alice") -> ReservationSpec:
    """What webui.reservations.service.approve asks for a one-node request of ``gpus`` GPUs in partition debug."""
    now = dt.datetime.now(dt.UTC)
    return ReservationSpec(name, user, now, now + dt.timedelta(hours=1), 1, "debug", gpus=gpus)


def running(node: str, job: int) -> dict[str, str]:
    """The job's fields once it runs (within 30 s), else as they are then."""
    for _ in range(60):
        job_fields = scontrol_fields(node, "job", str(job))
        if job_fields.get("JobState") == "RUNNING":
            break
        time.sleep(0.5)
    return job_fields


def test_a_portal_reservation_holds_one_gpu_for_alice_on_24_11(node: str) -> None:
    res = portal(node)
    assert res.slurm_version() == (24, 11)
    assert "carme-alice-1" in res.create(request("carme-alice-1", 1))
    shown = scontrol_fields(node, "reservation", "carme-alice-1")
    assert shown["TRES"] == "cpu=1,gres/gpu=1" and shown["Users"] == "alice", shown  # 2 CPUs, 4 GPUs: 1 per GPU
    assert shown["CoreCnt"] == "1" and scontrol_fields(node, "node")["CPUTot"] == "2", shown  # not the whole node

    mine, messages = sbatch(node, "alice", "--reservation=carme-alice-1", "--gres=gpu:1")
    assert mine is not None, messages
    job = running(node, mine)
    assert job["JobState"] == "RUNNING" and job["Reservation"] == "carme-alice-1", job
    assert "gres/gpu=1" in job["AllocTRES"], job

    refused, error = sbatch(node, "bob", "--reservation=carme-alice-1")
    assert refused is None and DENIED in error, error
    beside, messages = sbatch(node, "bob", "--gres=gpu:1")  # the node's other GPUs stay open to everyone
    assert beside is not None and running(node, beside)["JobState"] == "RUNNING", messages
    podman("exec", node, "scancel", str(mine), str(beside))


def test_a_second_reservation_shares_the_node_and_too_many_gpus_are_refused_on_24_11(node: str) -> None:
    for _ in range(20):  # the first test's jobs end (a running job keeps its cores from a new reservation)
        if not podman("exec", node, "squeue", "-h", check=False).stdout.strip():
            break
        time.sleep(0.5)
    res = portal(node)
    with pytest.raises(SlurmError, match="Requested nodes are busy"):
        res.create(request("carme-alice-2", 4))  # carme-alice-1 holds one of the 4 GPUs
    assert "carme-alice-2" not in podman("exec", node, "scontrol", "show", "reservation", check=False).stdout
    res.create(request("carme-bob-3", 1, user="bob"))
    shown = scontrol_fields(node, "reservation", "carme-bob-3")
    assert shown["TRES"] == "cpu=1,gres/gpu=1" and shown["Users"] == "bob", shown
    assert scontrol_fields(node, "reservation", "carme-alice-1")["State"] == "ACTIVE"
    for name in ("carme-alice-1", "carme-bob-3"):
        res.delete(name)
    assert "No reservations" in podman("exec", node, "scontrol", "show", "reservation", check=False).stdout
