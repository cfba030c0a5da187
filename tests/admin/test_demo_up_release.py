# SPDX-License-Identifier: GPL-3.0-or-later
"""`carme demo up` hands CARME_RELEASE's node image and podman security options to playbooks/demo_nodes.yml."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from carme_admin import commands
from carme_admin import demo
from carme_admin.playbook import PlaybookRun
from carme_admin.project import PROJECT_ENV


def played_extravars(project: Path, state: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    runs: list[PlaybookRun] = []

    def fake_play(_out: object, run: PlaybookRun) -> bool:
        runs.append(run)
        return True

    monkeypatch.setattr(commands, "_play", fake_play)
    assert commands._demo_nodes(commands._Output(False), project, state)
    assert [run.playbook for run in runs] == [demo.DEMO_PLAYBOOK]
    return dict(runs[0].extravars or {})


def test_bookworm_nodes_keep_the_debian12_image_and_get_the_unmask_for_the_upgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CARME_RELEASE", "bookworm")
    monkeypatch.delenv("CARME_NODE_IMAGE", raising=False)
    assert played_extravars(tmp_path, "present", monkeypatch) == {
        "demo_nodes_state": "present",
        "demo_nodes_image": "localhost/carme-node:debian12",
        "demo_nodes_security_opt": ["unmask=ALL"],  # upgraded in place later, they run Apptainer
    }


def test_trixie_nodes_get_the_debian13_image_and_unmask_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CARME_RELEASE", raising=False)  # the default release
    monkeypatch.delenv("CARME_NODE_IMAGE", raising=False)
    extravars = played_extravars(tmp_path, "present", monkeypatch)
    assert extravars["demo_nodes_image"] == "localhost/carme-node:debian13"
    assert extravars["demo_nodes_security_opt"] == ["unmask=ALL"]


def test_new_nodes_are_not_fed_the_cached_facts_of_the_old_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bookworm demo replaced within the hour by a trixie one: the cached facts said Debian 12 (ansible.cfg)."""
    cache = tmp_path / demo.FACT_CACHE
    cache.mkdir(parents=True)
    (cache / "carme-demo-node1").write_text('{"ansible_distribution_major_version": "12"}', encoding="utf-8")
    monkeypatch.setenv("CARME_RELEASE", "trixie")
    played_extravars(tmp_path, "present", monkeypatch)
    assert list(cache.iterdir()) == []
    played_extravars(tmp_path, "present", monkeypatch)  # no cache at all is fine too
    cache.rmdir()
    played_extravars(tmp_path, "present", monkeypatch)


def test_removing_the_nodes_needs_no_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARME_RELEASE", "buster")
    assert played_extravars(tmp_path, "absent", monkeypatch) == {"demo_nodes_state": "absent"}


def test_demo_up_refuses_an_unknown_release_before_touching_podman(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ansible.cfg").write_text("[defaults]\n", encoding="utf-8")
    (tmp_path / "site.yml").write_text("---\n", encoding="utf-8")
    monkeypatch.setenv(PROJECT_ENV, str(tmp_path))
    monkeypatch.setenv("CARME_RELEASE", "buster")
    monkeypatch.delenv("CARME_NODE_IMAGE", raising=False)

    def no_podman(argv: object) -> tuple[int, str, str]:
        raise AssertionError(f"podman was called: {argv}")

    args = argparse.Namespace(json=False, replace=False, no_deploy=True)
    assert commands.cmd_demo_up(args, no_podman) == 2
    err = capsys.readouterr().err
    assert "CARME_RELEASE must be one of bookworm, trixie" in err and "'buster'" in err
