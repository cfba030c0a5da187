# SPDX-License-Identifier: GPL-3.0-or-later
"""CLI commands the deployment role relies on: their output says whether anything changed."""

from __future__ import annotations

import json

import pytest
from flask import Flask
from flask.testing import FlaskCliRunner
from sqlalchemy import select

from webui.extensions import db
from webui.models import AuditLog
from webui.models import ImageCatalog


def test_db_upgrade_reports_whether_it_migrated(runner: FlaskCliRunner) -> None:
    first = runner.invoke(args=["db-upgrade"])
    second = runner.invoke(args=["db-upgrade"])
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert "(unchanged)" in second.output


def test_image_ensure_creates_then_keeps_then_updates(app: Flask, runner: FlaskCliRunner) -> None:
    runner.invoke(args=["db-upgrade"])
    args = ["image-ensure", "jupyter", "--image", "jupyter", "--kind", "environment", "--app", "jupyterlab"]
    assert "jupyter: created" in runner.invoke(args=args).output
    assert "jupyter: unchanged" in runner.invoke(args=args).output
    result = runner.invoke(args=[*args, "--description", "JupyterLab; $(rm -rf /)"])
    assert "jupyter: updated" in result.output, result.output
    with app.app_context():
        row = db.session.execute(select(ImageCatalog).where(ImageCatalog.name == "jupyter")).scalar_one()
        assert (row.kind, row.allowed_apps, row.description) == (
            "environment",
            ["jupyterlab"],
            "JupyterLab; $(rm -rf /)",
        )
        actions = db.session.execute(select(AuditLog.action).where(AuditLog.target == "jupyter")).scalars().all()
        assert sorted(actions) == ["image.created", "image.updated"]


def test_image_ensure_needs_an_app(runner: FlaskCliRunner) -> None:
    result = runner.invoke(args=["image-ensure", "x", "--image", "x"])
    assert result.exit_code != 0


def test_images_ensure_applies_every_entry_in_one_command(app: Flask, runner: FlaskCliRunner) -> None:
    runner.invoke(args=["db-upgrade"])
    runner.invoke(args=["image-ensure", "old", "--image", "old", "--app", "jupyterlab"])
    entries = [
        {"name": "jupyter", "image": "jupyter", "kind": "environment", "apps": ["jupyterlab"]},
        {"name": "old", "image": "old", "apps": ["jupyterlab", "code-server"], "description": "x; $(rm -rf /)"},
    ]
    first = runner.invoke(args=["images-ensure", json.dumps(entries)])
    assert first.exit_code == 0, first.output
    assert first.output.splitlines() == ["image jupyter: created", "image old: updated"]
    second = runner.invoke(args=["images-ensure", json.dumps(entries)])
    assert second.output.splitlines() == ["image jupyter: unchanged", "image old: unchanged"]
    # the single-entry command sees the same entries as unchanged
    single = runner.invoke(
        args=["image-ensure", "jupyter", "--image", "jupyter", "--kind", "environment", "--app", "jupyterlab"]
    )
    assert "jupyter: unchanged" in single.output
    with app.app_context():
        row = db.session.execute(select(ImageCatalog).where(ImageCatalog.name == "old")).scalar_one()
        assert (row.kind, row.allowed_apps, row.description) == (
            "image",
            ["code-server", "jupyterlab"],
            "x; $(rm -rf /)",
        )
        actions = (
            db.session.execute(select(AuditLog.action).where(AuditLog.target.in_(["jupyter", "old"]))).scalars().all()
        )
        assert sorted(actions) == ["image.created", "image.created", "image.updated"]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ("not json", "not JSON"),
        ('{"name": "x"}', "JSON list"),
        ('[{"name": "x", "image": "x"}]', "entry 0 (x): apps"),
        ('[{"name": "x", "image": "x", "apps": []}]', "entry 0 (x): apps"),
        ('[{"name": "x", "image": "x", "apps": ["a"], "kind": "vm"}]', "entry 0 (x): kind"),
        ('[{"image": "x", "apps": ["a"]}]', "entry 0: name"),
        ('[{"name": "x", "image": "x", "apps": ["a"], "colour": "red"}]', "unknown key(s) colour"),
        ('[{"name": "x", "image": "x", "apps": ["a"]}, {"name": "x", "image": "y", "apps": ["a"]}]', "named twice"),
    ],
)
def test_images_ensure_checks_every_entry_before_writing(
    app: Flask, runner: FlaskCliRunner, entries: str, message: str
) -> None:
    runner.invoke(args=["db-upgrade"])
    good = '{"name": "good", "image": "good", "apps": ["a"]}'
    # a bad entry after a good one: nothing is written
    text = entries if not entries.startswith("[") else "[" + good + ", " + entries[1:]
    result = runner.invoke(args=["images-ensure", text])
    assert result.exit_code != 0
    assert message.replace("entry 0", "entry 1" if entries.startswith("[") else "entry 0") in result.output
    with app.app_context():
        assert db.session.execute(select(ImageCatalog).where(ImageCatalog.name == "good")).scalar_one_or_none() is None
