"""``flask --app webui <command>``: database migrations and account maintenance."""

from __future__ import annotations

from pathlib import Path

import click
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from flask import Flask
from flask import current_app
from sqlalchemy import select

from webui.extensions import db
from webui.models import AuditLog
from webui.models import ImageCatalog
from webui.models import User
from webui.models import utcnow
from webui.security import clear_failures

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def _user_or_fail(username: str) -> User:
    """The portal's record of USERNAME, or a CLI error naming it."""
    user = db.session.execute(select(User).where(User.username == username)).scalar_one_or_none()
    if user is None:
        raise click.ClickException(f"no such user: {username}")
    return user


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def current_revisions() -> set[str]:
    """The revisions the app's database is at (empty before the first migration; needs an app context)."""
    with db.engine.connect() as connection:
        return set(MigrationContext.configure(connection).get_current_heads())


def upgrade_database(revision: str = "head") -> bool:
    """Run Alembic migrations on the app's database (needs an app context); True if anything ran."""
    cfg = alembic_config()
    before = current_revisions()
    with db.engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)
    return current_revisions() != before


def register(app: Flask) -> None:
    @app.cli.command("db-upgrade")
    @click.option("--revision", default="head", show_default=True)
    def db_upgrade(revision: str) -> None:
        """Create or migrate the portal database schema (Alembic)."""
        # "upgraded" / "unchanged" lets Ansible report a change only when a migration ran.
        changed = upgrade_database(revision)
        click.echo(f"database at {revision} ({'upgraded' if changed else 'unchanged'})")

    @app.cli.command("totp-reset")
    @click.argument("username")
    def totp_reset(username: str) -> None:
        """Forget USERNAME's TOTP secret; they enrol again at next login."""
        user = _user_or_fail(username)
        user.totp_secret = None
        user.totp_confirmed = False
        user.totp_last_step = 0  # steps of the old secret mean nothing for the new one
        user.session_version += 1
        db.session.add(AuditLog(actor="cli", action="totp.reset", target=username, details={}, time=utcnow()))
        db.session.commit()
        click.echo(f"TOTP reset for {username}")

    @app.cli.command("unlock")
    @click.argument("username")
    def unlock(username: str) -> None:
        """Clear USERNAME's failed-login counter and lock."""
        user = _user_or_fail(username)
        user.failed_logins = 0
        user.locked_until = None
        clear_failures(username)
        db.session.add(AuditLog(actor="cli", action="user.unlock", target=username, details={}, time=utcnow()))
        db.session.commit()
        click.echo(f"unlocked {username}")

    @app.cli.command("image-ensure")
    @click.argument("name")
    @click.option("--image", required=True, help="container image, or environment name with --kind environment")
    @click.option(
        "--kind", type=click.Choice(["container", "image", "environment"]), default="image", show_default=True,
        help="container: built by `carme image build`, IMAGE is PATH@sha256:DIGEST, run with CONTAINER_RUNTIME",
    )
    @click.option("--app", "apps", multiple=True, required=True, help="allowed app (repeat)")
    @click.option("--description", default="", show_default=True)
    def image_ensure(name: str, image: str, kind: str, apps: tuple[str, ...], description: str) -> None:
        """Create or update catalogue entry NAME (enabled); prints created, updated or unchanged."""
        row = db.session.execute(select(ImageCatalog).where(ImageCatalog.name == name)).scalar_one_or_none()
        wanted = {"image": image, "kind": kind, "allowed_apps": sorted(set(apps)), "description": description}
        if row is None:
            db.session.add(ImageCatalog(name=name, enabled=True, **wanted))
            outcome = "created"
        elif row.enabled and all(getattr(row, k) == v for k, v in wanted.items()):
            outcome = "unchanged"
        else:
            for key, value in wanted.items():
                setattr(row, key, value)
            row.enabled = True
            outcome = "updated"
        if outcome != "unchanged":
            db.session.add(AuditLog(actor="cli", action=f"image.{outcome}", target=name, details=wanted, time=utcnow()))
            db.session.commit()
        click.echo(f"image {name}: {outcome}")

    @app.cli.command("scheduler-queries")
    def scheduler_queries() -> None:
        """Print how many slurmrestd queries this process issued (benchmark aid)."""
        click.echo(str(current_app.extensions["carme_scheduler"].queries_issued()))
