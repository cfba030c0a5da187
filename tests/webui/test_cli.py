"""CLI commands the deployment role relies on: their output says whether anything changed."""

from __future__ import annotations

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
