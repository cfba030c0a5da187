# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme-quota report``: GPU-hours per user and account from ``sacct``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import TextIO

from carme_runtime import gpu_hours
from carme_runtime.command_runner import SubprocessRunner
from carme_runtime.exit_codes import ExitCode

if TYPE_CHECKING:
    from carme_runtime.command_runner import Runner


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="carme-quota", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    report_p = sub.add_parser("report", help="GPU-hours per user and account from sacct")
    report_p.add_argument("--json", action="store_true", help="JSON instead of a table")
    report_p.add_argument("--month", help="YYYY-MM (default: the current month)")
    report_p.add_argument("--from-file", metavar="PATH", help="read saved sacct -P output instead of running sacct")
    return parser


def cmd_report(month: str | None, as_json: bool, from_file: str | None, runner: Runner, out: TextIO) -> int:
    month = month or gpu_hours.current_month()
    try:
        argv = gpu_hours.sacct_argv(month)
    except ValueError as exc:
        print(f"carme-quota: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if from_file:
        with open(from_file, encoding="utf-8") as fh:
            text = fh.read()
    else:
        rc, text, err = runner(argv)
        if rc != 0:
            print(f"carme-quota: sacct failed (rc={rc}): {err.strip()}", file=sys.stderr)
            return ExitCode.SLURM
    usage = gpu_hours.usage_from_sacct(gpu_hours.parse_sacct_parsable(text), month)
    out.write(gpu_hours.report_json(usage) if as_json else gpu_hours.report_table(usage))
    return ExitCode.OK


def main(argv: Sequence[str], env: Mapping[str, str], runner: Runner | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(list(argv))
    runner = runner or SubprocessRunner(timeout=120)
    out = out or sys.stdout
    return cmd_report(args.month, args.json, args.from_file, runner, out)
