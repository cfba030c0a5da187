# SPDX-License-Identifier: GPL-3.0-or-later
"""The apptainer role's test-bed install source (``apptainer_install_source: debian-unstable``): the deb822 source
relaxes ``Check-Valid-Until`` for itself alone, and the pin lets only the apptainer package come from unstable
(priority 100), nothing else (-1). Rendered through real ansible (tests/roles/render_apptainer.yml); the install
itself runs in a Debian 13 node in tests/runtime/test_apptainer_real.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.roles.harness import REPO_ROOT
from tests.roles.harness import render

PLAYBOOK = REPO_ROOT / "tests" / "roles" / "render_apptainer.yml"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("apptainer-unstable")
    variables = {
        "apptainer_install_source": "debian-unstable",
        "apptainer_unstable_uri": "http://mirror.example/debian",
    }
    render(REPO_ROOT / "inventories" / "example", out, variables, playbook=PLAYBOOK).check()
    return out


def stanzas(text: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line.strip() and not line.startswith("#"))
        if fields:
            out.append(fields)
    return out


def test_unstable_source_relaxes_valid_until_for_itself_only(rendered: Path) -> None:
    (source,) = stanzas((rendered / "carme-apptainer-unstable.sources").read_text())
    assert source == {
        "Types": "deb",
        "URIs": "http://mirror.example/debian",
        "Suites": "sid",
        "Components": "main",
        "Signed-By": "/usr/share/keyrings/debian-archive-keyring.gpg",
        "Check-Valid-Until": "no",
    }


def test_only_apptainer_may_come_from_unstable(rendered: Path) -> None:
    pins = stanzas((rendered / "carme-apptainer-unstable.pref").read_text())
    assert pins == [
        {"Package": "apptainer", "Pin": "release n=sid", "Pin-Priority": "100"},
        {"Package": "*", "Pin": "release n=sid", "Pin-Priority": "-1"},
    ]


def test_site_sources_render_no_unstable_files(tmp_path: Path) -> None:
    render(REPO_ROOT / "inventories" / "example", tmp_path, None, playbook=PLAYBOOK).check()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["apptainer.conf"]
