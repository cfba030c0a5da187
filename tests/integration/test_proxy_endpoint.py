# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal proxies only to the session's own front, on a real Slurm (``host_slurm``) with a real JupyterLab.

alice's JupyterLab session is started by ``carme-launch`` (sbatch path, ``none`` runtime) and publishes its front.
bob, with a job on the same node, rewrites his job comment with ``scontrol update`` (as himself) to alice's port
and then to slurmd's: the portal's decision (:func:`webui.sessions.proxy.proxy_target`, reading the real job list from
slurmrestd and challenging the real endpoints) authorises alice's front for alice and nothing for bob.
"""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask import Flask
from werkzeug.exceptions import HTTPException

from carme_runtime import front
from carme_runtime.apps import load_apps
from carme_runtime.sessions import SessionRequest
from tests.fixtures.carmeenvs import ensure_jupyter_env
from tests.fixtures.carmeenvs import ensure_runtime_env
from tests.fixtures.carmeenvs import launch_on_path
from tests.fixtures.hostslurm import HostSlurm
from tests.integration.test_runtime_sessions import UserRunner
from tests.integration.test_runtime_sessions import wait_ready
from tests.runtime.sbatch_submit import submit_with_sbatch

pytestmark = [pytest.mark.host, pytest.mark.slow]


@dataclass
class Sessions:
    alice_job: int
    alice_secret: str
    host: str
    port: int
    bob_job: int
    bob_secret: str


def http_status(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


@pytest.fixture(scope="module")
def sessions(host_slurm: HostSlurm) -> Iterator[Sessions]:
    env = ensure_jupyter_env()
    runtime = ensure_runtime_env()
    app = load_apps([])["jupyterlab"]
    jobs: list[int] = []
    with launch_on_path(runtime):
        workdir = host_slurm.user_dir("alice")
        request = SessionRequest(
            user="alice", app=app.name, image=str(env), cpus=1, mem_mb=1000, time_minutes=15, workdir=str(workdir)
        )
        alice_secret = secrets.token_urlsafe(32)
        try:
            alice_job = submit_with_sbatch(request, app, "none", alice_secret, UserRunner(host_slurm, "alice"))
            jobs.append(alice_job)
            parsed = wait_ready(host_slurm, alice_job, workdir / f"carme-{app.name}-{alice_job}.out")
            bob_job = host_slurm.sbatch("bob", "sleep 600\n", "--mem=100", "--time=10")
            jobs.append(bob_job)
            yield Sessions(
                alice_job=alice_job,
                alice_secret=alice_secret,
                host=parsed["host"],
                port=int(parsed["port"]),
                bob_job=bob_job,
                bob_secret=secrets.token_urlsafe(32),
            )
        finally:
            for job in jobs:
                host_slurm.run(["scancel", str(job)], check=False)
            for job in jobs:
                host_slurm.wait_job(job, timeout=120)


@pytest.fixture(scope="module")
def portal(host_slurm: HostSlurm, sessions: Sessions, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    """The portal's app on the real slurmrestd (its real SlurmScheduler), with both sessions in its database."""
    from webui import create_app
    from webui.admin.commands import upgrade_database
    from webui.extensions import db
    from webui.models import PortalSession

    tmp = tmp_path_factory.mktemp("portal")
    (tmp / "apps.d").mkdir()
    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": "integration-secret-key-0123456789",
            "SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp / 'portal.db'}",
            "SLURMRESTD_URL": host_slurm.restd_url,
            "SLURM_JWT_KEY_FILE": str(host_slurm.jwt_key),
            "SLURM_SERVICE_USER": "alice",
            "SCHEDULER_CACHE_SECONDS": 0.2,
            "PROXY_RECHECK_SECONDS": 0.1,
            "READINESS_CACHE_SECONDS": 0.0,
            "CARME_APP_DIRS": (str(tmp / "apps.d"),),
        }
    )
    with app.app_context():
        upgrade_database()
        for job, owner, secret in (
            (sessions.alice_job, "alice", sessions.alice_secret),
            (sessions.bob_job, "bob", sessions.bob_secret),
        ):
            db.session.add(
                PortalSession(
                    job_id=job,
                    owner=owner,
                    app="jupyterlab",
                    image="jupyter",
                    gpus=0,
                    partition="",
                    time_minutes=15,
                    secret=secret,
                )
            )
        db.session.commit()
    yield app
    with app.app_context():
        db.engine.dispose()


def decide(app: Flask, user: str, job_id: int) -> Any:
    """The portal's proxy decision for ``user``: the ProxyTarget, or the HTTP status it aborts with."""
    from webui.auth.logins import CurrentUser
    from webui.sessions.proxy import proxy_target

    with app.test_request_context("/api/proxy-auth"):
        try:
            return proxy_target(CurrentUser(username=user, is_admin=False), job_id)
        except HTTPException as exc:
            return exc.code


def set_comment(cluster: HostSlurm, user: str, job_id: int, port: int, host: str) -> None:
    comment = f"carme:v1;app=jupyterlab;host={host};port={port};state=ready"
    proc = cluster.run(["scontrol", "update", f"JobId={job_id}", f"Comment={comment}"], user=user, check=False)
    assert proc.returncode == 0, proc.stderr  # a user may edit their own job's comment: the attack is real


def test_alices_real_session_is_verified_and_proxied(portal: Flask, sessions: Sessions) -> None:
    assert front.PORT_RANGE[0] <= sessions.port <= front.PORT_RANGE[1]
    assert front.verify_endpoint(sessions.host, sessions.port, sessions.alice_job, sessions.alice_secret, 10.0)
    target = decide(portal, "alice", sessions.alice_job)
    assert not isinstance(target, int), target
    assert (target.endpoint.host, target.endpoint.port) == (sessions.host, sessions.port)
    # what nginx then sends: JupyterLab answers through the front
    url = f"http://{sessions.host}:{sessions.port}/proxy/{sessions.alice_job}/api/status"
    assert http_status(url, dict(target.headers))[0] == 200
    assert http_status(url, {"Authorization": f"token {sessions.alice_secret}"})[0] == 403  # no front key
    assert decide(portal, "bob", sessions.alice_job) == 403


def test_bob_rewriting_his_comment_reaches_nothing(host_slurm: HostSlurm, portal: Flask, sessions: Sessions) -> None:
    for port in (sessions.port, 6818, 6817):
        set_comment(host_slurm, "bob", sessions.bob_job, port, sessions.host)
        portal.extensions["carme_scheduler"].cache.invalidate()
        assert decide(portal, "bob", sessions.bob_job) == 404, port
    # and with the front key bob's session secret gives, alice's front still says no
    url = f"http://{sessions.host}:{sessions.port}/proxy/{sessions.alice_job}/api/status"
    status, body = http_status(url, front.front_headers(sessions.bob_secret, sessions.bob_job))
    assert status == 403 and b"version" not in body
