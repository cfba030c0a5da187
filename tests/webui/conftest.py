# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures for portal tests (flaskr style): app, client, runner, login helpers, fake scheduler.

LDAP tests use a real slapd (``tests/fixtures/slapd.py``). Slurm-facing code is
tested against closed 127.0.0.1 ports and a small HTTP stand-in for slurmrestd
until the host Slurm fixture (``tests/fixtures/hostslurm.py``) exists; the
portal logic above the scheduler uses :class:`FakeScheduler` through the
``SCHEDULER`` setting.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from flask.testing import FlaskCliRunner

from webui import create_app
from webui.admin.commands import upgrade_database
from webui.auth.logins import start_login
from webui.extensions import db
from webui.models import ImageCatalog
from webui.models import PortalSession
from webui.models import User
from webui.reservations.slurm import Reservation
from webui.reservations.slurm import ReservationSpec
from webui.reservations.slurm import ReservationState
from webui.reservations.slurm import maintenance_argv
from webui.reservations.slurm import reserves_gpus
from webui.slurm.errors import SlurmError
from webui.slurm.limits import AssocLimits
from webui.slurm.limits import QosLimits
from webui.slurm.limits import relevant
from webui.slurm.records import AccountJob
from webui.slurm.records import SlurmProject
from webui.slurm.session_spec import SessionSpec
from webui.slurm.session_spec import build_payload
from webui.slurm.session_spec import load_apps
from webui.slurm.state import ClusterState
from webui.slurm.state import Endpoint
from webui.slurm.state import Job
from webui.slurm.state import Node
from webui.slurm.state import Partition

ROOT = Path(__file__).resolve().parents[2]
try:
    from tests.fixtures.slapd import SlapdServer
    from tests.fixtures.slapd import slapd_server
except ModuleNotFoundError:  # --import-mode=importlib does not put the repo root on sys.path
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.slapd import SlapdServer
    from tests.fixtures.slapd import slapd_server

__all__ = ["SlapdServer", "slapd_server"]

