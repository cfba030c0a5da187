# SPDX-License-Identifier: GPL-3.0-or-later
"""One source of truth for limits, on the live demo (issue 31): a limit changed in the inventory shows up in the
portal after the deploy, with no portal setting to edit.

The test deploys the Slurm accounting alone (``carme deploy --playbook playbooks/slurm.yml --tags slurm_accounting``)
with an extra-vars override of bob's association (``carme_slurm_user_overrides``: MaxJobs 4 -> 3, GrpTRESMins
gres/gpu 6000 -> 1200), then reads bob's dashboard until it shows the new figures (the portal reads Slurm's records
at most every ``QUOTA_CACHE_SECONDS`` per worker, the page's own copy as long again: at most ``SHOW_TIMEOUT_S``), and
checks that the portal's configuration holds no limit of its own. ``finally`` deploys again without the override,
and the dashboard shows the inventory's figures again.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from typing import Any

import pytest

from tests.fixtures.demo import BASE
from tests.fixtures.demo import REPO
from tests.fixtures.demo import Demo
from tests.fixtures.demo import login
from tests.fixtures.demo import on_head

pytestmark = pytest.mark.e2e

SHOW_TIMEOUT_S = 240.0
DEPLOY_TIMEOUT_S = 600.0
OVERRIDE = {"carme_slurm_user_overrides": {"bob": {"MaxJobs": 3, "GrpTRESMins": "gres/gpu=1200"}}}


def deploy_accounting(extra: dict[str, Any] | None = None) -> float:
    """Apply the inventory's Slurm accounting (with ``extra`` vars); the seconds it took."""
    argv = [str(REPO / ".venv" / "bin" / "carme"), "deploy", "--playbook", "playbooks/slurm.yml", "--tags",
            "slurm_accounting"]  # fmt: skip
    if extra:
        argv += ["-e", json.dumps(extra)]
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=DEPLOY_TIMEOUT_S, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return time.monotonic() - t0


def sacctmgr_bob() -> str:
    return on_head("sacctmgr", "-n", "-P", "show", "assoc", "where", "user=bob", "account=research",
                   "format=MaxJobs,GrpTRESMins").stdout.strip()  # fmt: skip


def shown(page: Any) -> dict[str, str]:
    """The limits on bob's dashboard, by label, as text."""
    page.goto(f"{BASE}/")
    out = {}
    for dd in page.locator("dd[data-limit]").all():
        out[str(dd.get_attribute("data-limit"))] = re.sub(r"\s+", " ", dd.inner_text()).strip()
    return out


def wait_shown(page: Any, want: dict[str, str]) -> dict[str, str]:
    deadline, got = time.monotonic() + SHOW_TIMEOUT_S, {}
    while time.monotonic() < deadline:
        got = shown(page)
        if all(got.get(k) == v for k, v in want.items()):
            return got
        time.sleep(5)
    pytest.fail(f"bob's dashboard did not show {want} within {SHOW_TIMEOUT_S:.0f} s: {got}")


INVENTORY = {
    "Sessions at a time": "4 sessions (association bob@research MaxJobs)",
    "GPU budget per month": "6000 GPU-minutes (association bob@research GrpTRESMins=gres/gpu)",
    "GPUs per session": "1 GPU (QOS interactive MaxTRESPerUser=gres/gpu)",
}
CHANGED = {
    **INVENTORY,
    "Sessions at a time": "3 sessions (association bob@research MaxJobs)",
    "GPU budget per month": "1200 GPU-minutes (association bob@research GrpTRESMins=gres/gpu)",
}


def test_a_limit_changed_in_the_inventory_shows_in_the_portal(demo: Demo) -> None:
    config = on_head("cat", "/etc/carme/webui/config.py").stdout
    assert config and "QUOTA_DEFAULT" not in config  # no limit of the portal's own to edit
    page, _ = login(demo, "bob")
    try:
        wait_shown(page, INVENTORY)
        took = deploy_accounting(OVERRIDE)
        print(f"deploy with the override: {took:.0f} s")
        assert sacctmgr_bob() == "3|gres/gpu=1200"
        t0 = time.monotonic()
        wait_shown(page, CHANGED)
        print(f"shown in the portal {time.monotonic() - t0:.0f} s after the deploy")
        said = page.locator(".card", has_text="My quota").inner_text()
        assert "20.0 GPU-hours" in said, said
    finally:
        took = deploy_accounting()
        print(f"deploy without the override: {took:.0f} s")
        assert sacctmgr_bob() == "4|gres/gpu=6000"
        try:
            wait_shown(page, INVENTORY)
        finally:
            page.context.close()
