# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme check``: the preflight (``playbooks/check.yml``) over the inventory, changing nothing.

The play reports each host's findings in one debug result (``carme_check``: sudo, and ``problem CHECK DETAIL`` /
``info KEY VALUE`` lines); an unreachable host gives only an unreachable event. :class:`Findings` turns the
ansible-runner events into one row per host and problem, each with the fix, and prints them as a table.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from typing import TextIO

from carme_admin.progress import ProgressPrinter
from carme_admin.progress import failure_message

PLAYBOOK = "playbooks/check.yml"
REPORT_TASK = "Report the findings"
#: what to do about each kind of problem
FIXES: dict[str, str] = {
    "unreachable": "check SSH from this controller: `ssh USER@HOST` (sshd running, the key in authorized_keys, "
    "ansible_host/ansible_user in the inventory)",
    "sudo": "give the deploy user sudo (passwordless, or put ansible_become_password in the vault)",
    "clock": "run a time service (chrony or systemd-timesyncd) on the host and on this controller",
    "resolve": "add the name to DNS or /etc/hosts on the host (every node resolves every inventory name)",
    "disk": "free or grow the file system (thresholds: carme_check_min_free_mb)",
    "cgroup": "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1) or drop carme_check_require_cgroup_v2",
    "nvidia": "install the NVIDIA driver (nvidia-smi -L must list the GPUs), or take the host out of the GPU groups",
    "error": "see the message; the host's checks did not complete",
}


@dataclass(frozen=True)
class Problem:
    host: str
    check: str
    detail: str

    @property
    def fix(self) -> str:
        return FIXES.get(self.check, FIXES["error"])

    def as_dict(self) -> dict[str, str]:
        return {"host": self.host, "check": self.check, "detail": self.detail, "fix": self.fix}


@dataclass
class Findings:
    """The problems and facts per host, from ansible-runner events (``handle`` is an event handler)."""

    hosts: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    info: dict[str, dict[str, str]] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)

    def handle(self, event: Mapping[str, Any]) -> None:
        kind = str(event.get("event", ""))
        raw = event.get("event_data")
        data: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        host = str(data.get("host", ""))
        if not host:
            return
        if host not in self.hosts:
            self.hosts.append(host)
        res = data.get("res")
        res = res if isinstance(res, Mapping) else {}
        if kind == "runner_on_unreachable":
            self._add(host, "unreachable", failure_message(res) or "unreachable")
        elif kind == "runner_on_ok" and isinstance(res.get("carme_check"), Mapping):
            self._report(host, res["carme_check"])
        elif kind == "runner_on_failed" and not data.get("ignore_errors") and host not in self.reported:
            self._add(host, "error", f"{data.get('task', '')}: {failure_message(res)}")

    def _add(self, host: str, check: str, detail: str) -> None:
        problem = Problem(host, check, " ".join(detail.split()))
        if problem not in self.problems:
            self.problems.append(problem)

    def _report(self, host: str, report: Mapping[str, Any]) -> None:
        self.reported.add(host)
        if str(report.get("sudo")).lower() != "true":
            self._add(host, "sudo", str(report.get("sudo_error") or "become failed"))
        lines = report.get("lines")
        for line in lines if isinstance(lines, list) else []:
            kind, _, rest = str(line).partition(" ")
            key, _, value = rest.partition(" ")
            if kind == "problem":
                self._add(host, key, value)
            elif kind == "info":
                self.info.setdefault(host, {})[key] = value

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": not self.problems,
            "hosts": {host: {"problems": [p.as_dict() for p in self.problems if p.host == host],
                             "info": self.info.get(host, {})} for host in self.hosts},
        }  # fmt: skip


def print_table(findings: Findings, stream: TextIO) -> None:
    """One row per problem (HOST, CHECK, PROBLEM), the fix under it; then the hosts without a problem."""
    rows = [(p.host, p.check, p.detail) for p in findings.problems]
    width = [
        max([len(h) for h in ("HOST", *[r[0] for r in rows])]),
        max([len(c) for c in ("CHECK", *[r[1] for r in rows])]),
    ]
    if rows:
        stream.write(f"{'HOST':<{width[0]}}  {'CHECK':<{width[1]}}  PROBLEM\n")
    for problem in findings.problems:
        stream.write(f"{problem.host:<{width[0]}}  {problem.check:<{width[1]}}  {problem.detail}\n")
        stream.write(f"{'':<{width[0]}}  {'':<{width[1]}}  fix: {problem.fix}\n")
    bad = {p.host for p in findings.problems}
    for host in findings.hosts:
        if host not in bad:
            cgroup = findings.info.get(host, {}).get("cgroup", "?")
            stream.write(f"{host}: ok (cgroup {cgroup})\n")
    stream.write(f"{len(findings.problems)} problem(s) on {len(bad)} of {len(findings.hosts)} host(s)\n")


class CheckPrinter(ProgressPrinter):
    """The progress printer that also collects the findings."""

    def __init__(self, stream: TextIO, findings: Findings, **kwargs: Any) -> None:
        super().__init__(stream, **kwargs)
        self.findings = findings

    def handle(self, event: Mapping[str, Any]) -> bool:
        self.findings.handle(event)
        return super().handle(event)


def add_parser(commands: Any) -> None:
    """``carme check [-i INV] [--vault-password-file F] [--limit L] [-e K=V] [--json]``."""
    check = commands.add_parser(
        "check", help="preflight: name per host what would stop a deploy (changes nothing)",
        description="Run playbooks/check.yml: per host, unreachable (SSH), no sudo, clock skew over 60 s, inventory "
        "names not resolving, too little free space in /var and /home, the cgroup version, nvidia-smi missing on the "
        "GPU nodes. Exit 1 if any problem, 0 if none.",
    )  # fmt: skip
    check.add_argument("--inventory", "-i", type=Path, help="inventory (default: ansible.cfg's, the demo)")
    check.add_argument("--limit", "-l", help="only these hosts or groups (ansible pattern)")
    add_vault_option(check)
    check.add_argument(
        "-e", "--extra-vars", dest="extra_vars", action="append", default=[], metavar="K=V",
        help="extra variable (repeatable), e.g. carme_check_max_clock_skew_s=30",
    )  # fmt: skip
    check.add_argument("--json", action="store_true", help="print the findings as JSON on stdout")


def add_vault_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--vault-password-file", type=Path, metavar="FILE",
        help="ansible-vault password file (default: the inventory directory's .vault-pass, if there is one)",
    )  # fmt: skip


def vault_args(inventory: Path | None, password_file: Path | None) -> list[str]:
    """ansible-playbook's ``--vault-password-file``: the given file, else ``.vault-pass`` next to the inventory."""
    if password_file is None and inventory is not None:
        base = inventory if inventory.is_dir() else inventory.parent
        candidate = base / ".vault-pass"
        password_file = candidate if candidate.is_file() else None
    return [] if password_file is None else ["--vault-password-file", str(password_file.expanduser().resolve())]


def report(findings: Findings, stream: TextIO, as_json: bool) -> int:
    """Print the findings; 1 when there is a problem (or no host reported at all), else 0."""
    if as_json:
        stream.write(json.dumps(findings.as_dict(), indent=2, sort_keys=True) + "\n")
    else:
        print_table(findings, stream)
    return 1 if findings.problems or not findings.hosts else 0
