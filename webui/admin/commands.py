# SPDX-License-Identifier: GPL-3.0-or-later
"""``flask --app webui <command>``: database migrations, account maintenance and the image catalogue."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import click
from flask import Flask
from flask import current_app
from sqlalchemy import select

from webui.auth.lockout import unlock as unlock_user
from webui.auth.totp import reset_totp
from webui.extensions import db
from webui.models import AuditLog
from webui.models import ImageCatalog
from webui.models import User
from webui.models import utcnow

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic (and the SQL dialects it imports: about 10 MB per process) is imported by the commands that use it, never by
# the portal's gunicorn workers, which only register these commands.
MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"


def _user_or_fail(username: str) -> User:
    """The portal's record of USERNAME, or a CLI error naming it."""
    user = db.session.execute(select(User).where(User.username == username)).scalar_one_or_none()
    if user is None:
        raise click.ClickException(f"no such user: {username}")
    return user


#: who ran the command (the login name behind ``carme portal``, or carme-portal's SUDO_USER): audited as ``cli:NAME``
ACTOR_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}"


def _audited_as(actor: str | None) -> str:
    """The audit log's actor for a command run by ACTOR: ``cli:ACTOR``, or ``cli`` when the caller names nobody."""
    if actor is not None and not re.fullmatch(ACTOR_PATTERN, actor):
        raise click.BadParameter(f"{actor!r} is not a login name", param_hint="--actor")
    return "cli" if actor is None else f"cli:{actor}"


def _change_account(username: str, change: Callable[[User], None], action: str, actor: str | None = None) -> None:
    """Apply ``change`` to USERNAME's record and audit it as ``action`` by the CLI (``cli:ACTOR`` when the caller
    names who ran it), in one transaction."""
    by = _audited_as(actor)
    change(_user_or_fail(username))
    db.session.add(AuditLog(actor=by, action=action, target=username, details={}, time=utcnow()))
    db.session.commit()


def alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def current_revisions() -> set[str]:
    """The revisions the app's database is at (empty before the first migration; needs an app context)."""
    from alembic.runtime.migration import MigrationContext

    with db.engine.connect() as connection:
        return set(MigrationContext.configure(connection).get_current_heads())


def upgrade_database(revision: str = "head") -> bool:
    """Run Alembic migrations on the app's database (needs an app context); True if anything ran."""
    from alembic import command

    cfg = alembic_config()
    before = current_revisions()
    with db.engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)
    return current_revisions() != before


IMAGE_KINDS = ["container", "image", "environment"]


def _ensure_image(name: str, image: str, kind: str, apps: tuple[str, ...] | list[str], description: str) -> str:
    """Create or update catalogue entry NAME (enabled) in the session, uncommitted, with its audit record;
    returns created, updated or unchanged."""
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
        db.session.flush()
    return outcome


def _parse_image_entries(text: str) -> list[dict[str, Any]]:
    """The entries of images-ensure, checked as image-ensure checks its options; a CLI error names the first bad one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise click.ClickException(f"ENTRIES is not JSON: {exc}") from exc
    if not isinstance(data, list):
        raise click.ClickException("ENTRIES must be a JSON list of objects")
    entries: list[dict[str, Any]] = []
    names: set[str] = set()
    for index, item in enumerate(data):
        where = f"entry {index}"
        if not isinstance(item, dict):
            raise click.ClickException(f"{where}: not an object")
        unknown = set(item) - {"name", "image", "kind", "apps", "description"}
        if unknown:
            raise click.ClickException(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        name, image = item.get("name"), item.get("image")
        kind, apps, description = item.get("kind", "image"), item.get("apps"), item.get("description", "")
        if not isinstance(name, str) or not name:
            raise click.ClickException(f"{where}: name must be a non-empty string")
        where = f"entry {index} ({name})"
        if name in names:
            raise click.ClickException(f"{where}: named twice")
        names.add(name)
        if not isinstance(image, str) or not image:
            raise click.ClickException(f"{where}: image must be a non-empty string")
        if kind not in IMAGE_KINDS:
            raise click.ClickException(f"{where}: kind must be one of {', '.join(IMAGE_KINDS)}")
        if not isinstance(apps, list) or not apps or not all(isinstance(a, str) and a for a in apps):
            raise click.ClickException(f"{where}: apps must be a non-empty list of strings")
        if not isinstance(description, str):
            raise click.ClickException(f"{where}: description must be a string")
        entries.append({"name": name, "image": image, "kind": kind, "apps": apps, "description": description})
    return entries


def register(app: Flask) -> None:
    """The portal's commands: the schema, accounts, the image catalogue, a benchmark aid."""
    _register_database(app)
    _register_accounts(app)
    _register_images(app)
    _register_profiles(app)
    _register_upkeep(app)
    _register_news(app)


