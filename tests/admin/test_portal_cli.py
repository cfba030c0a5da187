# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme portal totp-reset|unlock USER`` (carme_admin/portal.py): parsing, the playbook run it makes, bad user names
refused before anything runs; and the carme-portal wrapper it runs on the portal host (its own checks, run with sh)."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from carme_admin import commands
from carme_admin import portal
from carme_admin.playbook import PlaybookRun

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = ROOT / "roles/carme_webui/templates/usr/local/sbin/carme-portal.j2"


def parse(*argv: str) -> argparse.Namespace:
    return commands.build_parser().parse_args(["portal", *argv])


def test_parsing() -> None:
    args = parse("totp-reset", "bob")
    assert (args.command, args.portal_command, args.user, args.inventory, args.json) == (
        "portal", "totp-reset", "bob", None, False
    )  # fmt: skip
    args = parse("unlock", "alice", "-i", "inventories/demo", "--json")
    assert (args.portal_command, args.user, args.inventory, args.json) == (
        "unlock",
        "alice",
        Path("inventories/demo"),
        True,
    )


@pytest.mark.parametrize("argv", [["portal"], ["portal", "totp-reset"], ["portal", "delete", "bob"]])
def test_incomplete_or_unknown_commands_exit_2(argv: list[str]) -> None:
    assert commands.main(argv) == 2


def test_the_playbook_run_and_its_extra_vars(tmp_path: Path) -> None:
    run = portal.portal_run(tmp_path, parse("totp-reset", "bob"), who="carol")
    assert run == PlaybookRun(
        project=tmp_path,
        playbook="playbooks/portal-cli.yml",
        inventory=None,
        extravars={
            "carme_portal_cli_action": "totp-reset",
            "carme_portal_cli_user": "bob",
            "carme_portal_cli_actor": "carol",
        },
    )
    assert (ROOT / run.playbook).is_file()


def test_the_actor_is_a_login_name_or_unknown() -> None:
    assert portal.actor("root") == "root"
    assert portal.actor("evil name; rm") == "unknown"
    assert portal.actor() not in ("", None)


@pytest.mark.parametrize("user", ["Bob", "bob;id", "1bob", "a" * 33, "bo b", ""])
def test_a_bad_user_name_is_refused_with_exit_2_before_anything_runs(
    user: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(commands, "_play", lambda *a: pytest.fail("nothing may run"))
    assert commands.main(["portal", "totp-reset", user]) == 2
    assert f"{user!r} is not a valid user name" in capsys.readouterr().err


def test_a_run_reports_what_happened(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    runs: list[PlaybookRun] = []

    def play(out: Any, run: PlaybookRun) -> bool:
        runs.append(run)
        return run.extravars is not None and run.extravars["carme_portal_cli_user"] == "bob"

    monkeypatch.setattr(commands, "_play", play)
    monkeypatch.setenv("CARME_PROJECT_DIR", str(ROOT))
    assert commands.main(["portal", "totp-reset", "bob"]) == 0
    assert "TOTP reset for bob; they enrol again at their next login." in capsys.readouterr().err
    assert commands.main(["portal", "unlock", "nobody"]) == 1
    assert "portal unlock nobody failed" in capsys.readouterr().err
    assert [r.extravars["carme_portal_cli_action"] for r in runs if r.extravars] == ["totp-reset", "unlock"]


def test_the_playbook_checks_its_input_and_runs_the_wrapper_once() -> None:
    play = yaml.safe_load((ROOT / "playbooks/portal-cli.yml").read_text())[0]
    assert (play["hosts"], play["become"]) == ("portal", True)
    check, run = play["tasks"]
    assert "carme_portal_cli_user" in " ".join(check["ansible.builtin.assert"]["that"])
    assert run["ansible.builtin.command"]["argv"][0] == "/usr/local/sbin/carme-portal"
    assert run["run_once"] is True


# -- the wrapper (its checks run before it execs runuser) --------------------------------------------------------
@pytest.fixture
def wrapper(tmp_path: Path) -> Path:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: f"# {text}"
    text = env.from_string(WRAPPER.read_text()).render(
        ansible_managed="Ansible managed", carme_webui_user="carme-portal", carme_webui_config_dir="/etc/carme/webui",
        carme_webui_venv="/opt/carme/webui-venv",
    )  # fmt: skip
    path = tmp_path / "carme-portal"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "usage: carme-portal totp-reset|unlock USER"),
        (["delete", "bob"], "usage:"),
        (["totp-reset", "Bob"], "'Bob' is not a valid user name"),
        (["totp-reset", "bob\nroot"], "is not a valid user name"),
        (["unlock", "b" * 33], "over 32 characters"),
        (["unlock", "-bob"], "is not a valid user name"),
        (["unlock"], "usage:"),
        (["reservations-sync", "bob"], "usage:"),
        (["news-post", "upgrade"], "usage:"),
        (["news-remove", "upgrade", "text"], "usage:"),
    ],
)
def test_the_wrapper_refuses_bad_input_with_exit_2(wrapper: Path, argv: list[str], says: str) -> None:
    done = subprocess.run(["sh", str(wrapper), *argv], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and says in done.stderr


@pytest.mark.parametrize(
    ("argv", "flask_args"),
    [
        (["unlock", "bob"], ["unlock", "--actor", "carol", "--", "bob"]),
        (["reservations-sync"], ["reservations-sync", "--actor", "carol", "--"]),
        (["news-post", "upgrade", "-x; $(touch /tmp/no)\nline 2"],
         ["news-post", "--actor", "carol", "--", "upgrade", "-x; $(touch /tmp/no)\nline 2"]),
        (["news-remove", "upgrade"], ["news-remove", "--actor", "carol", "--", "upgrade"]),
    ],
)  # fmt: skip
def test_the_wrapper_runs_the_portal_command_as_the_portal_user(
    wrapper: Path, tmp_path: Path, argv: list[str], flask_args: list[str]
) -> None:
    """What it execs, each argument as it was given (a stand-in runuser prints its argv, NUL-separated)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "runuser").write_text("#!/bin/sh\nprintf '%s\\0' \"$@\"\n")
    (bin_dir / "runuser").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CARME_PORTAL_ACTOR": "carol"}
    done = subprocess.run(["sh", str(wrapper), *argv], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    flask = ["/opt/carme/webui-venv/bin/flask", "--app", "webui"]
    assert done.stdout.split("\0")[:-1] == [
        "-u", "carme-portal", "--", "env", "CARME_WEBUI_CONFIG=/etc/carme/webui/config.py", *flask, *flask_args
    ]  # fmt: skip
