# SPDX-License-Identifier: GPL-3.0-or-later
"""The demo's Debian release is chosen by one variable, CARME_RELEASE: Debian 13 unless it says bookworm."""

from __future__ import annotations

from pathlib import Path

import pytest

from carme_admin import demo


def test_trixie_is_the_default(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    assert demo.release({}) == "trixie" == demo.default_release()
    assert demo.node_vars(inventory, {}) == {
        "demo_nodes_image": "localhost/carme-node:debian13",
        "demo_nodes_security_opt": ["unmask=ALL"],
    }


def test_bookworm_gets_the_debian12_image_and_the_same_unmask(tmp_path: Path) -> None:
    """The Debian 12 demo is where `carme upgrade` starts: its nodes, upgraded in place, must run Apptainer then."""
    assert demo.node_vars(tmp_path / "hosts.yml", {"CARME_RELEASE": "bookworm"}) == {
        "demo_nodes_image": "localhost/carme-node:debian12",
        "demo_nodes_security_opt": ["unmask=ALL"],
    }


def test_trixie_gets_the_debian13_image_and_only_the_unmask(tmp_path: Path) -> None:
    env = {"CARME_RELEASE": "trixie"}
    assert demo.node_vars(tmp_path / "hosts.yml", env) == {
        "demo_nodes_image": "localhost/carme-node:debian13",
        "demo_nodes_security_opt": ["unmask=ALL"],
    }


def test_an_explicit_image_wins(tmp_path: Path) -> None:
    env = {"CARME_RELEASE": "trixie", "CARME_NODE_IMAGE": "localhost/mine:1"}
    assert demo.node_image(tmp_path / "hosts.yml", env) == "localhost/mine:1"
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  vars:\n    demo_nodes_image: localhost/inv:2\n", encoding="utf-8")
    assert demo.node_vars(inventory, env)["demo_nodes_image"] == "localhost/inv:2"
    assert demo.node_vars(inventory, env)["demo_nodes_security_opt"] == ["unmask=ALL"]


def test_an_unknown_release_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="bookworm, trixie"):
        demo.release({"CARME_RELEASE": "buster"})
