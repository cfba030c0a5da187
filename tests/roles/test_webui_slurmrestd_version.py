# SPDX-License-Identifier: GPL-3.0-or-later
"""carme_webui_slurmrestd_api_version: the portal's SLURMRESTD_API_VERSION, checked against what the adapter speaks."""

from __future__ import annotations

import ast
import json
from typing import Any

import jinja2
import yaml

from carme_runtime import slurmrest
from tests.roles.harness import REPO_ROOT
from webui import settings

ROLE = REPO_ROOT / "roles" / "carme_webui"
CONFIG = ROLE / "templates" / "etc" / "carme" / "webui" / "config.py.j2"


def option() -> dict[str, Any]:
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    return dict(spec["argument_specs"]["main"]["options"]["carme_webui_slurmrestd_api_version"])


def test_the_choices_are_the_adapters_and_the_default_is_the_portals() -> None:
    spec = option()
    assert spec["choices"] == [slurmrest.AUTO, *slurmrest.SUPPORTED]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert spec["default"] == defaults["carme_webui_slurmrestd_api_version"] == settings.SLURMRESTD_API_VERSION


def rendered_line(value: str) -> str:
    """The template's SLURMRESTD_API_VERSION line rendered with Jinja (to_json as Ansible's: JSON of a string)."""
    [line] = [line for line in CONFIG.read_text().splitlines() if line.startswith("SLURMRESTD_API_VERSION = ")]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)  # Python source, not HTML
    env.filters["to_json"] = json.dumps
    return env.from_string(line).render(carme_webui_slurmrestd_api_version=value)


def test_the_portal_config_names_the_version() -> None:
    for value in option()["choices"]:
        name, _eq, literal = rendered_line(str(value)).partition(" = ")
        assert name == "SLURMRESTD_API_VERSION"
        assert slurmrest.check_setting(ast.literal_eval(literal)) == value
