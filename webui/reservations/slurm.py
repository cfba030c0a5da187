# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm reservations: read through slurmrestd, created and deleted with ``scontrol`` (issue 16).

Slurm is the source of truth: the calendar shows what slurmrestd's ``GET reservations`` returns (cached like the
rest of the scheduler state), so a reservation deleted with ``scontrol`` is gone from it at the next refresh.

slurmrestd 22.05 has no endpoint that creates reservations, so an approved request becomes one through
``scontrol create reservation`` with an argv list (no shell), run as the portal's own Unix user, which must be a Slurm
Operator (``slurm_users``: ``admin_level: Operator``; the admin stop of sessions needs the same). Slurm 22.05 refuses
GPUs in a reservation's TRES ("TRES type 'gres/gpu' not supported with reservations", checked on the host Slurm in
tests/integration/test_reservations.py): a reservation holds whole nodes (``NodeCnt``), and all their GPUs.

Slurm 23.02 and later reserve GPUs (``TRES=cpu=C,gres/gpu=G``). The portal asks ``scontrol --version`` once per process
(:meth:`SlurmReservations.slurm_version`) and, from 23.02 on, reserves a request's GPUs and the CPUs that go with them
(:func:`cpu_share`): without ``cpu=`` Slurm 24.11 reserved every core bound to the GPU, all of the node's where
gres.conf binds GPUs to no cores (tried by hand on the 24.11 test node). A request for several nodes adds ``NodeCnt``
to the same TRES (its GPUs are all nodes' together). It must: on the Debian 13 demo, Slurm 24.11 created a whole-node
``NodeCnt=2`` reservation over a window where another reservation held a GPU and both cores of node1, so both claimed
them; a TRES with GPUs is refused there ("Requested nodes are busy"). What 24.11 makes of the argv is tested in
tests/integration/test_reservations_trixie.py and tests/e2e/test_reservations_e2e.py on the Debian 13 demo.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import time
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol

from carme_runtime import slurmrest
from carme_runtime.command_runner import RC_NOT_FOUND
from carme_runtime.command_runner import RC_TIMEOUT
from carme_runtime.command_runner import SubprocessRunner
from carme_runtime.hostlist import expand_hostlist
from carme_runtime.slurm_formats import count_gpus
from webui.caches import SnapshotCache
from webui.slurm.client import SlurmClient
from webui.slurm.errors import SlurmError

#: Names the portal gives its reservations: ``carme-<user>-<request id>``.
NAME_PATTERN = re.compile(r"^carme-([a-z_][a-z0-9_.-]{0,31})-(\d{1,12})$")
log = logging.getLogger(__name__)
SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:,\[\]-]{1,200}$")
#: The first Slurm whose reservations hold GPUs (``TRES=gres/gpu=N``); 22.05 refuses them
GPU_RESERVATIONS_SINCE = (23, 2)
#: The version taken where none is known: 22.05, whose reservations hold whole nodes
WHOLE_NODES = (22, 5)


@dataclass(frozen=True)
class Reservation:
    """One Slurm reservation, as slurmrestd reports it."""

    name: str
    start: dt.datetime
    end: dt.datetime
    users: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    node_count: int = 0
    partition: str = ""
    flags: tuple[str, ...] = ()
    #: GPUs its TRES names (``gres/gpu=N``); 0 on a whole-node reservation of Slurm 22.05, whose TRES names none
    gpus: int = 0
    #: CPUs a GPU reservation holds (its TRES's ``cpu=N``); 0 where it holds whole nodes
    cpus: int = 0

    def is_for(self, username: str) -> bool:
        return username in self.users

    def active(self, now: dt.datetime) -> bool:
        return self.start <= now < self.end

    def request_id(self) -> int | None:
        """The portal request this reservation was made for (from its name), if any."""
        match = NAME_PATTERN.match(self.name)
        return int(match.group(2)) if match else None