def _register_database(app: Flask) -> None:
    @app.cli.command("db-upgrade")
    @click.option("--revision", default="head", show_default=True)
    def db_upgrade(revision: str) -> None:
        """Create or migrate the portal database schema (Alembic)."""
        # "upgraded" / "unchanged" lets Ansible report a change only when a migration ran.
        changed = upgrade_database(revision)
        click.echo(f"database at {revision} ({'upgraded' if changed else 'unchanged'})")

    @app.cli.command("scheduler-queries")
    def scheduler_queries() -> None:
        """Print how many slurmrestd queries this process issued (benchmark aid)."""
        click.echo(str(current_app.extensions["carme_scheduler"].queries_issued()))


#: ``--actor``: who runs the command
actor_option = click.option(
    "--actor", help="who runs this (audited as cli:ACTOR; carme portal and carme-portal set it)"
)


def _register_accounts(app: Flask) -> None:
    actor = actor_option

    @app.cli.command("totp-reset")
    @click.argument("username")
    @actor
    def totp_reset(username: str, actor: str | None) -> None:
        """Forget USERNAME's TOTP secret; they enrol again at next login."""
        _change_account(username, reset_totp, "totp.reset", actor)
        click.echo(f"TOTP reset for {username}; they enrol again at their next login")

    @app.cli.command("unlock")
    @click.argument("username")
    @actor
    def unlock(username: str, actor: str | None) -> None:
        """Clear USERNAME's failed-login counter and lock."""
        _change_account(username, unlock_user, "user.unlock", actor)
        click.echo(f"unlocked {username}")


def _register_images(app: Flask) -> None:
    @app.cli.command("image-ensure")
    @click.argument("name")
    @click.option("--image", required=True, help="container image, or environment name with --kind environment")
    @click.option(
        "--kind",
        type=click.Choice(IMAGE_KINDS),
        default="image",
        show_default=True,
        help="container: built by `carme image build`, IMAGE is PATH@sha256:DIGEST, run with CONTAINER_RUNTIME",
    )
    @click.option("--app", "apps", multiple=True, required=True, help="allowed app (repeat)")
    @click.option("--description", default="", show_default=True)
    def image_ensure(name: str, image: str, kind: str, apps: tuple[str, ...], description: str) -> None:
        """Create or update catalogue entry NAME (enabled); prints created, updated or unchanged."""
        outcome = _ensure_image(name, image, kind, apps, description)
        if outcome != "unchanged":
            db.session.commit()
        click.echo(f"image {name}: {outcome}")

    @app.cli.command("images-ensure")
    @click.argument("entries")
    def images_ensure(entries: str) -> None:
        """Create or update every catalogue entry of ENTRIES, a JSON list of {name, image, kind, apps, description}
        (as image-ensure takes them; kind defaults to image, description to ""). All entries are checked before
        any is written, and all are written in one transaction; prints one line per entry, as image-ensure."""
        wanted = _parse_image_entries(entries)
        outcomes = [(entry["name"], _ensure_image(**entry)) for entry in wanted]
        if any(outcome != "unchanged" for _, outcome in outcomes):
            db.session.commit()
        for name, outcome in outcomes:
            click.echo(f"image {name}: {outcome}")