SPECIAL = 'it\'s "quoted" $(touch /tmp/pwned); rm -rf / ;\nsecond line <b>bold</b>'


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class FakeScheduler:
    """In-memory Scheduler: jobs as Slurm would report them; cancel obeys Slurm's ownership rule."""

    def __init__(self, admin_user: str = "carme-portal") -> None:
        self.admin_user = admin_user
        self.nodes = [
            Node(
                name="gpu01",
                state="idle",
                gpus_total=2,
                gpus_used=0,
                partitions=("gpu",),
                address="10.0.0.11",
            )
        ]
        self.partitions = [Partition(name="gpu", nodes=("gpu01",), max_time_minutes=480, state="up", is_default=True)]
        self.jobs: dict[int, Job] = {}
        self.submitted: list[tuple[SessionSpec, str, dict[str, Any]]] = []
        self.cancelled: list[tuple[int, str]] = []
        self.error: str | None = None
        self.app_up = True
        self.next_id = 1000
        self.queries = 0

    def state(self, max_age: float | None = None) -> ClusterState:
        self.queries += 1
        if self.error:
            return ClusterState(error=self.error)
        # as a real fetch: "as of" now (a session created after this snapshot is not ended for missing from it)
        return ClusterState(
            tuple(self.jobs.values()), tuple(self.nodes), tuple(self.partitions), fetched_at=time.time()
        )

    def submit(self, spec: SessionSpec, secret: str) -> int:
        payload = build_payload(spec, secret, load_apps(()), spec.limits)  # the real carme_runtime payload
        self.next_id += 1
        self.submitted.append((spec, secret, payload))
        self.jobs[self.next_id] = Job(
            job_id=self.next_id,
            user=spec.user,
            name=f"carme-{spec.app}",
            state="PENDING",
            partition=spec.partition or "",
            gpus=spec.gpus,
            time_limit_minutes=spec.time_minutes,
        )
        return self.next_id

    def run(self, job_id: int, *, ready: bool = True, host: str = "10.0.0.11", port: int = 41234) -> None:
        job = self.jobs[job_id]
        comment = f"carme:v1;app=jupyterlab;host={host};port={port};state={'ready' if ready else 'starting'}"
        self.jobs[job_id] = Job(
            job_id=job.job_id,
            user=job.user,
            name=job.name,
            state="RUNNING",
            partition=job.partition,
            gpus=job.gpus,
            nodes=("gpu01",),
            start_time=int(dt.datetime.now(dt.UTC).timestamp()),
            time_limit_minutes=job.time_limit_minutes,
            comment=comment,
        )

    def cancel(self, job_id: int, *, as_user: str) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            raise SlurmError("Slurm reported: Invalid job id specified")
        if as_user not in (job.user, self.admin_user):
            raise SlurmError("Slurm reported: Access/permission denied")
        self.cancelled.append((job_id, as_user))
        del self.jobs[job_id]

    def gpu_hours_used(self, user: str, since: dt.datetime) -> float | None:
        return 1.5

    #: Slurm's accounting, for job_history (tests set it per instance)
    accounting: tuple[AccountJob, ...] = ()

    def job_history(self, user: str, since: dt.datetime) -> list[AccountJob]:
        if self.error:
            raise SlurmError(self.error)
        mine = [j for j in self.accounting if j.user == user and (not j.end_time or j.end_time >= since.timestamp())]
        return sorted(mine, key=lambda j: j.job_id, reverse=True)

    #: Slurm's accounts as projects (tests set it per instance)
    project_list: tuple[SlurmProject, ...] = ()

    def projects(self, max_age: float | None = None) -> list[SlurmProject]:
        if self.error:
            raise SlurmError(self.error)
        return list(self.project_list)

    def project_jobs(self, account: str, since: dt.datetime, until: dt.datetime) -> list[AccountJob]:
        if self.error:
            raise SlurmError(self.error)
        lo, hi = since.timestamp(), until.timestamp()
        ran = [j for j in self.accounting if j.account == account and j.start_time and lo <= j.start_time < hi]
        return sorted(ran, key=lambda j: j.job_id, reverse=True)

    #: Slurm's association and QOS records with their limits (tests set them per instance: set_slurm_limits)
    association_list: tuple[AssocLimits, ...] = ()
    qos_list: tuple[QosLimits, ...] = ()

    def associations_of(self, user: str) -> list[AssocLimits]:
        if self.error:
            raise SlurmError(self.error)
        return relevant(self.association_list, user)

    def qos_limits(self) -> dict[str, QosLimits]:
        if self.error:
            raise SlurmError(self.error)
        return {q.name: q for q in self.qos_list}

    def app_answers(self, endpoint: Endpoint, path: str, headers: Mapping[str, str], *, patient: bool = False) -> bool:
        return self.app_up

    def verify_endpoint(self, endpoint: Endpoint, job_id: int, secret: str, *, patient: bool = False) -> bool:
        return self.app_up  # tests/webui/test_proxy_endpoint.py challenges real session fronts

    def queries_issued(self) -> int:
        return self.queries


def set_slurm_limits(sched: FakeScheduler, user: str, account: str = "research", **limits: int | None) -> None:
    """Give ``user`` an association in ``account`` with ``limits`` (fields of AssocLimits: gpus_per_job, max_jobs,
    gpu_minutes, max_wall_minutes, gpus_total), replacing their earlier one there, as the inventory would in Slurm."""
    kept = tuple(a for a in sched.association_list if not (a.user == user and a.account == account))
    sched.association_list = (*kept, AssocLimits(account=account, user=user, is_default=True, **limits))  # type: ignore[arg-type]


@pytest.fixture
def fake_scheduler() -> FakeScheduler:
    return FakeScheduler()


