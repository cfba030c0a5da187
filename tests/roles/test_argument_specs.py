# SPDX-License-Identifier: GPL-3.0-or-later
"""Style B3: every role's defaults/main.yml keys equal the options of its main argument spec."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.roles.harness import REPO_ROOT

ROLES = sorted(p.name for p in (REPO_ROOT / "roles").iterdir() if (p / "tasks").is_dir())


def test_roles_found() -> None:
    assert "slurm" in ROLES and "munge" in ROLES


@pytest.mark.parametrize("role", ROLES)
def test_defaults_match_argument_spec(role: str) -> None:
    role_dir = REPO_ROOT / "roles" / role
    defaults_file = role_dir / "defaults" / "main.yml"
    spec_file = role_dir / "meta" / "argument_specs.yml"
    assert spec_file.exists(), f"roles/{role}/meta/argument_specs.yml is missing"
    text = defaults_file.read_text() if defaults_file.exists() else ""
    defaults = yaml.safe_load(text) or {}
    # Options without a safe default are documented as a commented line (`# slurm_cluster_name:  # required`).
    commented = set(re.findall(r"^# ?([a-z][a-z0-9_]*):", text, flags=re.MULTILINE))
    options = yaml.safe_load(spec_file.read_text())["argument_specs"]["main"].get("options") or {}
    required = {name for name, spec in options.items() if (spec or {}).get("required")}
    # Required options stay commented out in defaults (B3): a default would make `required` never fire.
    assert not required & set(defaults), f"roles/{role}: required options with a default: {required & set(defaults)}"
    missing_in_spec = set(defaults) - set(options)
    missing_in_defaults = set(options) - set(defaults) - commented
    assert not commented & set(defaults), f"roles/{role}: keys both set and commented: {commented & set(defaults)}"
    assert not missing_in_spec, f"roles/{role}: defaults not in argument_specs: {sorted(missing_in_spec)}"
    assert not missing_in_defaults, (
        f"roles/{role}: argument_specs options missing from defaults/main.yml "
        f"(set them, or list them commented out): {sorted(missing_in_defaults)}"
    )
    undocumented = commented - set(options)
    assert not undocumented, f"roles/{role}: commented defaults not in argument_specs: {sorted(undocumented)}"
