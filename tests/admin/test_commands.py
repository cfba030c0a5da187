# SPDX-License-Identifier: GPL-3.0-or-later
"""Argument parsing, project discovery, runner arguments and the demo helpers (no podman, no ansible run)."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from carme_admin import commands
from carme_admin import demo
from carme_admin.playbook import KEEP_RUNS
from carme_admin.playbook import PlaybookRun
from carme_admin.playbook import UsageError
from carme_admin.playbook import prepare_private_data_dir
from carme_admin.playbook import runner_kwargs
from carme_admin.playbook import split_extra_vars
from carme_admin.project import PROJECT_ENV
from carme_admin.project import find_project_dir
from carme_runtime import __version__


def make_project(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "ansible.cfg").write_text("[defaults]\n", encoding="utf-8")
    (path / "site.yml").write_text("---\n", encoding="utf-8")
    return path


# -- parsing -------------------------------------------------------------------------------------------------
def test_deploy_defaults() -> None:
    args = commands.build_parser().parse_args(["deploy"])
    assert (args.command, args.playbook, args.inventory, args.limit, args.tags) == (
        "deploy",
        "site.yml",
        None,
        None,
        None,
    )
    assert (args.check, args.json, args.extra_vars) == (False, False, [])


def test_deploy_options() -> None:
    args = commands.build_parser().parse_args(
        ["deploy", "--inventory", "inv/hosts.yml", "--limit", "head", "--tags", "slurm_config", "--check",
         "--playbook", "playbooks/slurm.yml", "-e", "a=1", "-e", "b=2", "--json"]
    )  # fmt: skip
    assert args.inventory == Path("inv/hosts.yml")
    assert (args.limit, args.tags, args.check, args.playbook, args.json) == (
        "head", "slurm_config", True, "playbooks/slurm.yml", True,
    )  # fmt: skip
    assert args.extra_vars == ["a=1", "b=2"]


def test_demo_actions() -> None:
    parser = commands.build_parser()
    assert parser.parse_args(["demo", "up", "--no-deploy"]).no_deploy is True
    assert parser.parse_args(["demo", "down"]).demo_command == "down"
    assert parser.parse_args(["demo", "status"]).demo_command == "status"


@pytest.mark.parametrize(
    "argv", [[], ["frobnicate"], ["demo"], ["demo", "sideways"], ["deploy", "--bogus"], ["deploy", "-e"]]
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert commands.main(argv) == 2
    assert "usage: carme" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert commands.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"carme {__version__}"


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert commands.main(["deploy", "--help"]) == 0
    assert "--playbook" in capsys.readouterr().out


def test_missing_playbook_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PROJECT_ENV, str(make_project(tmp_path)))
    assert commands.main(["deploy", "--playbook", "nope.yml"]) == 2
    assert "playbook not found: nope.yml" in capsys.readouterr().err


def test_missing_inventory_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PROJECT_ENV, str(make_project(tmp_path)))
    assert commands.main(["deploy", "--inventory", str(tmp_path / "missing.yml")]) == 2
    assert "inventory not found" in capsys.readouterr().err
    assert not (tmp_path / ".artifacts").exists()  # nothing started


def test_bad_extra_var_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PROJECT_ENV, str(make_project(tmp_path)))
    assert commands.main(["deploy", "-e", "not a pair"]) == 2
    assert "expected key=value" in capsys.readouterr().err


# -- extra vars --------------------------------------------------------------------------------------------
def test_split_extra_vars() -> None:
    extravars, passthrough = split_extra_vars(["a=1", "b=x c='two words'", "@vars.yml", '{"d": [1, 2]}', "empty="])
    assert extravars == {"a": "1", "b": "x", "c": "two words", "empty": ""}
    assert passthrough == ["-e", "@vars.yml", "-e", '{"d": [1, 2]}']


@pytest.mark.parametrize("value", ["", "novalue", "1x=2", "no pair=1", "=1"])
def test_split_extra_vars_rejects(value: str) -> None:
    with pytest.raises(UsageError):
        split_extra_vars([value])


# -- runner arguments --------------------------------------------------------------------------------------
def test_runner_kwargs(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    inventory = project / "hosts.yml"
    inventory.write_text("all: {}\n", encoding="utf-8")
    run = PlaybookRun(
        project=project, playbook="site.yml", inventory=inventory, limit="head", tags="slurm_config",
        check=True, extravars={"secret": "s3cr3t"}, extra_args=["-e", "@x y.yml"],
    )  # fmt: skip
    kwargs = runner_kwargs(run, project / "site.yml", "ident-1")
    assert kwargs["private_data_dir"] == str(project / ".artifacts" / "runner")
    assert kwargs["project_dir"] == str(project)
    assert kwargs["playbook"] == str(project / "site.yml")
    assert kwargs["inventory"] == str(inventory)
    assert (kwargs["limit"], kwargs["tags"], kwargs["ident"]) == ("head", "slurm_config", "ident-1")
    assert kwargs["extravars"] == {"secret": "s3cr3t"}
    assert shlex.split(kwargs["cmdline"]) == ["--check", "-e", "@x y.yml"]
    assert kwargs["rotate_artifacts"] == KEEP_RUNS == 10
    assert kwargs["suppress_env_files"] is True  # no env/extravars with secrets on disk
    assert kwargs["quiet"] is True
    assert kwargs["envvars"]["ANSIBLE_CONFIG"] == str(project / "ansible.cfg")


def test_runner_kwargs_leave_out_what_is_not_asked(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    kwargs = runner_kwargs(PlaybookRun(project=project, playbook="site.yml"), project / "site.yml", "i")
    for key in ("inventory", "limit", "tags", "extravars", "cmdline"):
        assert key not in kwargs


def test_prepare_removes_stale_env_files(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    env = project / ".artifacts" / "runner" / "env"
    env.mkdir(parents=True)
    (env / "extravars").write_text('{"old_password": "x"}', encoding="utf-8")
    (env / "cmdline").write_text("--check", encoding="utf-8")
    pdd = prepare_private_data_dir(project)
    assert not env.exists()
    assert (pdd / "artifacts").is_dir()
    assert (project / ".artifacts").stat().st_mode & 0o777 == 0o700


# -- project discovery -------------------------------------------------------------------------------------
def test_project_from_env(tmp_path: Path) -> None:
    assert find_project_dir(cwd=Path("/"), env={PROJECT_ENV: str(tmp_path)}) == tmp_path.resolve()


def test_project_found_upwards_from_cwd(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj")
    deep = project / "roles" / "slurm" / "tasks"
    deep.mkdir(parents=True)
    assert find_project_dir(cwd=deep, env={}) == project.resolve()


def test_project_needs_both_markers(tmp_path: Path) -> None:
    (tmp_path / "site.yml").write_text("---\n", encoding="utf-8")  # no ansible.cfg: not a project
    found = find_project_dir(cwd=tmp_path, env={})
    assert found != tmp_path.resolve()
    assert found == Path(commands.__file__).resolve().parents[1]  # the package's parent (editable checkout)


# -- demo helpers ------------------------------------------------------------------------------------------
class FakeRunner:
    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> tuple[int, str, str]:
        assert isinstance(argv, list), "argv lists only"
        self.calls.append(argv)
        return self.answers.get(tuple(argv), (1, "", "unexpected call"))


PS = ("podman", "ps", "-a", "--filter", "label=carme.demo=true", "--format", "json")


def exec_argv(name: str) -> tuple[str, ...]:
    return ("podman", "exec", name, "systemctl", "is-system-running")


def test_demo_status_all_running(capsys: pytest.CaptureFixture[str]) -> None:
    ps = [{"Names": [n], "State": "running"} for n in demo.DEMO_NODES]
    answers = {PS: (0, json.dumps(ps), "")}
    answers.update({exec_argv(n): (0, "running\n", "") for n in demo.DEMO_NODES})
    assert commands.cmd_demo_status(FakeRunner(answers)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "STATE", "SYSTEMD"]
    assert out[1].split() == ["carme-demo-head", "running", "running"]
    assert len(out) == 4


def test_demo_status_degraded_missing_and_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    ps = [{"Names": ["carme-demo-head"], "State": "running"}, {"Names": ["carme-demo-node1"], "State": "exited"}]
    runner = FakeRunner({PS: (0, json.dumps(ps), ""), exec_argv("carme-demo-head"): (1, "degraded\n", "")})
    assert commands.cmd_demo_status(runner) == 3
    rows = [line.split()[:3] for line in capsys.readouterr().out.splitlines()[1:4]]
    assert rows == [
        ["carme-demo-head", "running", "degraded"],
        ["carme-demo-node1", "exited", "-"],
        ["carme-demo-node2", "missing", "-"],
    ]
    assert [c[1] for c in runner.calls] == ["ps", "exec"]  # systemd asked only where the container runs


def test_demo_status_without_podman(capsys: pytest.CaptureFixture[str]) -> None:
    assert commands.cmd_demo_status(FakeRunner({PS: (127, "", "No such file or directory: 'podman'")})) == 3
    assert "podman ps failed" in capsys.readouterr().err


def test_preflight() -> None:
    image = demo.release_image({})
    exists = ("podman", "image", "exists", image)
    assert "podman is not installed" in demo.preflight(image, FakeRunner({}), which=lambda _n: None)
    missing = demo.preflight(image, FakeRunner({exists: (1, "", "")}), which=lambda _n: "/usr/bin/podman")
    assert "make image" in missing
    assert "images/node/build.sh" in missing
    assert demo.preflight(image, FakeRunner({exists: (0, "", "")}), which=lambda _n: "/usr/bin/podman") == ""


def test_preflight_wheelhouse(tmp_path: Path) -> None:
    image = demo.release_image({})
    runner = FakeRunner({("podman", "image", "exists", image): (0, "", "")})
    missing = demo.preflight(image, runner, which=lambda _n: "/usr/bin/podman", wheelhouse=tmp_path / "none")
    assert "make wheelhouse" in missing
    assert demo.preflight(image, runner, which=lambda _n: "/usr/bin/podman", wheelhouse=tmp_path) == ""


def test_https_port_and_image_from_inventory(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  vars:\n    demo_nodes_https_port: 9443\n", encoding="utf-8")
    assert demo.https_port(inventory) == 9443
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "group_vars" / "all" / "demo.yml").write_text(
        "demo_nodes_https_port: '10443'\ndemo_nodes_image: localhost/other:1\n", encoding="utf-8"
    )
    assert demo.https_port(inventory) == 10443
    assert demo.node_image(inventory) == "localhost/other:1"


def test_https_port_defaults(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  vars:\n    demo_nodes_https_port: '{{ some_port }}'\n", encoding="utf-8")
    assert demo.https_port(inventory) == 8443
    assert demo.https_port(tmp_path / "missing.yml") == 8443
    assert demo.node_image(inventory, {}) == "localhost/carme-node:debian13"


def test_repo_demo_inventory_gives_the_published_port() -> None:
    repo = Path(commands.__file__).resolve().parents[1]
    if not (repo / demo.DEMO_INVENTORY).is_file():
        pytest.skip("not a checkout")
    assert demo.https_port(repo / demo.DEMO_INVENTORY) == 8443
    assert demo.apps_port(repo / demo.DEMO_INVENTORY) == 8444


def test_login_hints() -> None:
    text = "\n".join(demo.login_hints(9443, 9444))
    assert "https://127.0.0.1:9443/" in text and "https://<job>-<tag>.apps.localhost:9444/" in text
    assert "podman exec -it carme-demo-head bash" in text
    assert "sinfo" in text
    assert ".secrets/demo/" in text


# -- which checkout owns the demo ----------------------------------------------------------------------------
def test_demo_id_is_created_root_only_and_kept(tmp_path: Path) -> None:
    secrets_dir = tmp_path / "secrets" / "demo"
    ident = demo.demo_id(secrets_dir)
    assert len(ident) == 16
    assert (secrets_dir / "demo-id").stat().st_mode & 0o777 == 0o600
    assert secrets_dir.stat().st_mode & 0o777 == 0o700
    assert demo.demo_id(secrets_dir) == ident
    assert demo.owner_labels(secrets_dir, ident) == {
        "carme.demo_id": ident,
        "carme.demo_secrets": str(secrets_dir.resolve()),
    }


def ps_entry(name: str, state: str, ident: str = "", owner: str = "") -> dict[str, object]:
    labels = {"carme.demo": "true"}
    if ident:
        labels.update({"carme.demo_id": ident, "carme.demo_secrets": owner})
    return {"Names": [name], "State": state, "Labels": labels}


def test_demo_containers_tells_dead_running_ones() -> None:
    ps = [ps_entry("carme-demo-head", "running", "a1", "/x"), ps_entry("carme-demo-node1", "running"),
          ps_entry("carme-demo-node2", "exited", "a1", "/x")]  # fmt: skip
    runner = FakeRunner({
        PS: (0, json.dumps(ps), ""),
        ("podman", "exec", "carme-demo-head", "true"): (0, "", ""),
        ("podman", "exec", "carme-demo-node1", "true"): (255, "", "cannot exec in a stopped container"),
    })  # fmt: skip
    containers, error = demo.demo_containers(runner)
    assert error == ""
    assert containers == [
        demo.Container("carme-demo-head", "running", "a1", "/x", alive=True),
        demo.Container("carme-demo-node1", "running", "", "", alive=False),
        demo.Container("carme-demo-node2", "exited", "a1", "/x", alive=False),
    ]
    assert ["podman", "exec", "carme-demo-node2", "true"] not in runner.calls


def test_demo_containers_reports_podman_failure() -> None:
    assert demo.demo_containers(FakeRunner({PS: (125, "", "boom")})) == ([], "podman ps failed: boom")


def own(name: str, state: str = "running", alive: bool = True, owner: str = "/me") -> demo.Container:
    return demo.Container(name, state, "mine", owner, alive)


def test_plan_up_reuses_own_demo() -> None:
    assert demo.plan_up([], "mine") == demo.UpPlan()
    assert demo.plan_up([own(n) for n in demo.DEMO_NODES], "mine") == demo.UpPlan()
    # stopped cleanly (podman knows): the playbook starts it again
    assert demo.plan_up([own("carme-demo-head", "exited", alive=False)], "mine") == demo.UpPlan()


def test_plan_up_recreates_own_dead_containers() -> None:
    plan = demo.plan_up([own("carme-demo-node2", alive=False), own("carme-demo-head")], "mine")
    assert plan.remove == ("carme-demo-node2", "carme-demo-head")  # slurmctld caches the old node addresses
    assert not plan.remove_all and not plan.refuse
    assert "/home is kept" in plan.note


def test_plan_up_replaces_orphaned_demo(tmp_path: Path) -> None:
    gone = demo.Container("carme-demo-head", "running", "theirs", str(tmp_path / "deleted-clone"), alive=False)
    unlabelled = demo.Container("carme-demo-node1", "running", "", "", alive=False)
    for containers in ([gone], [unlabelled], [own("carme-demo-node2"), unlabelled]):
        plan = demo.plan_up(containers, "mine")
        assert plan.remove_all and not plan.refuse
        assert "checkout or secrets are gone" in plan.note
    # the other checkout exists but has been given a new id since: its old demo is orphaned too
    (tmp_path / "demo-id").write_text("newer\n", encoding="utf-8")
    stale = demo.Container("carme-demo-head", "running", "theirs", str(tmp_path), alive=True)
    assert demo.plan_up([stale], "mine").remove_all


def test_plan_up_refuses_a_live_checkouts_demo_unless_replace(tmp_path: Path) -> None:
    (tmp_path / "demo-id").write_text("theirs\n", encoding="utf-8")
    theirs = demo.Container("carme-demo-head", "running", "theirs", str(tmp_path), alive=True)
    plan = demo.plan_up([theirs], "mine")
    assert not plan.remove_all
    assert str(tmp_path) in plan.refuse and "carme demo down" in plan.refuse and "--replace" in plan.refuse
    replaced = demo.plan_up([theirs], "mine", replace=True)
    assert replaced.remove_all and "--replace" in replaced.note


@pytest.fixture
def demo_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[tuple[str, object]]]:
    project = make_project(tmp_path / "checkout")
    monkeypatch.setenv(PROJECT_ENV, str(project))
    monkeypatch.setattr(demo, "preflight", lambda *_a, **_k: "")
    plays: list[tuple[str, object]] = []

    def fake_demo_nodes(_out: object, _project: Path, state: str, labels: object = None) -> bool:
        plays.append((state, labels))
        return True

    monkeypatch.setattr(commands, "_demo_nodes", fake_demo_nodes)
    return project, plays


def up_args(*extra: str) -> argparse.Namespace:
    return commands.build_parser().parse_args(["demo", "up", "--no-deploy", *extra])


def test_demo_up_refuses_another_checkouts_demo(
    demo_project: tuple[Path, list[tuple[str, object]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _project, plays = demo_project
    other = tmp_path / "other"
    other.mkdir()
    (other / "demo-id").write_text("theirs\n", encoding="utf-8")
    runner = FakeRunner({
        PS: (0, json.dumps([ps_entry("carme-demo-head", "exited", "theirs", str(other))]), ""),
    })  # fmt: skip
    assert commands.cmd_demo_up(up_args(), runner) == 1
    assert plays == []
    assert f"another checkout (secrets in {other})" in capsys.readouterr().err


def test_demo_up_replaces_an_orphan_and_labels_its_own(
    demo_project: tuple[Path, list[tuple[str, object]]], capsys: pytest.CaptureFixture[str]
) -> None:
    project, plays = demo_project
    runner = FakeRunner({
        PS: (0, json.dumps([ps_entry("carme-demo-head", "running")]), ""),
        ("podman", "exec", "carme-demo-head", "true"): (255, "", "cannot exec in a stopped container"),
    })  # fmt: skip
    assert commands.cmd_demo_up(up_args(), runner) == 0
    ident = (project / ".secrets/demo/demo-id").read_text(encoding="utf-8").strip()
    assert plays == [("absent", None), ("present", demo.owner_labels(project / ".secrets/demo", ident))]
    assert "removing the demo of another checkout" in capsys.readouterr().out


def test_demo_up_recreates_its_own_dead_containers(demo_project: tuple[Path, list[tuple[str, object]]]) -> None:
    project, plays = demo_project
    ident = demo.demo_id(project / ".secrets/demo")
    owner = str((project / ".secrets/demo").resolve())
    runner = FakeRunner({
        PS: (0, json.dumps([ps_entry("carme-demo-head", "running", ident, owner),
                            ps_entry("carme-demo-node1", "running", ident, owner)]), ""),
        ("podman", "exec", "carme-demo-head", "true"): (255, "", "stopped"),
        ("podman", "exec", "carme-demo-node1", "true"): (0, "", ""),
        ("podman", "rm", "--force", "carme-demo-head"): (0, "carme-demo-head\n", ""),
        ("podman", "rm", "--force", "carme-demo-node1"): (0, "carme-demo-node1\n", ""),
    })  # fmt: skip
    assert commands.cmd_demo_up(up_args(), runner) == 0
    assert ["podman", "rm", "--force", "carme-demo-head"] in runner.calls
    assert ["podman", "rm", "--force", "carme-demo-node1"] in runner.calls
    assert [state for state, _labels in plays] == ["present"]


def test_a_playbook_run_leaves_the_signal_handlers_as_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ansible-runner sets SIGTERM and SIGINT to a handler that only sets a flag; carme puts its own back."""
    before = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}

    class Runner:
        status, rc = "successful", 0
        config = type("Config", (), {"artifact_dir": str(tmp_path / "a")})

    def fake_run(**_kwargs: object) -> Runner:  # what ansible_runner.run does in the main thread
        signal.signal(signal.SIGTERM, lambda *_: None)
        signal.signal(signal.SIGINT, lambda *_: None)
        return Runner()

    monkeypatch.setitem(sys.modules, "ansible_runner", type("M", (), {"run": staticmethod(fake_run)}))
    monkeypatch.setenv(PROJECT_ENV, str(make_project(tmp_path)))
    assert commands.main(["deploy"]) == 0
    assert {number: signal.getsignal(number) for number in before} == before
