"""Argument parsing, project discovery, runner arguments and the demo helpers (no podman, no ansible run)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

import pytest

from carme_runtime import __version__
from carme_runtime.admin import cli
from carme_runtime.admin import demo
from carme_runtime.admin.playbook import KEEP_RUNS
from carme_runtime.admin.playbook import PlaybookRun
from carme_runtime.admin.playbook import UsageError
from carme_runtime.admin.playbook import prepare_private_data_dir
from carme_runtime.admin.playbook import runner_kwargs
from carme_runtime.admin.playbook import split_extra_vars
from carme_runtime.admin.project import PROJECT_ENV
from carme_runtime.admin.project import find_project_dir


def make_project(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "ansible.cfg").write_text("[defaults]\n", encoding="utf-8")
    (path / "site.yml").write_text("---\n", encoding="utf-8")
    return path


# -- parsing -------------------------------------------------------------------------------------------------
def test_deploy_defaults() -> None:
    args = cli.build_parser().parse_args(["deploy"])
    assert (args.command, args.playbook, args.inventory, args.limit, args.tags) == (
        "deploy",
        "site.yml",
        None,
        None,
        None,
    )
    assert (args.check, args.json, args.extra_vars) == (False, False, [])


def test_deploy_options() -> None:
    args = cli.build_parser().parse_args(
        ["deploy", "--inventory", "inv/hosts.yml", "--limit", "head", "--tags", "slurm_config", "--check",
         "--playbook", "playbooks/slurm.yml", "-e", "a=1", "-e", "b=2", "--json"]
    )  # fmt: skip
    assert args.inventory == Path("inv/hosts.yml")
    assert (args.limit, args.tags, args.check, args.playbook, args.json) == (
        "head", "slurm_config", True, "playbooks/slurm.yml", True,
    )  # fmt: skip
    assert args.extra_vars == ["a=1", "b=2"]


def test_demo_actions() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["demo", "up", "--no-deploy"]).no_deploy is True
    assert parser.parse_args(["demo", "down"]).demo_command == "down"
    assert parser.parse_args(["demo", "status"]).demo_command == "status"


@pytest.mark.parametrize(
    "argv", [[], ["frobnicate"], ["demo"], ["demo", "sideways"], ["deploy", "--bogus"], ["deploy", "-e"]]
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    assert "usage: carme" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"carme {__version__}"


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["deploy", "--help"]) == 0
    assert "--playbook" in capsys.readouterr().out


def test_missing_playbook_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PROJECT_ENV, str(make_project(tmp_path)))
    assert cli.main(["deploy", "--playbook", "nope.yml"]) == 2
    assert "playbook not found: nope.yml" in capsys.readouterr().err


def test_missing_inventory_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PROJECT_ENV, str(make_project(tmp_path)))
    assert cli.main(["deploy", "--inventory", str(tmp_path / "missing.yml")]) == 2
    assert "inventory not found" in capsys.readouterr().err
    assert not (tmp_path / ".artifacts").exists()  # nothing started


def test_bad_extra_var_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PROJECT_ENV, str(make_project(tmp_path)))
    assert cli.main(["deploy", "-e", "not a pair"]) == 2
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
    assert found == Path(cli.__file__).resolve().parents[2]  # the package's parent (editable checkout)


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
    assert cli.cmd_demo_status(FakeRunner(answers)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "STATE", "SYSTEMD"]
    assert out[1].split() == ["carme-demo-head", "running", "running"]
    assert len(out) == 4


def test_demo_status_degraded_missing_and_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    ps = [{"Names": ["carme-demo-head"], "State": "running"}, {"Names": ["carme-demo-node1"], "State": "exited"}]
    runner = FakeRunner({PS: (0, json.dumps(ps), ""), exec_argv("carme-demo-head"): (1, "degraded\n", "")})
    assert cli.cmd_demo_status(runner) == 3
    rows = [line.split()[:3] for line in capsys.readouterr().out.splitlines()[1:4]]
    assert rows == [
        ["carme-demo-head", "running", "degraded"],
        ["carme-demo-node1", "exited", "-"],
        ["carme-demo-node2", "missing", "-"],
    ]
    assert [c[1] for c in runner.calls] == ["ps", "exec"]  # systemd asked only where the container runs


def test_demo_status_without_podman(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.cmd_demo_status(FakeRunner({PS: (127, "", "No such file or directory: 'podman'")})) == 3
    assert "podman ps failed" in capsys.readouterr().err


def test_preflight() -> None:
    image = demo.DEFAULT_IMAGE
    exists = ("podman", "image", "exists", image)
    assert "podman is not installed" in demo.preflight(image, FakeRunner({}), which=lambda _n: None)
    missing = demo.preflight(image, FakeRunner({exists: (1, "", "")}), which=lambda _n: "/usr/bin/podman")
    assert "make image" in missing
    assert "images/node/build.sh" in missing
    assert demo.preflight(image, FakeRunner({exists: (0, "", "")}), which=lambda _n: "/usr/bin/podman") == ""


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
    assert demo.node_image(inventory) == "localhost/carme-node:debian12"


def test_repo_demo_inventory_gives_the_published_port() -> None:
    repo = Path(cli.__file__).resolve().parents[2]
    if not (repo / demo.DEMO_INVENTORY).is_file():
        pytest.skip("not a checkout")
    assert demo.https_port(repo / demo.DEMO_INVENTORY) == 8443


def test_login_hints() -> None:
    text = "\n".join(demo.login_hints(9443))
    assert "https://localhost:9443/" in text
    assert "podman exec -it carme-demo-head bash" in text
    assert "sinfo" in text
    assert ".secrets/demo/" in text
