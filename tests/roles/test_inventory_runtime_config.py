# SPDX-License-Identifier: GPL-3.0-or-later
"""The runtime.json each inventory renders (carme_runtime_config, with the datasets and BeeOND keys wired from the
storage settings) is one the runtime accepts: carme_runtime rejects unknown keys and bad values, and a rejected file
makes every prolog skip its checks."""

from __future__ import annotations

import json
import subprocess

import pytest

from carme_runtime.config import RuntimeConfig
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import _ansible_bin
from tests.roles.harness import ansible_env


def rendered_config(inventory: str, host: str) -> dict[str, object]:
    argv = [
        _ansible_bin("ansible"),
        host,
        "-i",
        str(REPO_ROOT / "inventories" / inventory),
        "-c",
        "local",
        "-m",
        "ansible.builtin.debug",
        "-a",
        "msg={{ carme_runtime_config | to_json }}",
    ]
    env = ansible_env({"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"})
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout[proc.stdout.index("{") :])
    msg = data["plays"][0]["tasks"][0]["hosts"][host]["msg"]
    loaded: dict[str, object] = json.loads(msg)
    return loaded


@pytest.mark.parametrize(
    ("inventory", "host", "datasets", "beeond"),
    [
        ("demo", "node1", {"demo-samples": "/srv/datasets/demo-samples"}, False),
        ("example", "gpu-a100-01", {"imagenet": "/srv/datasets/imagenet", "coco": "/srv/datasets/coco"}, True),
        ("example", "gpu-t4-01", {"imagenet": "/srv/datasets/imagenet", "coco": "/srv/datasets/coco"}, False),
    ],
)
def test_rendered_runtime_config_is_accepted(inventory: str, host: str, datasets: dict[str, str], beeond: bool) -> None:
    cfg = RuntimeConfig.from_mapping(rendered_config(inventory, host), source=f"{inventory}/{host}")
    assert cfg.datasets == datasets
    assert cfg.beeond is beeond
