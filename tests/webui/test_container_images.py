# SPDX-License-Identifier: GPL-3.0-or-later
"""Container images (kind "container", built by `carme image build`) in the start form and in sessions."""

from __future__ import annotations

from typing import Any

from flask import Flask
from flask.testing import FlaskCliRunner

from webui.extensions import db
from webui.models import ImageCatalog

from .conftest import FakeScheduler
from .conftest import log_in_as
from .conftest import post

REF = "/var/lib/carme/images/carme-base-1.0@sha256:" + "ab" * 32
START = {"app": "jupyterlab", "image": "base", "partition": "gpu", "gpus": "1", "time_minutes": "60"}


def add_container(app: Flask) -> None:
    with app.app_context():
        entry = ImageCatalog(name="base", image=REF, kind="container", description="Carme base")
        entry.allowed_apps, entry.enabled = ["jupyterlab", "tensorboard"], True
        db.session.add(entry)
        db.session.commit()


def test_container_image_is_offered_beside_the_others(app: Flask, client: Any) -> None:
    add_container(app)
    log_in_as(app, client, "alice")
    page = client.get("/sessions/new").get_data(as_text=True)
    assert "base (container · jupyterlab, tensorboard)" in page
    assert "pytorch (" in page


def test_a_session_in_a_container_image_runs_in_the_configured_runtime(
    app: Flask, client: Any, fake_scheduler: FakeScheduler
) -> None:
    add_container(app)
    app.config["CONTAINER_RUNTIME"] = "charliecloud"
    log_in_as(app, client, "alice")
    assert post(client, "/sessions/new", START).status_code == 302
    spec, secret, payload = fake_scheduler.submitted[0]
    assert (spec.runtime, spec.image) == ("charliecloud", REF)
    env = payload["job"]["environment"]
    assert env["CARME_RUNTIME"] == "charliecloud" and env["CARME_IMAGE"] == REF  # the launcher checks the digest
    assert env["CARME_SESSION_SECRET"] == secret


def test_only_admins_register_container_images(app: Flask, client: Any, runner: FlaskCliRunner) -> None:
    data = {"name": "evil", "kind": "container", "image": REF, "allowed_apps": "jupyterlab", "description": ""}
    log_in_as(app, client, "bob")
    assert post(client, "/admin/images", data).status_code == 403
    with app.app_context():
        assert db.session.query(ImageCatalog).filter_by(name="evil").count() == 0
    log_in_as(app, client, "carol", admin=True)
    assert post(client, "/admin/images", {**data, "name": "good"}).status_code == 302
    result = runner.invoke(args=["image-ensure", "cli", "--image", REF, "--kind", "container", "--app", "jupyterlab"])
    assert result.exit_code == 0 and "image cli: created" in result.output
    with app.app_context():
        kinds = {e.name: e.kind for e in db.session.query(ImageCatalog).all()}
    assert kinds["good"] == "container" and kinds["cli"] == "container"
