# SPDX-License-Identifier: GPL-3.0-or-later
"""Reservations on the host Slurm 22.05 (issue 16), through the portal's own code (webui.reservations.slurm):

* Slurm 22.05 refuses GPUs in a reservation's TRES, so the portal reserves whole nodes (``NodeCnt``);
* an Operator (the portal's Slurm identity; dave here, made one for this module) creates them with scontrol and an
  argv list; a plain user cannot;
* slurmrestd's ``GET /reservations`` shows them to the calendar, and one deleted with scontrol is gone;
* an overlapping request over a full window is refused by Slurm, in Slurm's own words;
* the portal's session payload with ``reservation`` is accepted for the reservation's user and refused for another
  (slurmrestd and sbatch alike).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from tests.fixtures.hostslurm import HostSlurm
from webui.reservations.slurm import ReservationSpec
from webui.reservations.slurm import SlurmReservations
from webui.slurm.client import SlurmClient
from webui.slurm.errors import SlurmError
from webui.slurm.jwt_tokens import TokenSource
from webui.slurm.session_spec import SessionSpec
from webui.slurm.session_spec import build_payload
from webui.slurm.session_spec import load_apps

pytestmark = pytest.mark.host

OPERATOR = "dave"


@pytest.fixture
def portal(host_slurm: HostSlurm) -> Iterator[SlurmReservations]:
    """The portal's reservation backend, running scontrol as the Operator dave (the portal runs it as itself)."""
    level = ["sacctmgr", "-i", "modify", "user", "where", f"name={OPERATOR}", "set"]
    host_slurm.run([*level, "AdminLevel=Operator"])
    client = SlurmClient(host_slurm.restd_url, TokenSource(str(host_slurm.jwt_key)), timeout=30)
    backend = SlurmReservations(
        client,
        service_user=OPERATOR,
        cache_seconds=0.0,
        scontrol=("runuser", "-u", OPERATOR, "--", "scontrol"),
        slurm_conf=str(host_slurm.slurm_conf),
    )
    try:
        yield backend
    finally:
        for res in backend.state().reservations:
            if res.name.startswith("carme-"):
                host_slurm.run(["scontrol", "delete", f"ReservationName={res.name}"], check=False)
        host_slurm.run([*level, "AdminLevel=None"])


def at(days: int = 0, hours: int = 0) -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(days=days, hours=hours)


def test_slurm_22_05_reserves_whole_nodes_not_gpus(host_slurm: HostSlurm, portal: SlurmReservations) -> None:
    argv = ["scontrol", "create", "reservation", "ReservationName=carme-gres-0", "StartTime=now+1day",
            "Duration=60", "Users=alice", "TRES=gres/gpu=1"]  # fmt: skip
    proc = host_slurm.run(argv, user=OPERATOR, check=False)
    assert proc.returncode != 0 and "TRES type 'gres/gpu' not supported with reservations" in proc.stderr


def test_an_operator_creates_it_the_calendar_reads_it_and_scontrol_delete_removes_it(
    host_slurm: HostSlurm, portal: SlurmReservations
) -> None:
    start = at(days=1)
    out = portal.create(ReservationSpec("carme-alice-1", "alice", start, start + dt.timedelta(hours=2), 1))
    assert "carme-alice-1" in out
    shown = host_slurm.run(["scontrol", "show", "reservation", "carme-alice-1"]).stdout
    assert "Users=alice" in shown and "NodeCnt=1" in shown and f"Nodes={host_slurm.node}" in shown
    (res,) = [r for r in portal.state().reservations if r.name == "carme-alice-1"]
    assert res.users == ("alice",) and res.nodes == (host_slurm.node,) and res.node_count == 1
    assert abs((res.start - start).total_seconds()) < 2 and res.end - res.start == dt.timedelta(hours=2)

    # Over the full window (the only node is reserved), Slurm refuses in its own words.
    with pytest.raises(SlurmError) as info:
        portal.create(
            ReservationSpec("carme-bob-2", "bob", start + dt.timedelta(hours=1), start + dt.timedelta(hours=3), 1)
        )
    assert str(info.value) == "Error creating the reservation: Requested nodes are busy"

    # A plain user may not create reservations.
    plain = SlurmReservations(portal.client, service_user=OPERATOR, cache_seconds=0.0,
                              scontrol=("runuser", "-u", "alice", "--", "scontrol"),
                              slurm_conf=str(host_slurm.slurm_conf))  # fmt: skip
    with pytest.raises(SlurmError) as denied:
        plain.create(ReservationSpec("carme-alice-9", "alice", at(days=3), at(days=3, hours=1), 1))
    assert str(denied.value).startswith("Error creating the reservation"), str(denied.value)

    host_slurm.run(["scontrol", "delete", "ReservationName=carme-alice-1"])
    assert "carme-alice-1" not in {r.name for r in portal.state().reservations}


