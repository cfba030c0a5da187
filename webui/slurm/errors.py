# SPDX-License-Identifier: GPL-3.0-or-later
"""What goes wrong with Slurm, as the portal tells its users."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from typing import TypeVar

from flask import flash

T = TypeVar("T")


class SlurmError(Exception):
    """Slurm answered but refused or failed the request. ``str()`` is fit for users."""

    def __init__(self, message: str, *, status: int | None = None, errors: list[Any] | None = None):
        super().__init__(message)
        self.status = status
        self.errors = errors or []


class SlurmUnavailable(SlurmError):
    """slurmrestd or slurmctld cannot be reached right now."""


def flash_outcome(action: Callable[[], T], done: Callable[[T], str], refused: str) -> T | None:
    """Run a change Slurm may refuse and flash how it went: ``done(result)``, or ``refused: <Slurm's words>``."""
    try:
        result = action()
    except SlurmError as exc:
        flash(f"{refused}: {exc}")
        return None
    flash(done(result))
    return result
