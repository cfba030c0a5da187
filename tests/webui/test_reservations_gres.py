# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU reservations on Slurm 23.02 and later (issue 33): the ``scontrol create reservation`` argv on 22.05 (whole
nodes, unchanged) and on 24.11 (``TRES=cpu=C,gres/gpu=G``), the version asked once, the CPUs per GPU read from
``scontrol show node``, and the portal's requests sharing one node's GPUs (conftest.FakeReservations).

What Slurm 24.11 does with this argv is tested in tests/integration/test_reservations_trixie.py (opt-in).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest
from flask import Flask

from carme_runtime.slurm_formats import count_gpus
from webui.reservations.slurm import Reservation
from webui.reservations.slurm import ReservationSpec
from webui.reservations.slurm import SlurmReservations
from webui.reservations.slurm import cpu_share
from webui.reservations.slurm import create_argv
from webui.reservations.slurm import parse_reservation
from webui.reservations.slurm import parse_version
from webui.slurm.client import SlurmClient
from webui.slurm.errors import SlurmError
from webui.slurm.jwt_tokens import TokenSource

from .conftest import FakeReservations
from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import post
from .test_multinode import two_nodes
from .test_reservations import form

UTC = dt.UTC
START = dt.datetime(2030, 1, 2, 10, tzinfo=UTC)
END = START + dt.timedelta(hours=2)
NODES = (
    "NodeName=gpu01 Arch=x86_64 CPUTot=32 Gres=gpu:a100:4(S:0-1) Partitions=gpu,interactive State=IDLE\n"
    "NodeName=gpu02 Arch=x86_64 CPUTot=16 Gres=gpu:2 Partitions=gpu State=IDLE\n"
    "NodeName=cpu01 Arch=x86_64 CPUTot=64 Gres=(null) Partitions=cpu State=IDLE\n"
)


def spec(gpus: int = 2, nodes: int = 1, partition: str | None = "interactive") -> ReservationSpec:
    return ReservationSpec("carme-alice-3", "alice", START, END, nodes, partition, gpus=gpus)


def test_on_22_05_the_argv_is_the_whole_node_one_whatever_the_gpus() -> None:
    before = create_argv(ReservationSpec("carme-alice-3", "alice", START, END, 1, "interactive"), now=START)
    assert create_argv(spec(gpus=2), now=START, version=(22, 5)) == before
    assert create_argv(spec(gpus=2), now=START) == before  # 22.05 unless told
    assert before[-2:] == ["NodeCnt=1", "PartitionName=interactive"]


def test_from_23_02_a_one_node_request_reserves_its_gpus_and_cpus() -> None:
    gpu = ReservationSpec("carme-alice-3", "alice", START, END, 1, "interactive", gpus=2, cpus=16)
    for version in ((23, 2), (24, 11)):
        argv = create_argv(gpu, now=START, version=version)
        assert argv[:4] == ["create", "reservation", "ReservationName=carme-alice-3", "StartTime=now"]
        assert argv[-3:] == ["Users=alice", "TRES=cpu=16,gres/gpu=2", "PartitionName=interactive"]
        assert not [a for a in argv if a.startswith("NodeCnt=")]
    assert "TRES=gres/gpu=2" in create_argv(spec(gpus=2), now=START, version=(24, 11))  # cpus unknown: Slurm picks
    # several nodes: NodeCnt with the same TRES (all nodes' GPUs), never whole nodes, which 24.11 let overlap another
    # reservation's GPU (measured on the Debian 13 demo)
    several = ReservationSpec("carme-bob-4", "bob", START, END, 2, "interactive", gpus=4, cpus=2)
    assert create_argv(several, now=START, version=(24, 11))[-3:] == ["NodeCnt=2", "TRES=cpu=2,gres/gpu=4",
                                                                      "PartitionName=interactive"]  # fmt: skip
    assert "NodeCnt=1" in create_argv(spec(gpus=2), now=START, version=(23, 1))


def test_versions_tres_and_cpu_shares_are_read() -> None:
    assert parse_version("slurm 22.05.8\n") == (22, 5)
    assert parse_version("slurm-wlm 24.11.5\n") == (24, 11)
    with pytest.raises(SlurmError, match="cannot read Slurm's version"):
        parse_version("scontrol: command not found")
    assert count_gpus("cpu=2,gres/gpu=1") == 1 and count_gpus("gres/gpu:a100=2,license/x=1") == 2
    assert count_gpus("cpu=96") == 0 and count_gpus("") == 0
    assert cpu_share(NODES, "interactive", 1) == 8 and cpu_share(NODES, "gpu", 1) == 8  # gpu01: 32 CPUs, 4 GPUs
    assert cpu_share(NODES, "gpu", 2) == 16 and cpu_share(NODES, "gpu", 3) == 24  # gpu02 (16, 2) cannot hold 3
    assert cpu_share(NODES, None, 8) == 16  # no node holds 8: the smallest node's CPUs
    assert cpu_share(NODES, "cpu", 1) == 1 and cpu_share("", None, 2) == 1
    test_node = "NodeName=n1 CPUTot=2 Gres=gpu:fake:4(S:0-1) Partitions=debug\n"  # the 24.11 test node
    assert [cpu_share(test_node, "debug", gpus) for gpus in (1, 2, 3, 4)] == [1, 1, 1, 2]
    raw = {"name": "carme-alice-3", "users": "alice", "node_list": "n1", "node_count": 1,
           "start_time": 1_900_000_000, "end_time": 1_900_007_200, "tres": "cpu=2,gres/gpu=1"}  # fmt: skip
    assert parse_reservation(raw).gpus == 1


