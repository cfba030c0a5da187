# SPDX-License-Identifier: GPL-3.0-or-later
"""Multi-node sessions (issue 15): the start form's node count, its limits, and what reaches Slurm."""

from __future__ import annotations

import dataclasses
from typing import Any

from flask import Flask

from webui.extensions import db
from webui.models import AuditLog
from webui.slurm.state import Node

from .conftest import FakeScheduler
from .conftest import add_session
from .conftest import csrf_token
from .conftest import log_in_as
from .conftest import post
from .conftest import set_slurm_limits

GOOD = {"app": "jupyterlab", "image": "pytorch", "partition": "gpu", "gpus": "0", "time_minutes": "60"}


def two_nodes(app: Flask, fake_scheduler: FakeScheduler, max_nodes: int = 2) -> None:
    """A second node in the partition, and a site that allows ``max_nodes`` nodes per session."""
    fake_scheduler.nodes.append(
        Node(name="gpu02", state="idle", gpus_total=2, gpus_used=0, partitions=("gpu",), address="10.0.0.12")
    )
    app.config["SESSION_MAX_NODES"] = max_nodes


def test_default_is_one_node_and_the_form_says_so(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    log_in_as(app, client, "alice")
    page = client.get("/sessions/new").get_data(as_text=True)
    assert 'name="nodes" type="number" min="1" max="1" value="1"' in page
    assert post(client, "/sessions/new", GOOD).status_code == 302  # no node count sent: one node
    spec, _secret, payload = fake_scheduler.submitted[0]
    assert spec.nodes == 1
    assert payload["job"]["nodes"] == 1 and payload["job"]["tasks"] == 1


def test_two_nodes_reach_slurm_with_one_task_per_node(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    two_nodes(app, fake_scheduler)
    log_in_as(app, client, "alice")
    assert 'max="2" value="1"' in client.get("/sessions/new").get_data(as_text=True)
    resp = post(client, "/sessions/new", {**GOOD, "nodes": "2"})
    assert resp.status_code == 302
    spec, _secret, payload = fake_scheduler.submitted[0]
    assert spec.nodes == 2
    job = payload["job"]
    assert job["nodes"] == 2 and job["tasks"] == 2
    assert payload["script"] == "#!/bin/bash\nexec carme-launch\n"  # the app starts once, on the first node
    with app.app_context():
        entry = db.session.query(AuditLog).filter_by(action="session.start").one()
        assert entry.details["nodes"] == 2


def test_more_nodes_than_the_policy_is_400_naming_the_field(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    two_nodes(app, fake_scheduler, max_nodes=1)
    log_in_as(app, client, "alice")
    for bad in ("2", "0", "-1", "two", "1.5"):
        resp = post(client, "/sessions/new", {**GOOD, "nodes": bad})
        assert resp.status_code == 400, bad
        assert "Nodes: must" in resp.get_data(as_text=True), bad
    assert fake_scheduler.submitted == []


def test_more_nodes_than_the_partition_has_is_400(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    app.config["SESSION_MAX_NODES"] = 4  # the policy allows 4, the partition has one usable node
    log_in_as(app, client, "alice")
    resp = post(client, "/sessions/new", {**GOOD, "nodes": "2"})
    assert resp.status_code == 400
    assert "Nodes: must be between 1 and 1" in resp.get_data(as_text=True)


def test_gpus_are_per_node_and_slurm_counts_the_session(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    """2 GPUs on each of 2 nodes are 4 GPUs: over Slurm's 3 GPUs per job, refused naming ``gpus``."""
    two_nodes(app, fake_scheduler)
    set_slurm_limits(fake_scheduler, "alice", gpus_per_job=3)  # Slurm's MaxTRESPerJob=gres/gpu=3
    log_in_as(app, client, "alice")
    resp = post(client, "/sessions/new", {**GOOD, "gpus": "2", "nodes": "2"})
    assert resp.status_code == 400
    said = resp.get_data(as_text=True)
    assert "GPUs: 2 per node on 2 nodes is more than the 3 GPUs a session may have" in said
    assert "(Slurm: association alice@research MaxTRESPerJob=gres/gpu=3)" in said
    assert fake_scheduler.submitted == []
    assert post(client, "/sessions/new", {**GOOD, "gpus": "1", "nodes": "2"}).status_code == 302
    assert fake_scheduler.submitted[0][2]["job"]["gres"] == "gpu:1"


def test_json_api_takes_the_node_count(app: Flask, client: Any, fake_scheduler: FakeScheduler) -> None:
    two_nodes(app, fake_scheduler)
    log_in_as(app, client, "alice")
    headers = {"X-CSRFToken": csrf_token(client), "Referer": "https://localhost/"}
    resp = client.post("/api/sessions", json={**GOOD, "nodes": 3}, headers=headers)
    assert resp.status_code == 400
    assert "nodes: must be between 1 and 2" in resp.get_data(as_text=True)
    resp = client.post("/api/sessions", json={**GOOD, "nodes": 2}, headers=headers)
    assert resp.status_code == 201
    assert fake_scheduler.submitted[0][0].nodes == 2


def test_dashboard_names_the_nodes_of_a_multi_node_session(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    two_nodes(app, fake_scheduler)
    log_in_as(app, client, "alice")
    one = add_session(app, fake_scheduler, "alice")
    two = add_session(app, fake_scheduler, "alice")
    fake_scheduler.jobs[two] = dataclasses.replace(fake_scheduler.jobs[two], nodes=("gpu01", "gpu02"))
    page = client.get("/").get_data(as_text=True)
    assert '<small class="session-nodes">2 nodes: gpu01, gpu02</small>' in page
    assert page.count('class="session-nodes"') == 1, one  # a one-node session has no such line
