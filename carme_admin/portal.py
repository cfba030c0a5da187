# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme portal ACTION USER``: the portal's account commands, run on the portal host from the admin's controller.

``totp-reset`` forgets the user's TOTP secret (they enrol again at their next login, every login of theirs ends);
``unlock`` clears their failed-login counter and lock. Both run the portal's own Flask command as the portal's user on
every host of the inventory's ``portal`` group, through ansible (``playbooks/portal-cli.yml``, the run's artifacts as
``carme deploy`` keeps them), and are audited in the portal as ``cli:<the login name that ran carme>``. On the portal
host itself, root runs the same as ``carme-portal ACTION USER`` (installed by the carme_webui role).
"""

from __future__ import annotations

import argparse
import getpass
import re
import sys
from pathlib import Path
from typing import Any

from carme_admin.playbook import PlaybookRun
from carme_admin.playbook import UsageError

PLAYBOOK = "playbooks/portal-cli.yml"
#: what the commands do, for --help and the message after a successful run
ACTIONS = {
    "totp-reset": "forget USER's TOTP secret: they enrol again (new QR code) at their next login",
    "unlock": "clear USER's failed-login counter and login lock",
}
#: the portal's default USERNAME_PATTERN (webui/settings.py); the playbook checks it again
USER_PATTERN = r"[a-z_][a-z0-9_.-]{0,31}"
#: the audited actor: a login name; anything else is recorded as "unknown"
ACTOR_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}"
DONE = {"totp-reset": "TOTP reset for {user}; they enrol again at their next login.", "unlock": "{user} unlocked."}


def add_parser(commands: Any) -> None:
    """``carme portal {totp-reset,unlock} USER [--inventory PATH]``."""
    portal = commands.add_parser(
        "portal",
        help="portal accounts: reset a user's TOTP, unlock a user (runs on the portal host)",
        description="Run the portal's account commands on the inventory's portal host (through ansible, as the "
        "portal's user; audited as cli:<your login name>). On the portal host, root runs the same as "
        "`carme-portal ACTION USER`.",
    )
    actions = portal.add_subparsers(dest="portal_command", metavar="ACTION", required=True)
    for name, text in ACTIONS.items():
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        action.add_argument("user", metavar="USER", help="the user's login name")
        action.add_argument("--inventory", "-i", type=Path, help="inventory (default: ansible.cfg's, the demo)")
        action.add_argument("--json", action="store_true", help="print the final stats as JSON on stdout")


def actor(name: str | None = None) -> str:
    """Who runs carme (the login name), as the audit log records it."""
    try:
        name = name if name is not None else getpass.getuser()
    except (KeyError, OSError):
        name = ""
    return name if re.fullmatch(ACTOR_PATTERN, name) else "unknown"


def portal_run(project: Path, args: argparse.Namespace, who: str | None = None) -> PlaybookRun:
    """The playbook run of ``carme portal``; a bad user name is a UsageError (exit 2) before anything runs."""
    if not re.fullmatch(USER_PATTERN, args.user):
        raise UsageError(
            f"{args.user!r} is not a valid user name (lower-case letters, digits, '_', '.', '-'; at most 32 "
            "characters, starting with a letter or '_')"
        )
    extravars = {
        "carme_portal_cli_action": args.portal_command,
        "carme_portal_cli_user": args.user,
        "carme_portal_cli_actor": actor(who),
    }
    return PlaybookRun(project=project, playbook=PLAYBOOK, inventory=args.inventory, extravars=extravars)


def done_message(args: argparse.Namespace) -> str:
    return DONE[args.portal_command].format(user=args.user)


def report(args: argparse.Namespace, ok: bool) -> None:
    if ok:
        sys.stderr.write(done_message(args) + "\n")
    else:
        sys.stderr.write(f"carme: portal {args.portal_command} {args.user} failed (see the failed task above)\n")
