# SPDX-License-Identifier: GPL-3.0-or-later
"""The preflight play (playbooks/preflight.yml): every node must resolve every other node by its inventory name.

Run for real with a local connection on this host: names that resolve here pass; a name that resolves nowhere fails
in seconds, and the message names the host that cannot resolve it and the fix for the test bed and for real sites.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env


def _preflight(tmp_path: Path, names: list[str]) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    carme:\n      hosts:\n        localhost:\n")
    argv = [
        _ansible_bin("ansible-playbook"),
        str(REPO_ROOT / "playbooks" / "preflight.yml"),
        "-i",
        str(inventory),
        "-e",
        json.dumps({"ansible_connection": "local", "common_name_check_hosts": names}),
    ]
    return subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), timeout=120, check=False)


def test_names_that_resolve_pass(tmp_path: Path) -> None:
    run = _preflight(tmp_path, ["localhost"])
    assert run.returncode == 0, run.stdout + run.stderr


def test_unresolvable_name_fails_with_cause_and_fix(tmp_path: Path) -> None:
    run = _preflight(tmp_path, ["localhost", "carme-no-such-node.invalid"])
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "localhost cannot resolve carme-no-such-node.invalid" in out
    assert "netavark" in out and "aardvark-dns" in out  # the test bed's fix
    assert "/etc/hosts" in out  # a real site's fix
