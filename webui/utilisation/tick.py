# SPDX-License-Identifier: GPL-3.0-or-later
"""``flask --app webui carme-tick``: what the portal does once a minute, run by the ``carme-portal-tick`` timer as the
portal's user. Each task runs on its own: one that fails is logged and the others still run; the command fails (exit
status 1) when any did, so that systemd shows the unit failed."""

from __future__ import annotations

import logging
from collections.abc import Callable

import click
from flask import Flask

from webui.extensions import db

log = logging.getLogger(__name__)


def _sample() -> object:
    from webui.utilisation import sampler

    return sampler.tick()


def _notifications() -> object:
    from webui.notifications import watch

    return watch.check()


def _expire() -> object:
    from webui.projects import terms

    return terms.expire()


def _carryover() -> object:
    from webui.quota import carryover

    return carryover.restore_declared()


TASKS: dict[str, Callable[[], object]] = {
    "utilisation": _sample,
    "projects": _expire,
    "notifications": _notifications,
    "carryover": _carryover,
}


def run_tasks(tasks: dict[str, Callable[[], object]] | None = None) -> dict[str, str]:
    """Run every task; returns each one's outcome (its result, or ``failed: ...``)."""
    outcomes: dict[str, str] = {}
    for name, task in (TASKS if tasks is None else tasks).items():
        try:
            outcomes[name] = str(task())
        except Exception as exc:  # one task's failure must not stop the others
            log.exception("carme-tick: %s failed", name)
            db.session.rollback()
            outcomes[name] = f"failed: {exc}"
    return outcomes


def register(app: Flask) -> None:
    @app.cli.command("carme-tick")
    def carme_tick() -> None:
        """Sample the cluster's utilisation (and roll up, prune), check notifications and end the portal's projects
        past their end date: the timer's job."""
        outcomes = run_tasks()
        for name, outcome in outcomes.items():
            click.echo(f"{name}: {outcome}")
        if any(o.startswith("failed:") for o in outcomes.values()):
            raise SystemExit(1)
