# SPDX-License-Identifier: GPL-3.0-or-later
"""Console scripts. Every entry point takes ``argv`` and ``env`` so tests call it directly.

Imports are lazy: ``carme-prolog``/``carme-epilog`` run for every job and must finish in a few tens
of milliseconds, so this module imports nothing beyond ``os``/``sys`` at the top.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from collections.abc import Sequence


def _args(argv: Sequence[str] | None) -> list[str]:
    return list(sys.argv[1:] if argv is None else argv)


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def prolog_main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Slurm ``Prolog=`` (via the ``prolog.d`` shim). Always exits 0: an internal error goes to stderr, never drains."""
    from carme_runtime.command_runner import SubprocessRunner
    from carme_runtime.hooks import run_prolog

    _args(argv)  # slurmd passes no arguments; extra ones are ignored rather than fail the node
    try:
        return run_prolog(_env(env), SubprocessRunner(timeout=10))
    except Exception as exc:
        sys.stderr.write(f"carme-prolog: internal error ignored: {exc!r}\n")
        return 0


def epilog_main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Slurm ``Epilog=``: remove job scratch, kill leftovers when the user has no other job here."""
    from carme_runtime.command_runner import SubprocessRunner
    from carme_runtime.hooks import run_epilog

    _args(argv)
    try:
        return run_epilog(_env(env), SubprocessRunner(timeout=10))
    except Exception as exc:
        sys.stderr.write(f"carme-epilog: internal error ignored: {exc!r}\n")
        return 0


def task_prolog_main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Slurm ``TaskProlog=``: print ``export CARME_BEEOND=<mount>`` when the job's BeeOND is mounted here.

    Runs as the job's user before each task; slurmd turns the printed ``export`` lines into the task's environment.
    Never fails the task: any problem prints nothing.
    """
    _args(argv)
    try:
        from carme_runtime.beeond import task_prolog_lines
        from carme_runtime.config import RuntimeConfig

        e = _env(env)
        for line in task_prolog_lines(e, RuntimeConfig.load(e), os.path.ismount):
            print(line)
    except Exception as exc:
        sys.stderr.write(f"carme-task-prolog: ignored: {exc!r}\n")
    return 0


def launch_main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``carme-launch``: start the session app inside the job (see :mod:`carme_runtime.launch`)."""
    from carme_runtime.launch import main_argv_env

    return main_argv_env(_args(argv), _env(env))


def gpu_facts_main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``carme-gpu-facts [--fake N | --from-file PATH]``: print GPU facts as JSON."""
    import argparse
    import json

    from carme_runtime import gpu
    from carme_runtime.command_runner import RC_NOT_FOUND
    from carme_runtime.command_runner import SubprocessRunner
    from carme_runtime.exit_codes import ExitCode

    parser = argparse.ArgumentParser(prog="carme-gpu-facts", description="Print GPU facts as JSON.")
    parser.add_argument("--fake", type=int, metavar="N", help="report N fake GPUs (CI without a driver)")
    parser.add_argument("--from-file", metavar="PATH", help="parse saved nvidia-smi --query-gpu output")
    args = parser.parse_args(_args(argv))
    e = _env(env)
    fake = args.fake if args.fake is not None else int(e.get("CARME_FAKE_GPUS", "-1") or -1)
    try:
        if fake >= 0:
            gpus = gpu.fake_gpus(fake)
        elif args.from_file:
            with open(args.from_file, encoding="utf-8") as fh:
                gpus = gpu.parse_nvidia_smi(fh.read())
        else:
            rc, out, err = SubprocessRunner(timeout=30)(gpu.NVIDIA_SMI_QUERY_ARGV)
            if rc == RC_NOT_FOUND:
                gpus = []
            elif rc != 0:
                print(json.dumps({"error": f"nvidia-smi rc={rc}: {err.strip()[:200]}"}))
                return ExitCode.ERROR
            else:
                gpus = gpu.parse_nvidia_smi(out)
    except (OSError, gpu.GpuFactsError) as exc:
        print(json.dumps({"error": str(exc)}))
        return ExitCode.ERROR
    print(json.dumps(gpu.gpu_facts(gpus), indent=2, sort_keys=True))
    return ExitCode.OK


def quota_main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``carme-quota report [--json] [--month YYYY-MM]``."""
    from carme_runtime.quota_report import main

    return main(_args(argv), _env(env))