class Scontrol:
    """A runner standing in for scontrol on a cluster of ``version``, recording each argv."""

    def __init__(self, version: str = "slurm-wlm 24.11.5", reserved: str = "cpu=16,gres/gpu=2") -> None:
        self.version, self.reserved = version, reserved
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], **_: Any) -> tuple[int, str, str]:
        args = list(argv[1:])
        self.calls.append(args)
        if args == ["--version"]:
            return (0, self.version + "\n", "") if self.version else (1, "", "slurm_load_ctl_conf error\n")
        if args[:3] == ["--oneliner", "show", "node"]:
            return 0, NODES, ""
        if args[:3] == ["--oneliner", "show", "reservation"]:
            return 0, f"ReservationName={args[3]} Nodes=gpu01 NodeCnt=1 CoreCnt=16 TRES={self.reserved} x=y\n", ""
        return 0, "Reservation created\n", ""

    def created(self) -> list[list[str]]:
        return [c for c in self.calls if c[:2] == ["create", "reservation"]]


def reservations(runner: Scontrol) -> SlurmReservations:
    client = SlurmClient("http://127.0.0.1:1", TokenSource("/nonexistent"))
    return SlurmReservations(client, service_user="carme-portal", cache_seconds=1, runner=runner)


def test_the_version_is_asked_once_and_a_24_11_reservation_holds_gpus_and_their_share_of_cpus() -> None:
    runner = Scontrol()
    res = reservations(runner)
    res.create(spec(gpus=2))
    res.create(spec(gpus=1))
    assert runner.calls.count(["--version"]) == 1
    first, second = runner.created()
    assert "TRES=cpu=16,gres/gpu=2" in first and "TRES=cpu=8,gres/gpu=1" in second  # gpu01: 32 CPUs, 4 GPUs
    assert "PartitionName=interactive" in first and not [a for a in first if a.startswith("NodeCnt")]


def test_on_22_05_the_portal_reserves_whole_nodes_and_a_spec_without_gpus_asks_no_version() -> None:
    runner = Scontrol(version="slurm 22.05.8")
    reservations(runner).create(spec(gpus=2))
    assert runner.created()[0][-2:] == ["NodeCnt=1", "PartitionName=interactive"]
    assert ["--oneliner", "show", "node"] not in runner.calls
    runner = Scontrol(version="")
    reservations(runner).create(spec(gpus=0))
    assert ["--version"] not in runner.calls and "NodeCnt=1" in runner.created()[0]


def test_a_failed_version_look_reserves_whole_nodes_and_is_asked_again(caplog: pytest.LogCaptureFixture) -> None:
    runner = Scontrol(version="")
    res = reservations(runner)
    res.create(spec(gpus=1))
    assert "NodeCnt=1" in runner.created()[0] and "slurm_load_ctl_conf error" in caplog.text
    runner.version = "slurm-wlm 24.11.5"
    res.create(spec(gpus=1))
    assert runner.calls.count(["--version"]) == 2 and "TRES=cpu=8,gres/gpu=1" in runner.created()[1]


def test_fewer_gpus_than_asked_are_deleted_again_and_refused() -> None:
    runner = Scontrol(reserved="cpu=8,gres/gpu=1")
    with pytest.raises(SlurmError, match="Requested GPUs are busy: Slurm found 1 of the 2 GPUs"):
        reservations(runner).create(spec(gpus=2))
    assert runner.calls[-1] == ["delete", "ReservationName=carme-alice-3"]


def _request(app: Flask, client: Any, user: str) -> int:
    log_in_as(app, client, user)
    return int(post(client, "/reservations/request", form()).status_code)


def test_on_24_11_two_users_share_a_nodes_gpus_in_one_window(
    app: Flask, client: Any, fake_reservations: FakeReservations
) -> None:
    fake_reservations.version = (24, 11)  # gpu01: 2 GPUs
    assert _request(app, client, "alice") == 302
    assert _request(app, client, "bob") == 302
    assert [(s.user, s.gpus, s.node_count) for s in fake_reservations.created] == [("alice", 1, 1), ("bob", 1, 1)]
    assert [r.gpus for r in fake_reservations.items.values()] == [1, 1]
    assert _request(app, client, "carol") == 409  # both GPUs reserved: Slurm's "Requested nodes are busy"
    log_in_as(app, client, "dave")
    page = client.get("/reservations/?date=" + form()["start"][:10]).get_data(as_text=True)
    assert page.count("1 GPU(s) reserved") == 2