@dataclass(frozen=True)
class ReservationState:
    reservations: tuple[Reservation, ...] = ()
    fetched_at: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class ReservationSpec:
    """What ``scontrol create reservation`` is asked for."""

    name: str
    user: str
    start: dt.datetime
    end: dt.datetime
    node_count: int
    partition: str | None = None
    #: GPUs asked for: reserved as such (with ``cpus`` CPUs) from Slurm 23.02 on; 0: whole nodes on any version
    gpus: int = 0
    cpus: int = 0


def cpu_tres(tres: str) -> int:
    """The CPUs a TRES string names (``cpu=2,gres/gpu=1`` -> 2; 0 when it names none)."""
    found = re.search(r"(?:^|,)cpu=(\d+)", tres or "")
    return int(found.group(1)) if found else 0


def parse_version(text: str) -> tuple[int, int]:
    """``slurm 22.05.8`` or ``slurm-wlm 24.11.5`` (``scontrol --version``) as (major, minor)."""
    found = re.search(r"\b(\d{2})\.(\d{2})\.", text)
    if not found:
        raise SlurmError(f"cannot read Slurm's version from {text.strip()!r}")
    return int(found.group(1)), int(found.group(2))


def reserves_gpus(spec: ReservationSpec, version: tuple[int, int]) -> bool:
    """Whether ``spec`` becomes a GPU reservation on Slurm ``version`` (else whole nodes, as on 22.05)."""
    return version >= GPU_RESERVATIONS_SINCE and spec.gpus > 0