class FakeReservations:
    """In-memory Slurm reservations (webui.reservations.slurm.Reservations): ``create`` refuses an overlap on a
    node the way Slurm does (its message is the one Slurm 22.05 gives, tests/integration/test_reservations.py).

    ``version`` (22.05 unless set) decides like the real one (webui.reservations.slurm.reserves_gpus): from 23.02 on a
    one-node request holds its GPUs, and a node takes reservations until its ``gpus_per_node`` are reserved
    (tests/integration/test_reservations_trixie.py shows Slurm 24.11 doing so); a whole-node one holds them all."""

    def __init__(self, nodes: tuple[str, ...] = ("gpu01",), gpus_per_node: int = 2) -> None:
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.version = (22, 5)
        self.items: dict[str, Reservation] = {}
        self.created: list[ReservationSpec] = []
        self.error: str | None = None
        self.last_errors: list[str] = []  # calls of last(): the scheduler was failing, Slurm was not asked

    def state(self, max_age: float | None = None) -> ReservationState:
        if self.error:
            return ReservationState(error=self.error)
        return ReservationState(tuple(self.items.values()), fetched_at=time.time())  # read now, as Slurm would

    def last(self, error: str) -> ReservationState:
        self.last_errors.append(error)
        return ReservationState(tuple(self.items.values()), fetched_at=1.0, error=error)

    def _free_gpus(self, node: str, spec: ReservationSpec) -> int:
        overlapping = [r for r in self.items.values() if node in r.nodes and r.start < spec.end and spec.start < r.end]
        return self.gpus_per_node - sum(r.gpus or self.gpus_per_node for r in overlapping)

    def create(self, spec: ReservationSpec) -> str:
        gpus = spec.gpus if reserves_gpus(spec, self.version) else 0
        need = gpus or self.gpus_per_node  # a whole node: all its GPUs free
        free = [n for n in self.nodes if self._free_gpus(n, spec) >= need]
        if len(free) < spec.node_count:
            raise SlurmError("Error creating the reservation: Requested nodes are busy")
        self.created.append(spec)
        self.items[spec.name] = Reservation(
            spec.name,
            spec.start,
            spec.end,
            users=(spec.user,),
            nodes=tuple(free[: spec.node_count]),
            node_count=spec.node_count,
            partition=spec.partition or "",
            gpus=gpus,
        )
        return f"Reservation created: {spec.name}"

    def create_maintenance(self, name: str, start: dt.datetime, end: dt.datetime) -> str:
        """As Slurm: every node, flagged MAINT (maintenance_argv checks the name as the real one does)."""
        maintenance_argv(name, start, end, dt.datetime.now(dt.UTC))
        self.items[name] = Reservation(
            name, start, end, users=("root",), nodes=self.nodes, flags=("MAINT", "IGNORE_JOBS")
        )
        return f"Reservation created: {name}"

    def delete(self, name: str) -> None:
        if name not in self.items:
            raise SlurmError("Reservation not found")
        del self.items[name]


@pytest.fixture
def fake_reservations() -> FakeReservations:
    return FakeReservations()


def portal_db() -> str:
    """Where the portal tests keep their data: ``mariadb`` (a fresh database per test on the host fixture's MariaDB,
    the one slurmdbd uses, with a database user of its own), as deployments run, or ``sqlite`` (a file per test).

    ``CARME_PORTAL_DB`` chooses; left unset, MariaDB wherever a missing component fails (CI, CARME_REQUIRED=1, so
    ``make test``), SQLite otherwise (quick local runs, no root).
    """
    from tests.conftest import components_required

    return os.environ.get("CARME_PORTAL_DB") or ("mariadb" if components_required() else "sqlite")


@pytest.fixture
def portal_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    # the outage tests take the database away by moving its file: they keep a SQLite file (marker sqlite_file)
    if portal_db() != "mariadb" or request.node.get_closest_marker("sqlite_file"):
        yield f"sqlite:///{tmp_path / 'portal.db'}"
        return
    cluster = request.getfixturevalue("host_slurm")
    name = "carme_portal_test_" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12]
    url = cluster.create_database(name, "carme_portal_test", "portal-test-password-0123456789")
    yield url
    cluster.drop_database(name)


@pytest.fixture
def base_config(tmp_path: Path, portal_db_url: str) -> dict[str, Any]:
    key = tmp_path / "jwt_hs256.key"
    key.write_bytes(b"k" * 32)
    key.chmod(0o600)
    (tmp_path / "apps.d").mkdir()
    return {
        "TESTING": True,
        "SECRET_KEY": "test-secret-key-0123456789",
        "SQLALCHEMY_DATABASE_URI": portal_db_url,
        "LDAP_URI": f"ldap://127.0.0.1:{closed_port()}",
        "LDAP_ALLOW_PLAINTEXT": True,
        "LOGIN_MIN_RESPONSE_SECONDS": 0.0,
        "LOGIN_BACKOFF_BASE_SECONDS": 0.0,
        "LOGIN_BACKOFF_MAX_SECONDS": 0.0,
        "SLURMRESTD_URL": f"http://127.0.0.1:{closed_port()}",
        "SLURM_JWT_KEY_FILE": str(key),
        "SLURM_TIMEOUT_SECONDS": 2.0,
        "CARME_APP_DIRS": (str(tmp_path / "apps.d"),),
    }


