# SPDX-License-Identifier: GPL-3.0-or-later
"""images/node/build.sh: CARME_RELEASE picks the release, refused before anything is built when it does not fit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "images" / "node" / "build.sh"


def _build(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("CARME_RELEASE", "CARME_NODE_IMAGE")}
    return subprocess.run(["bash", str(BUILD)], env={**base, **env}, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CARME_RELEASE": "buster"}, "CARME_RELEASE must be bookworm or trixie"),
        ({"CARME_RELEASE": "trixie", "CARME_NODE_IMAGE": "localhost/carme-node:debian12"}, "is not a trixie image"),
        ({"CARME_NODE_IMAGE": "localhost/carme-node:debian12"}, "is not a trixie image"),  # the default release
        ({"CARME_RELEASE": "bookworm", "CARME_NODE_IMAGE": "localhost/carme-node:debian13"}, "is not a bookworm image"),
    ],
)
def test_a_release_that_does_not_fit_is_refused(env: dict[str, str], message: str) -> None:
    result = _build(env)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_only_trixie_has_packages_of_its_own_and_they_come_from_sid_alone() -> None:
    lists = sorted(p.name for p in BUILD.parent.glob("packages*.txt"))
    assert lists == ["packages-trixie.txt", "packages.txt"]
    extra = [x for x in (BUILD.parent / "packages-trixie.txt").read_text().splitlines() if x and not x.startswith("#")]
    assert extra == ["apptainer/sid"]