def _epoch(value: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(value, dt.UTC)


def parse_reservation(raw: Mapping[str, Any]) -> Reservation:
    """A reservation as any slurmrestd version prints it (:func:`carme_runtime.slurmrest.reservation_record`)."""
    rec = slurmrest.reservation_record(raw)
    nodes = rec["node_list"]
    gpus = count_gpus(rec["tres"])
    return Reservation(
        name=rec["name"],
        start=_epoch(rec["start_time"]),
        end=_epoch(rec["end_time"]),
        users=tuple(rec["users"]),
        nodes=tuple(expand_hostlist(nodes)) if nodes and nodes != "(null)" else (),
        node_count=rec["node_count"],
        partition=rec["partition"],
        flags=tuple(str(f).upper() for f in rec["flags"]),
        gpus=gpus,
        cpus=cpu_tres(rec["tres"]) if gpus else 0,
    )


def _slurm_time(when: dt.datetime) -> str:
    """scontrol reads times in the local time zone of the host it runs on (the portal's, next to slurmctld)."""
    return when.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def create_argv(spec: ReservationSpec, now: dt.datetime, version: tuple[int, int] = WHOLE_NODES) -> list[str]:
    """The ``scontrol create reservation`` arguments for ``spec`` on Slurm ``version`` (each value checked: no spaces,
    no ``=``): whole nodes (``NodeCnt``), or from 23.02 on the request's GPUs and CPUs (``TRES``, with ``NodeCnt`` for
    several nodes)."""
    values = [spec.name, spec.user] + ([spec.partition] if spec.partition else [])
    for value in values:
        if not SAFE_VALUE.fullmatch(value):
            raise SlurmError(f"refusing to pass {value!r} to scontrol")
    start = "now" if spec.start <= now else _slurm_time(spec.start)
    argv = [
        "create",
        "reservation",
        f"ReservationName={spec.name}",
        f"StartTime={start}",
        f"EndTime={_slurm_time(spec.end)}",
        f"Users={spec.user}",
    ]
    if reserves_gpus(spec, version):
        cpus = f"cpu={int(spec.cpus)}," if spec.cpus > 0 else ""
        argv += [f"NodeCnt={int(spec.node_count)}"] if spec.node_count > 1 else []
        argv.append(f"TRES={cpus}gres/gpu={int(spec.gpus)}")
    else:
        argv.append(f"NodeCnt={int(spec.node_count)}")
    if spec.partition:
        argv.append(f"PartitionName={spec.partition}")
    return argv


#: Names the portal gives its maintenance windows: ``maint-YYYYmmddHHMM`` (the start, UTC).
MAINTENANCE_NAME = re.compile(r"^maint-\d{12}$")


def maintenance_argv(name: str, start: dt.datetime, end: dt.datetime, now: dt.datetime) -> list[str]:
    """A maintenance window: every node, for root only, flagged ``MAINT`` (Slurm holds a job that would run into it,
    ``ReqNodeNotAvail, Reserved for maintenance``) and ``IGNORE_JOBS`` (running jobs do not stop its creation)."""
    if not MAINTENANCE_NAME.fullmatch(name):
        raise SlurmError(f"refusing to pass {name!r} to scontrol")
    start_text = "now" if start <= now else _slurm_time(start)
    return ["create", "reservation", f"ReservationName={name}", f"StartTime={start_text}",
            f"EndTime={_slurm_time(end)}", "Nodes=ALL", "Users=root", "Flags=MAINT,IGNORE_JOBS"]  # fmt: skip


if TYPE_CHECKING:
    from carme_runtime.command_runner import Runner


class Reservations(Protocol):
    def state(self, max_age: float | None = None) -> ReservationState: ...

    def create(self, spec: ReservationSpec) -> str:
        """Create the reservation; :class:`SlurmError` carries Slurm's own refusal."""
        ...

    def last(self, error: str) -> ReservationState:
        """What is known without asking Slurm, flagged with ``error``."""
        ...

    def create_maintenance(self, name: str, start: dt.datetime, end: dt.datetime) -> str:
        """Create a maintenance window (:func:`maintenance_argv`); :class:`SlurmError` carries Slurm's refusal."""
        ...

    def delete(self, name: str) -> None: ...


def cpu_share(show_node: str, partition: str | None, wanted: int) -> int:
    """The CPUs that go with ``wanted`` GPUs, from ``scontrol --oneliner show node``: their share of a node's CPUs
    (``CPUTot`` times ``wanted`` over its ``Gres=gpu[:type]:N``), the smallest among the nodes of ``partition`` (any
    partition when ``None``) that have that many GPUs (else among all its GPU nodes), at least 1."""
    nodes = []
    for line in show_node.splitlines():
        fields = dict(token.split("=", 1) for token in line.split() if "=" in token)
        gpus = count_gpus(fields.get("Gres"))
        in_partition = partition is None or partition in fields.get("Partitions", "").split(",")
        if gpus > 0 and in_partition and fields.get("CPUTot", "").isdigit():
            nodes.append((int(fields["CPUTot"]), gpus))
    fitting = [(cpus, gpus) for cpus, gpus in nodes if gpus >= wanted] or nodes
    return max(1, min((min(cpus, cpus * wanted // gpus) for cpus, gpus in fitting), default=1))


def _shortfall(spec: ReservationSpec, shown: str, *, gpus: bool) -> str:
    """Why the reservation Slurm shows (``scontrol --oneliner show reservation``) is smaller than ``spec``; ""."""
    found = re.search(r"\bNodeCnt=(\d+)\b", shown)
    counts = [((int(found.group(1)) if found else 0), spec.node_count, "nodes")]
    if gpus:
        tres = re.search(r"\bTRES=(\S+)", shown)
        counts.insert(0, ((count_gpus(tres.group(1)) if tres else 0), spec.gpus, "GPUs"))
    for got, wanted, what in counts:
        if got < wanted:
            return (f"Requested {what} are busy: Slurm found {got} of the {wanted} {what} asked for free in that "
                    "window, so nothing was reserved")  # fmt: skip
    return ""


def _flagged(last: ReservationState | None, exc: Exception) -> ReservationState:
    """What a failed read serves: the last reservations known, flagged with the error."""
    old = last or ReservationState()
    return ReservationState(old.reservations, old.fetched_at, error=str(exc))


@dataclass
class SlurmReservations:
    """Reads through slurmrestd as the service user, at most once per ``cache_seconds``; writes with scontrol, run by
    carme_runtime's command runner (an argv list, no shell)."""

    client: SlurmClient
    service_user: str
    cache_seconds: float
    scontrol: Sequence[str] = ("scontrol",)
    slurm_conf: str | None = None
    runner: Runner = field(default_factory=lambda: SubprocessRunner(timeout=30))
    _cache: SnapshotCache[ReservationState] = field(init=False, repr=False)
    _version: tuple[int, int] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._cache = SnapshotCache(self._fetch, self.cache_seconds, on_error=_flagged, errors=(SlurmError,))

    def _fetch(self) -> ReservationState:
        records = self.client.reservations(self.service_user)
        return ReservationState(tuple(parse_reservation(r) for r in records), time.time())

    def state(self, max_age: float | None = None) -> ReservationState:
        return self._cache.get(max_age)

    def last(self, error: str) -> ReservationState:
        old = self._cache.last() or ReservationState()
        return ReservationState(old.reservations, old.fetched_at, error=error)

    def invalidate(self) -> None:
        self._cache.invalidate()

    def _scontrol(self, args: Sequence[str]) -> str:
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        try:
            rc, out, err = self.runner([*self.scontrol, *args], env=env)
        except OSError as exc:
            raise SlurmError(f"scontrol could not be run: {exc}") from exc
        if rc in (RC_NOT_FOUND, RC_TIMEOUT):
            raise SlurmError(f"scontrol could not be run: {err.strip()}")
        if rc != 0:
            # Slurm's own words (overlap, nodes busy), shown to the user as they are (templates escape them).
            raise SlurmError((err or out or "scontrol failed").strip())
        return out.strip()

    def slurm_version(self) -> tuple[int, int]:
        """The cluster's Slurm (``scontrol --version``), asked once per process. What scontrol cannot tell is taken
        as 22.05 (whole nodes, which every version accepts), logged, not kept: asked again the next time."""
        if self._version is None:
            try:
                self._version = parse_version(self._scontrol(["--version"]))
            except SlurmError as exc:
                log.warning("Slurm's version unknown (%s): reserving whole nodes", exc)
                return WHOLE_NODES
        return self._version

    def cpu_share(self, partition: str | None, gpus: int) -> int:
        """The CPUs that go with ``gpus`` GPUs in ``partition`` (:func:`cpu_share`), read from Slurm now."""
        return cpu_share(self._scontrol(["--oneliner", "show", "node"]), partition, gpus)

    def create(self, spec: ReservationSpec) -> str:
        """Create the reservation and check what Slurm made of it.

        Slurm 22.05 does not refuse ``NodeCnt=2`` over a window where only one node is free: it reserves the one it
        finds (measured on the demo). A reservation smaller than the request is deleted again and refused with the
        reason Slurm gives when it refuses outright. A spec without GPUs reserves whole nodes without asking the
        version."""
        version = self.slurm_version() if spec.gpus > 0 else WHOLE_NODES
        if reserves_gpus(spec, version):  # each node's share of the GPUs, with its share of that node's CPUs
            per_node = -(-spec.gpus // spec.node_count)
            spec = replace(spec, cpus=self.cpu_share(spec.partition, per_node) * spec.node_count)
        out = self._scontrol(create_argv(spec, dt.datetime.now(dt.UTC), version))
        self.invalidate()
        shown = self._scontrol(["--oneliner", "show", "reservation", spec.name])
        short = _shortfall(spec, shown, gpus=reserves_gpus(spec, version))
        if short:
            self.delete(spec.name)
            raise SlurmError(short)
        return out

    def create_maintenance(self, name: str, start: dt.datetime, end: dt.datetime) -> str:
        out = self._scontrol(maintenance_argv(name, start, end, dt.datetime.now(dt.UTC)))
        self.invalidate()
        return out

    def delete(self, name: str) -> None:
        if not SAFE_VALUE.fullmatch(name):
            raise SlurmError(f"refusing to pass {name!r} to scontrol")
        self._scontrol(["delete", f"ReservationName={name}"])
        self.invalidate()


def from_config(config: Mapping[str, Any]) -> Reservations:
    ready = config.get("RESERVATIONS")
    if ready is not None:
        return ready  # type: ignore[no-any-return]
    from webui.slurm.client import make_client

    return SlurmReservations(
        make_client(config),
        service_user=str(config["SLURM_SERVICE_USER"]),
        cache_seconds=float(config["SCHEDULER_CACHE_SECONDS"]),
        scontrol=tuple(config["SLURM_SCONTROL"]),
        slurm_conf=config.get("SLURM_CONF_FILE") or None,
    )