def test_on_22_05_the_second_request_finds_the_node_taken(
    app: Flask, client: Any, fake_reservations: FakeReservations
) -> None:
    assert _request(app, client, "alice") == 302
    assert _request(app, client, "bob") == 409
    assert fake_reservations.created[0].gpus == 1 and [r.gpus for r in fake_reservations.items.values()] == [0]


def alice_in_gpu_reservation(
    app: Flask,
    client: Any,
    fake_scheduler: FakeScheduler,
    fake_reservations: FakeReservations,
    name: str,
    nodes: tuple[str, ...],
    gpus: int,
) -> None:
    """alice logged in, her GPU reservation ``name`` (``gpus`` GPUs and 2 CPUs on ``nodes``) running now, and a
    partition with two nodes where a session may have two."""
    now = dt.datetime.now(dt.UTC)
    fake_reservations.items[name] = Reservation(
        name, now - dt.timedelta(minutes=5), now + dt.timedelta(hours=1), users=("alice",),
        nodes=nodes, node_count=len(nodes), partition="gpu", gpus=gpus, cpus=2)  # fmt: skip
    two_nodes(app, fake_scheduler)
    log_in_as(app, client, "alice")


def test_a_session_in_a_gpu_reservation_fits_it_or_is_told_why(
    app: Flask, client: Any, fake_scheduler: FakeScheduler, fake_reservations: FakeReservations
) -> None:
    """Slurm 24.11 holds 1 GPU and 2 CPUs for alice: a session asking more would wait in it forever."""
    alice_in_gpu_reservation(app, client, fake_scheduler, fake_reservations, "carme-alice-7", ("gpu01",), gpus=1)
    session = {
        "app": "jupyterlab",
        "image": "pytorch",
        "gpus": "1",
        "time_minutes": "30",
        "reservation": "carme-alice-7",
    }
    resp = post(client, "/sessions/new", session)  # the default CPUs (more than 2) are lowered to the reservation's
    assert resp.status_code == 302, resp.get_data(as_text=True)
    assert fake_scheduler.submitted[-1][2]["job"]["cpus_per_task"] == 2
    for field, value, words in [("cpus", "3", "CPUs: reservation carme-alice-7 holds 2 CPU(s)"),
                                ("gpus", "2", "GPUs: reservation carme-alice-7 holds 1 GPU(s)"),
                                ("nodes", "2", "reservation carme-alice-7 holds GPUs of 1 node(s)")]:  # fmt: skip
        resp = post(client, "/sessions/new", {**session, field: value})
        assert resp.status_code == 400 and words in resp.get_data(as_text=True), resp.get_data(as_text=True)
    assert len(fake_scheduler.submitted) == 1
    raw = {"name": "carme-alice-7", "users": "alice", "node_list": "gpu01", "node_count": 1,
           "start_time": 1_900_000_000, "end_time": 1_900_007_200, "tres": "cpu=2,gres/gpu=1"}  # fmt: skip
    assert (parse_reservation(raw).gpus, parse_reservation(raw).cpus) == (1, 2)
    assert parse_reservation({**raw, "tres": "cpu=8"}).cpus == 0  # a whole node: no CPU cap


def test_a_several_node_request_on_24_11_gets_each_nodes_cpu_share_and_needs_every_node() -> None:
    runner = Scontrol(reserved="cpu=16,gres/gpu=2")  # the stand-in shows NodeCnt=1: one of the two nodes
    with pytest.raises(SlurmError, match="Requested nodes are busy: Slurm found 1 of the 2 nodes"):
        reservations(runner).create(spec(gpus=2, nodes=2))
    created = runner.created()[0]
    assert created[-3:] == ["NodeCnt=2", "TRES=cpu=16,gres/gpu=2", "PartitionName=interactive"]  # 2 x gpu01's 8
    assert ["delete", "ReservationName=carme-alice-3"] in runner.calls


def test_a_two_node_session_fits_a_two_node_gpu_reservation(
    app: Flask, client: Any, fake_scheduler: FakeScheduler, fake_reservations: FakeReservations
) -> None:
    """2 GPUs and 2 CPUs on two nodes (24.11's NodeCnt=2 with a TRES): 1 GPU per node fits, CPUs per node lowered."""
    nodes = ("gpu01", "gpu02")
    alice_in_gpu_reservation(app, client, fake_scheduler, fake_reservations, "carme-alice-8", nodes, gpus=2)
    session = {"app": "jupyterlab", "image": "pytorch", "gpus": "1", "nodes": "2", "time_minutes": "30",
               "reservation": "carme-alice-8"}  # fmt: skip
    resp = post(client, "/sessions/new", session)
    assert resp.status_code == 302, resp.get_data(as_text=True)
    assert fake_scheduler.submitted[-1][2]["job"]["cpus_per_task"] == 1
    resp = post(client, "/sessions/new", {**session, "gpus": "2"})
    assert resp.status_code == 400 and "holds 2 GPU(s)" in resp.get_data(as_text=True)