def make_app(config: Mapping[str, Any]) -> Flask:
    app = create_app(config)
    with app.app_context():
        upgrade_database()
        db.session.add(
            ImageCatalog(
                name="pytorch",
                image="/images/pytorch.sif",
                kind="image",
                description="PyTorch",
                allowed_apps=["jupyterlab", "code-server"],
                enabled=True,
            )
        )
        db.session.commit()
    return app


@pytest.fixture
def app(
    base_config: dict[str, Any], fake_scheduler: FakeScheduler, fake_reservations: FakeReservations
) -> Iterator[Flask]:
    application = make_app({**base_config, "SCHEDULER": fake_scheduler, "RESERVATIONS": fake_reservations})
    yield application
    with application.app_context():
        db.engine.dispose()


@pytest.fixture
def ldap_app(base_config: dict[str, Any], fake_scheduler: FakeScheduler, slapd_server: SlapdServer) -> Iterator[Flask]:
    application = make_app({**base_config, **slapd_server.portal_config(), "SCHEDULER": fake_scheduler})
    yield application
    with application.app_context():
        db.engine.dispose()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def runner(app: Flask) -> FlaskCliRunner:
    return app.test_cli_runner()


def csrf_token(client: FlaskClient) -> str:
    page = client.get("/auth/login").get_data(as_text=True)
    match = re.search(r'name="csrf-token" content="([^"]+)"', page)
    assert match, "no CSRF token in the login page"
    return match.group(1)


def post(client: FlaskClient, url: str, data: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """POST a form with a valid CSRF token, as a browser would."""
    form = {"csrf_token": csrf_token(client), **(data or {})}
    # The test client speaks https (PREFERRED_URL_SCHEME): Flask-WTF checks the Referer, as browsers send it.
    headers = {"Referer": "https://localhost/", **kwargs.pop("headers", {})}
    return client.post(url, data=form, headers=headers, **kwargs)


def log_in_as(app: Flask, client: FlaskClient, username: str, *, admin: bool = False) -> None:
    """Skip password + TOTP (tested in test_auth.py): a session as the TOTP step leaves it."""
    with app.app_context():
        user = db.session.query(User).filter_by(username=username).one_or_none()
        if user is None:
            user = User(
                username=username,
                totp_confirmed=True,
                totp_secret="JBSWY3DPEHPK3PXP",
                totp_last_step=0,
                failed_logins=0,
                session_version=1,
            )
            db.session.add(user)
            db.session.commit()
        with app.test_request_context("/"):
            token = start_login(user, is_admin=admin)
        db.session.commit()
    with client.session_transaction() as sess:
        sess.clear()
        sess["login"] = token


def add_session(app: Flask, sched: FakeScheduler, owner: str, *, running: bool = True, ready: bool = True) -> int:
    """A portal session owned by ``owner`` with its (fake) Slurm job."""
    sched.next_id += 1
    job_id = sched.next_id
    sched.jobs[job_id] = Job(
        job_id=job_id,
        user=owner,
        name="carme-jupyterlab",
        state="PENDING",
        partition="gpu",
        gpus=1,
        time_limit_minutes=60,
    )
    if running:
        sched.run(job_id, ready=ready)
    with app.app_context():
        db.session.add(
            PortalSession(
                job_id=job_id,
                owner=owner,
                app="jupyterlab",
                image="pytorch",
                gpus=1,
                partition="gpu",
                time_minutes=60,
                secret=f"secret-{owner}-{job_id}-xxxxxxxxxxxxxxxx",
                # submitted a while ago: a snapshot within a second of the submission may not list the job yet
                # (webui.sessions.records.CREATED_AT_PRECISION_S), and these sessions stand for ones Slurm already knows
                created_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30),
            )
        )
        db.session.commit()
    return job_id
