# SPDX-License-Identifier: GPL-3.0-or-later
"""Run inside a Debian 13 node as the session's user (tests/runtime/test_apptainer_real.py): carme-launch's checks and
plan for ``CARME_APP`` from the job environment (image digest first), then the planned command line itself.

Prints ``argv: JSON`` and the command's output, or ``refused: code=N MESSAGE`` (exit 3) when the launcher refuses;
published comments (``scontrol``, absent here) are printed as ``publish: COMMENT``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from collections.abc import Sequence

from carme_runtime.apps import load_apps
from carme_runtime.config import RuntimeConfig
from carme_runtime.launch import login_environment
from carme_runtime.launch import prepare_launch
from carme_runtime.launch_plan import LaunchError


def publish(
    argv: Sequence[str], *, input_text: str | None = None, env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    print("publish:", argv[-1], flush=True)
    return 0, "", ""


def main() -> int:
    env = login_environment(os.environ)
    config = RuntimeConfig.load(env)
    made: list[str] = []
    try:
        _, plan = prepare_launch(env, load_apps(config.apps_dirs), config, home=env["HOME"], runner=publish, made=made)
    except LaunchError as exc:
        print(f"refused: code={int(exc.code)} {exc}", flush=True)
        return 3
    print("argv:", json.dumps(plan.argv), flush=True)
    return subprocess.run(plan.argv, env=plan.env, cwd=plan.workdir, check=False, timeout=120).returncode


if __name__ == "__main__":
    sys.exit(main())
