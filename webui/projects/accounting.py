# SPDX-License-Identifier: GPL-3.0-or-later
"""Projects the portal owns, written to Slurm with ``sacctmgr`` (issue 31): an administrator creates one (an account
with its GPU budget and a manager, its coordinator); its managers add and remove members (associations).

Ownership is read from Slurm itself: an account the portal made has the Organization ``carme-portal``; any other is
the inventory's (the slurm role's ``slurm_accounts``), which the portal does not change: a deploy would undo it. The
slurm role purges only inside the accounts it declares, so it leaves the portal's alone.

``sacctmgr`` runs as the portal's own Unix user, a Slurm Operator (as ``scontrol`` for reservations), with an argv
list (no shell); every value is checked against :data:`NAME` first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Protocol

from flask import current_app

from carme_runtime.command_runner import RC_NOT_FOUND
from carme_runtime.command_runner import RC_TIMEOUT
from carme_runtime.command_runner import SubprocessRunner
from webui.slurm.errors import SlurmError
from webui.slurm.records import PORTAL_ORGANIZATION

#: project and user names the portal passes to sacctmgr
NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
if TYPE_CHECKING:
    from carme_runtime.command_runner import Runner

DESCRIPTION = re.compile(r"^[A-Za-z0-9 _.,:()/-]{0,100}$")


def _checked(value: str, pattern: re.Pattern[str] = NAME) -> str:
    if not pattern.fullmatch(value):
        raise SlurmError(f"refusing to pass {value!r} to sacctmgr")
    return value


def create_argv(name: str, description: str, gpu_minutes: int, qos: Sequence[str]) -> list[str]:
    """``sacctmgr add account``: the portal's Organization, the GPU budget, the QOS a session and a batch job use."""
    return ["add", "account", _checked(name), f"Description={_checked(description, DESCRIPTION)}",
            f"Organization={PORTAL_ORGANIZATION}", f"GrpTRESMins=gres/gpu={int(gpu_minutes)}",
            "QOS=" + ",".join(_checked(q) for q in sorted(set(qos))), "DefaultQOS=normal"]  # fmt: skip


def budget_argv(name: str, gpu_minutes: int) -> list[str]:
    """A new monthly GPU budget for the account (an approved allocation request)."""
    return ["modify", "account", "where", f"name={_checked(name)}", "set", f"GrpTRESMins=gres/gpu={int(gpu_minutes)}"]


def submit_argv(name: str, jobs: int) -> list[str]:
    """The account's GrpSubmitJobs: 0 when the project has ended (Slurm takes no new job in it), -1 lifts it."""
    return ["modify", "account", "where", f"name={_checked(name)}", "set", f"GrpSubmitJobs={int(jobs)}"]


def coordinator_argv(name: str, user: str) -> list[str]:
    return ["add", "coordinator", f"account={_checked(name)}", f"names={_checked(user)}"]


def member_argv(name: str, user: str, *, add: bool) -> list[str]:
    if add:
        return ["add", "user", _checked(user), f"Account={_checked(name)}"]
    return ["delete", "user", "where", f"name={_checked(user)}", f"account={_checked(name)}"]


class Accounting(Protocol):
    def sacctmgr(self, args: Sequence[str]) -> str:
        """Run ``sacctmgr -i ARGS``; :class:`SlurmError` with Slurm's words when it refuses."""
        ...


@dataclass
class Sacctmgr:
    command: Sequence[str] = ("sacctmgr",)
    slurm_conf: str | None = None
    runner: Runner = field(default_factory=lambda: SubprocessRunner(timeout=30))

    def sacctmgr(self, args: Sequence[str]) -> str:
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        rc, out, err = self.runner([*self.command, "-i", *args], env=env)
        if rc in (RC_NOT_FOUND, RC_TIMEOUT):
            raise SlurmError(f"sacctmgr could not be run: {err.strip()}")
        text = (out + err).strip()
        if rc != 0 or "Nothing new added" in text:  # sacctmgr says so with status 0 where the object exists
            raise SlurmError(text or "sacctmgr failed")
        return text


def backend() -> Accounting:
    """``ACCOUNTING`` (tests) or ``sacctmgr`` run as the portal's user (``SLURM_SACCTMGR``, ``SLURM_CONF_FILE``)."""
    cfg = current_app.config
    given = cfg.get("ACCOUNTING")
    if given is not None:
        return given  # type: ignore[no-any-return]
    return Sacctmgr(tuple(cfg.get("SLURM_SACCTMGR", ("sacctmgr",))), cfg.get("SLURM_CONF_FILE") or None)
