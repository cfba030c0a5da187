# SPDX-License-Identifier: GPL-3.0-or-later
"""Golden files: the carme_webui role's systemd units for the demo inventory.

Rendered through real ansible (tests/roles/render_webui.yml, the role's ``render`` tasks) and compared byte for byte
with tests/roles/golden/demo/carme_webui/. After an intended template change:
``CARME_UPDATE_GOLDEN=1 pytest tests/roles/test_webui_golden.py``, then review the diff.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.fixtures.golden import assert_golden
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import render

GOLDEN = Path(__file__).parent / "golden" / "demo" / "carme_webui"
PLAYBOOK = REPO_ROOT / "tests" / "roles" / "render_webui.yml"
FILES = ("carme-webui.service", "carme-webui.socket", "carme-webui-tick.service", "carme-webui-tick.timer")


def render_units(out: Path, variables: Mapping[str, object] | None = None) -> Path:
    return render(REPO_ROOT / "inventories" / "demo", out, variables, playbook=PLAYBOOK).check().out_dir


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render_units(tmp_path_factory.mktemp("webui_units"))


@pytest.mark.parametrize("name", FILES)
def test_matches_golden(rendered: Path, name: str) -> None:
    assert_golden((rendered / name).read_text(), GOLDEN / name, name)


def exec_start(unit: str) -> list[str]:
    [line] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return line.removeprefix("ExecStart=").split()


def test_defaults_preload_with_few_malloc_arenas(rendered: Path) -> None:
    unit = (rendered / "carme-webui.service").read_text()
    argv = exec_start(unit)
    assert "--preload" in argv and argv[-1] == "webui.wsgi:app"
    assert "Environment=MALLOC_ARENA_MAX=2" in unit.splitlines()


def test_preload_and_arena_cap_can_be_turned_off(tmp_path: Path) -> None:
    off = {"carme_webui_preload": False, "carme_webui_malloc_arena_max": 0}
    text = (render_units(tmp_path, off) / "carme-webui.service").read_text()
    assert "--preload" not in exec_start(text)
    assert "MALLOC_ARENA_MAX" not in text
    assert exec_start(text)[:7] == [
        "/opt/carme/webui-venv/bin/gunicorn",
        "--workers",
        "2",
        "--threads",
        "16",
        "--worker-class",
        "gthread",
    ]


TICK = ("carme-webui-tick.service", "carme-webui-tick.timer")


def test_the_tick_runs_the_portal_command_every_minute_as_the_portals_user(rendered: Path) -> None:
    service = (rendered / "carme-webui-tick.service").read_text().splitlines()
    timer = (rendered / "carme-webui-tick.timer").read_text().splitlines()
    assert "ExecStart=/opt/carme/webui-venv/bin/flask --app webui carme-tick" in service
    assert {"Type=oneshot", "User=carme-portal", "NoNewPrivileges=yes"} <= set(service)
    assert {"OnCalendar=*-*-* *:*:00", "Persistent=true", "WantedBy=timers.target"} <= set(timer)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_accepts_the_tick(rendered: Path, tmp_path: Path) -> None:
    for name in TICK:
        (tmp_path / name).write_text((rendered / name).read_text())
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(str(tmp_path / n) for n in TICK)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    problems = [line for line in proc.stderr.splitlines() if line.strip() and "is not executable" not in line]
    assert not problems, proc.stderr
