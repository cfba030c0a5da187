# SPDX-License-Identifier: GPL-3.0-or-later
"""What goes wrong with Slurm, as the portal tells its users."""

from __future__ import annotations

from typing import Any


class SlurmError(Exception):
    """Slurm answered but refused or failed the request. ``str()`` is fit for users."""

    def __init__(self, message: str, *, status: int | None = None, errors: list[Any] | None = None):
        super().__init__(message)
        self.status = status
        self.errors = errors or []


class SlurmUnavailable(SlurmError):
    """slurmrestd or slurmctld cannot be reached right now."""
