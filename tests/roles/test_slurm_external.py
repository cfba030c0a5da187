# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_manage_config: false: the check that the site's slurm.conf runs Carme's hooks (filter slurm_include_errors),
and the role's tasks/defaults for that mode. The mode itself runs in molecule/slurm_external."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.roles.harness import load_file

REPO_ROOT = Path(__file__).resolve().parents[2]
ROLE = REPO_ROOT / "roles" / "slurm"
WANTED = {"Prolog": "/etc/slurm/prolog.d/*", "Epilog": "/etc/slurm/epilog.d/*"}
SITE = "/etc/slurm/slurm.conf"
INCLUDE = "/etc/slurm/carme.conf"


def _filters() -> dict[str, Any]:
    module = load_file("roles/slurm/filter_plugins/slurm_filters.py", "slurm_filters_external")
    return module.FilterModule().filters()  # type: ignore[no-any-return]


def errors(text: str) -> list[str]:
    return _filters()["slurm_include_errors"](text, SITE, INCLUDE, WANTED)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "text",
    [
        "ClusterName=site\nInclude /etc/slurm/carme.conf\n",
        "ClusterName=site\ninclude carme.conf   # Carme's hooks\n",  # relative to slurm.conf's directory
        "Prolog=/etc/slurm/prolog.d/*\nEpilog=/etc/slurm/epilog.d/*\n",  # the site sets the lines itself
        "Prolog=/site/prolog\nInclude /etc/slurm/carme.conf\n",  # the include comes later and wins
    ],
)
def test_site_config_that_runs_the_hooks(text: str) -> None:
    assert errors(text) == []


def test_no_include_names_every_missing_key_and_the_line_to_add() -> None:
    assert errors("ClusterName=site\n# Include /etc/slurm/carme.conf\n") == [
        "it sets no Prolog (Carme needs Prolog=/etc/slurm/prolog.d/*)",
        "it sets no Epilog (Carme needs Epilog=/etc/slurm/epilog.d/*)",
        "it has no line 'Include /etc/slurm/carme.conf'",
    ]


def test_site_prolog_after_the_include_overrides_it() -> None:
    text = "Include /etc/slurm/carme.conf\nPROLOG=/site/prolog\n"
    assert errors(text) == ["Prolog=/site/prolog (line 2) is not Carme's Prolog=/etc/slurm/prolog.d/*"]


def test_another_include_does_not_count() -> None:
    assert "it has no line 'Include /etc/slurm/carme.conf'" in errors("Include /etc/slurm/site-extra.conf\n")


def test_external_mode_writes_no_site_file_and_restarts_nothing() -> None:
    """The tasks of the mode: one template (Carme's own file), a read of slurm.conf, an assert; no restart handler."""
    tasks = yaml.safe_load((ROLE / "tasks" / "external.yml").read_text())
    modules = [next(k for k in t if k.startswith("ansible.builtin.")) for t in tasks]
    assert modules == ["ansible.builtin.template", "ansible.builtin.slurp", "ansible.builtin.assert"]
    assert tasks[0]["ansible.builtin.template"]["dest"] == "{{ slurm_external_include }}"
    assert tasks[0]["notify"] == "Reconfigure the site's Slurm"
    main = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    gated = {t["ansible.builtin.import_tasks"]: t.get("when", "") for t in main}
    for managed in ("install.yml", "config.yml", "service.yml", "dbd.yml"):
        assert "slurm_manage_config | bool" in gated[managed] and "not" not in gated[managed], managed
    assert gated["external.yml"] == "not slurm_manage_config | bool"