def _register_profiles(app: Flask) -> None:
    @app.cli.command("profiles-sync")
    def profiles_sync() -> None:
        """Make the inventory's session profiles (SESSION_PROFILES in config.py) the table's: each is created or
        updated, inventory-owned profiles no longer listed are disabled, profiles made on the admin page stay as they
        are. All are checked before any is written; prints one line per profile touched (created, updated,
        unchanged, disabled)."""
        from webui.sessions.profiles import ProfileInvalid
        from webui.sessions.profiles import sync_profiles

        try:
            outcomes = sync_profiles(current_app.config.get("SESSION_PROFILES") or [])
        except ProfileInvalid as exc:
            raise click.ClickException(str(exc)) from exc
        for name, outcome in outcomes:
            if outcome != "unchanged":
                details = {"outcome": outcome, "source": "inventory"}
                db.session.add(
                    AuditLog(actor="cli", action=f"profile.{outcome}", target=name, details=details, time=utcnow())
                )
        db.session.commit()
        for name, outcome in outcomes:
            click.echo(f"profile {name}: {outcome}")


def _register_upkeep(app: Flask) -> None:
    """What ``carme upgrade`` asks of the portal (issue 34): its reservations back in Slurm, a notice on the
    dashboard."""

    @app.cli.command("reservations-sync")
    @actor_option
    def reservations_sync(actor: str | None) -> None:
        """Create again, as their approval did, the approved reservations that have not ended and that Slurm does not
        hold (by name); prints one line per reservation (created, present, failed: Slurm's reason) and exits 1 when
        Slurm refused any."""
        from webui.reservations.resync import PRESENT
        from webui.reservations.resync import sync_reservations
        from webui.slurm.errors import SlurmError

        by = _audited_as(actor)
        try:
            outcomes = sync_reservations()
        except SlurmError as exc:
            raise click.ClickException(f"Slurm's reservations could not be read: {exc}") from exc
        for done in outcomes:
            if done.outcome != PRESENT:
                details = {"name": done.name, "outcome": done.outcome, "slurm": done.reason}
                db.session.add(AuditLog(actor=by, action=f"reservation.resync.{done.outcome}",
                                        target=str(done.request_id), details=details, time=utcnow()))  # fmt: skip
        db.session.commit()
        for done in outcomes:
            said = f": {done.reason}" if done.reason else ""
            click.echo(f"reservation {done.name} (request {done.request_id}): {done.outcome}{said}")
        if any(done.reason for done in outcomes):
            raise click.exceptions.Exit(1)


def _register_news(app: Flask) -> None:
    """The dashboard notice that ``carme upgrade`` posts before its drain and removes when it is done."""

    @app.cli.command("news-post")
    @click.argument("key")
    @click.argument("text")
    @click.option("--title", default="Notice", show_default=True, help="the notice's heading")
    @actor_option
    def news_post(key: str, text: str, title: str, actor: str | None) -> None:
        """Publish TEXT on the dashboard as the notice KEY, replacing the notice posted with that KEY before."""
        from webui import forms
        from webui.dashboard.news import NOTICE_KEY
        from webui.dashboard.news import news_fields
        from webui.dashboard.news import post_notice

        by = _audited_as(actor)
        if not re.fullmatch(NOTICE_KEY, key):
            raise click.BadParameter(f"{key!r}: letters, digits, _ . - (up to 64)", param_hint="KEY")
        try:
            title, body = news_fields({"title": title, "body": text})
        except forms.FieldError as exc:
            field = "TEXT" if exc.field == "body" else "--title"
            raise click.BadParameter(str(exc.description).partition(": ")[2], param_hint=field) from None
        item, replaced = post_notice(key, title, body, author=actor or "cli")
        details = {"key": key, "title": title, "replaced": replaced}
        db.session.add(AuditLog(actor=by, action="admin.news.create", target=str(item.id), details=details,
                                time=utcnow()))  # fmt: skip
        db.session.commit()
        click.echo(f"notice {key}: {'replaced' if replaced else 'posted'}")

    @app.cli.command("news-remove")
    @click.argument("key")
    @actor_option
    def news_remove(key: str, actor: str | None) -> None:
        """Remove the notice KEY from the dashboard (none with that KEY: nothing to do)."""
        from webui.dashboard.news import remove_notice

        by = _audited_as(actor)
        item = remove_notice(key)
        if item is None:
            click.echo(f"notice {key}: absent")
            return
        details = {"key": key, "title": item.title}
        db.session.add(AuditLog(actor=by, action="admin.news.delete", target=str(item.id), details=details,
                                time=utcnow()))  # fmt: skip
        db.session.commit()
        click.echo(f"notice {key}: removed")