def test_a_session_in_a_reservation_is_for_its_user_only(host_slurm: HostSlurm, portal: SlurmReservations) -> None:
    now = at()
    portal.create(ReservationSpec("carme-alice-3", "alice", now, now + dt.timedelta(minutes=30), 1))
    (res,) = [r for r in portal.state().reservations if r.name == "carme-alice-3"]
    assert res.active(at())

    def payload(user: str) -> dict[str, object]:
        spec = SessionSpec(user=user, app="jupyterlab", image="/nonexistent", gpus=1, time_minutes=10,
                           partition=None, cpus=1, mem_mb=100, runtime="none", workdir=str(host_slurm.user_dir(user)),
                           reservation="carme-alice-3")  # fmt: skip
        return build_payload(spec, "s" * 43, load_apps(()), spec.limits)

    client = portal.client
    job_id = client.submit("alice", payload("alice"))
    try:
        shown = host_slurm.run(["scontrol", "show", "job", str(job_id)]).stdout
        assert "Reservation=carme-alice-3" in shown, shown
    finally:
        client.cancel("alice", job_id)
    with pytest.raises(SlurmError) as refused:
        client.submit("bob", payload("bob"))
    assert "Access denied to requested reservation" in str(refused.value)
    proc = host_slurm.run(["sbatch", "--parsable", "--reservation=carme-alice-3", "--mem=100", "--wrap", "true"],
                          user="bob", check=False, cwd=host_slurm.user_dir("bob"))  # fmt: skip
    assert proc.returncode != 0 and "Access denied to requested reservation" in proc.stderr, proc.stderr


def test_a_maintenance_window_holds_plain_sbatch_that_would_run_into_it(
    host_slurm: HostSlurm, portal: SlurmReservations
) -> None:
    """The portal's maintenance window (an Operator's MAINT reservation of every node, issue 31) as Slurm 22.05 takes
    it: the calendar reads it with its flag, a job that would run into it is held with Slurm's reason, a job that
    ends before it runs, and it is withdrawn with scontrol delete."""
    start = (at() + dt.timedelta(minutes=30)).replace(second=0)  # the host cluster's MaxTime is under an hour
    name = f"maint-{start:%Y%m%d%H%M}"
    portal.create_maintenance(name, start, start + dt.timedelta(hours=2))
    try:
        (window,) = [r for r in portal.state().reservations if r.name == name]
        assert "MAINT" in window.flags and window.start == start and window.nodes, window
        into = host_slurm.sbatch("alice", "sleep 5", "--time=45")
        before = host_slurm.sbatch("alice", "sleep 5", "--time=10")
        assert host_slurm.wait_job(before, timeout=120) == "COMPLETED"
        shown = host_slurm.run(["squeue", "-h", "-j", str(into), "-o", "%T|%r"]).stdout.strip()
        assert shown.startswith("PENDING|") and "maintenance" in shown.lower(), shown
        host_slurm.run(["scancel", str(into)])
    finally:
        portal.delete(name)
    assert name not in [r.name for r in portal.state().reservations]
