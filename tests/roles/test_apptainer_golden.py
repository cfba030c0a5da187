# SPDX-License-Identifier: GPL-3.0-or-later
"""Golden-file test: the apptainer role's ``apptainer.conf`` for the example inventory (a real site's).

Rendered through real ansible (tests/roles/render_apptainer.yml) and compared byte for byte with
tests/roles/golden/example/apptainer.conf. After an intended template change, regenerate it with
``CARME_UPDATE_GOLDEN=1 pytest tests/roles/test_apptainer_golden.py`` and review the diff.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.fixtures.golden import assert_golden
from tests.roles.harness import REPO_ROOT
from tests.roles.harness import render

GOLDEN = Path(__file__).parent / "golden" / "example" / "apptainer.conf"
PLAYBOOK = REPO_ROOT / "tests" / "roles" / "render_apptainer.yml"


def render_conf(out: Path, variables: Mapping[str, object] | None = None) -> str:
    result = render(REPO_ROOT / "inventories" / "example", out, variables, playbook=PLAYBOOK)
    return result.check().text("apptainer.conf")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> str:
    return render_conf(tmp_path_factory.mktemp("apptainer"))


def test_apptainer_conf_matches_golden(rendered: str) -> None:
    assert_golden(rendered, GOLDEN, "apptainer.conf")


def settings(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition(" = ")
            out.setdefault(key, []).append(value)
    return out


def test_unprivileged_by_default_with_inventory_binds_and_image_dirs(rendered: str) -> None:
    conf = settings(rendered)
    assert conf["allow setuid"] == ["no"]
    assert conf["bind path"] == ["/etc/localtime", "/etc/hosts"]
    assert "limit container paths" not in conf  # unprivileged: it would refuse every unpacked SIF (Apptainer 1.4.5)
    assert conf["always use nv"] == ["no"]  # --nv per session, from carme-launch
    assert conf["user bind control"] == ["yes"]  # carme-launch binds home, scratch, datasets
    assert conf["shared loop devices"] == ["yes"] and conf["mksquashfs procs"] == ["4"]
    assert all(len(v) == 1 for k, v in conf.items() if k != "bind path"), "a key set twice"


def test_setuid_only_when_asked(tmp_path: Path) -> None:
    conf = settings(render_conf(tmp_path, {"apptainer_setuid": True}))
    assert conf["allow setuid"] == ["yes"]
    assert conf["limit container paths"] == ["/srv/carme/images"]  # enforced there
