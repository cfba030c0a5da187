# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme``: the admin CLI (start a site, check its hosts, deploy the cluster, run the embedded demo, portal accounts).

Exit codes: 0 success, 1 a playbook or command failed, 2 bad command line, 3 (`demo status`) not every
demo node runs with systemd `running`, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import TextIO

from carme_admin import backup
from carme_admin import bundle
from carme_admin import check
from carme_admin import demo
from carme_admin import portal
from carme_admin import site
from carme_admin import upgrade
from carme_admin.playbook import PlaybookRun
from carme_admin.playbook import RunResult
from carme_admin.playbook import UsageError
from carme_admin.playbook import run_playbook
from carme_admin.playbook import split_extra_vars
from carme_admin.progress import ProgressPrinter
from carme_admin.project import find_project_dir
from carme_runtime import __version__
from carme_runtime.exit_codes import ExitCode

EXIT_NOT_RUNNING = 3
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="carme",
        description="Carme admin CLI: deploy the cluster with Ansible, run the embedded demo cluster, reset a "
        "portal user's TOTP or unlock them (carme portal totp-reset USER, carme portal unlock USER).",
        epilog="The project directory is $CARME_PROJECT_DIR, else the nearest directory upwards holding "
        "site.yml and ansible.cfg.",
    )
    parser.add_argument("--version", action="version", version=f"carme {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_deploy(commands)
    _add_demo(commands)
    _add_image(commands)
    portal.add_parser(commands)
    site.add_parser(commands)
    check.add_parser(commands)
    bundle.add_parser(commands)
    backup.add_parser(commands)
    upgrade.add_parser(commands)
    return parser


def _add_deploy(commands: Any) -> None:
    deploy = commands.add_parser("deploy", help="run site.yml (or --playbook) on the inventory")
    deploy.add_argument("--inventory", "-i", type=Path, help="inventory (default: ansible.cfg's, the demo)")
    deploy.add_argument("--limit", "-l", help="only these hosts or groups (ansible pattern)")
    deploy.add_argument("--tags", "-t", help="only tasks with these tags (comma-separated)")
    deploy.add_argument("--check", "-C", action="store_true", help="dry run (ansible check mode)")
    deploy.add_argument("--diff", "-D", action="store_true", help="record file differences in the artifacts")
    deploy.add_argument("--playbook", default="site.yml", help="playbook, relative to the project (site.yml)")
    check.add_vault_option(deploy)
    deploy.add_argument(
        "-e", "--extra-vars", dest="extra_vars", action="append", default=[], metavar="K=V",
        help="extra variable (repeatable): key=value, @file or a JSON document",
    )  # fmt: skip
    _add_output_options(deploy)


def _add_demo(commands: Any) -> None:
    demo_cmd = commands.add_parser("demo", help="the embedded demo cluster (podman containers on this host)")
    demo_sub = demo_cmd.add_subparsers(dest="demo_command", metavar="ACTION", required=True)
    up = demo_sub.add_parser("up", help="create head, node1, node2 and deploy site.yml on them")
    up.add_argument("--no-deploy", action="store_true", help="only create the containers")
    up.add_argument(
        "--replace", action="store_true",
        help="delete a demo deployed from another checkout (its containers, network, /home and backup volumes)",
    )  # fmt: skip
    _add_output_options(up)
    down = demo_sub.add_parser("down", help="remove the demo containers")
    _add_output_options(down)
    demo_sub.add_parser("status", help="state of the demo containers and of systemd in them")


def _add_image(commands: Any) -> None:
    image_cmd = commands.add_parser("image", help="session images (images/session/*.def): build, catalogue")
    image_sub = image_cmd.add_subparsers(dest="image_command", metavar="ACTION", required=True)
    build = image_sub.add_parser("build", help="build image NAME for the runtime, record its digest, register it")
    build.add_argument("name", help="definition name (images/session/NAME.def)")
    build.add_argument(
        "--runtime", choices=("apptainer", "charliecloud"),
        default=os.environ.get("CARME_CONTAINER_RUNTIME", "apptainer"),
        help="the compute nodes' container runtime (default: $CARME_CONTAINER_RUNTIME, else apptainer)",
    )  # fmt: skip
    build.add_argument("--dest", type=Path, default=Path("/var/lib/carme/images"),
                       help="directory every node sees (shared or copied), default /var/lib/carme/images")  # fmt: skip
    build.add_argument("--wheelhouse", type=Path, default=Path("/var/cache/carme/wheelhouse"),
                       help="wheels and archives to install from (bound at /opt/carme/wheelhouse)")  # fmt: skip
    build.add_argument(
        "--base", type=Path,
        help="base root filesystem directory (Charliecloud: default scripts/image-base.sh; Apptainer: replaces "
        "the first definition's Bootstrap: docker, for builders without a registry; with --fakeroot its /dev must "
        "be empty)",
    )  # fmt: skip
    build.add_argument(
        "--fakeroot", action="store_true",
        help="Apptainer: build with --fakeroot (a builder that is not real root, e.g. root in an unprivileged "
        "container; needs a range for the user in /etc/subuid and /etc/subgid)",
    )  # fmt: skip
    build.add_argument("--apptainer", default="apptainer", help="the apptainer executable")
    build.add_argument(
        "--register", metavar="CMD",
        help="portal admin command the catalogue entry is given to, e.g. 'flask --app webui' run as the portal "
        "user on the portal host; without it the command is printed",
    )  # fmt: skip
    catalog_cmd = image_sub.add_parser("catalog", help="print (or --write) images/session/catalog.json")
    catalog_cmd.add_argument("--write", action="store_true", help="rewrite the file from the definitions")


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true",
        help="print the final stats as JSON on stdout (progress goes to stderr)",
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version exit 0, usage errors exit 2
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    try:
        if args.command == "deploy":
            return cmd_deploy(args)
        if args.command == "image":
            return cmd_image(args)
        if args.command == "portal":
            return cmd_portal(args)
        if args.command == "site":
            return site.cmd_site(args)
        if args.command == "check":
            return cmd_check(args)
        if args.command == "bundle":
            return bundle.cmd_bundle(args)
        if args.command == "backup":
            out = _Output(args.json)
            return out.done(backup.cmd_backup(args, find_project_dir(), lambda run: _play(out, run), out.stream))
        if args.command == "upgrade":
            out = _Output(args.json and not args.status)
            return out.done(upgrade.cmd_upgrade(args, find_project_dir(), lambda run: _play(out, run), out.stream))
        if args.demo_command == "status":
            return cmd_demo_status()
        if args.demo_command == "up":
            return cmd_demo_up(args)
        return cmd_demo_down(args)
    except UsageError as exc:
        sys.stderr.write(f"carme: error: {exc}\n")
        return ExitCode.USAGE
    except KeyboardInterrupt:
        sys.stderr.write("\ncarme: interrupted\n")
        return EXIT_INTERRUPTED


# -- deploy ------------------------------------------------------------------------------------------------
class _Output:
    """Where progress goes (stderr when --json owns stdout) and the runs' results for --json."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.stream: TextIO = sys.stderr if as_json else sys.stdout
        self.runs: list[dict[str, object]] = []

    def printer(self) -> ProgressPrinter:
        width = shutil.get_terminal_size((120, 24)).columns
        return ProgressPrinter(self.stream, width=width)

    def record(self, playbook: str, printer: ProgressPrinter, result: RunResult) -> None:
        self.runs.append(
            {"playbook": playbook, "status": result.status, "rc": result.rc,
             "artifacts": str(result.artifacts), **printer.as_dict()}
        )  # fmt: skip

    def done(self, code: int) -> int:
        if self.as_json:
            summary: dict[str, object] = {
                "ok": code == 0,
                "changed": sum(int(str(r["changed"])) for r in self.runs),
                "failed": sum(int(str(r["failed"])) for r in self.runs),
                "unreachable": sum(int(str(r["unreachable"])) for r in self.runs),
                "runs": self.runs,
            }
            if len(self.runs) == 1:
                summary = {**self.runs[0], **summary}
            sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return code


def _play(out: _Output, run: PlaybookRun) -> bool:
    printer = out.printer()
    result = run_playbook(run, printer)
    out.record(run.playbook, printer, result)
    if result.status == "canceled":  # ansible-runner turned Ctrl-C into a cancel
        raise KeyboardInterrupt
    return result.ok and printer.failed_total == 0 and printer.unreachable_total == 0


def cmd_deploy(args: argparse.Namespace) -> int:
    project = find_project_dir()
    extravars, extra_args = split_extra_vars(args.extra_vars)
    run = PlaybookRun(
        project=project,
        playbook=args.playbook,
        inventory=args.inventory,
        limit=args.limit,
        tags=args.tags,
        check=args.check,
        diff=args.diff,
        extravars=extravars,
        extra_args=[*extra_args, *check.vault_args(args.inventory, args.vault_password_file)],
        deploy_lock=True,  # playbooks/upgrade_preflight.yml refuses while it is held
    )
    out = _Output(args.json)
    return out.done(ExitCode.OK if _play(out, run) else ExitCode.ERROR)


def cmd_check(args: argparse.Namespace) -> int:
    """The preflight: progress on stderr, the per-host table (or --json) on stdout; 1 on any problem."""
    extravars, extra_args = split_extra_vars(args.extra_vars)
    run = PlaybookRun(
        project=find_project_dir(),
        playbook=check.PLAYBOOK,
        inventory=args.inventory,
        limit=args.limit,
        extravars=extravars,
        extra_args=[*extra_args, *check.vault_args(args.inventory, args.vault_password_file)],
    )
    findings = check.Findings()
    printer = check.CheckPrinter(sys.stderr, findings, width=shutil.get_terminal_size((120, 24)).columns)
    if run_playbook(run, printer).status == "canceled":
        raise KeyboardInterrupt
    return check.report(findings, sys.stdout, args.json)


def cmd_portal(args: argparse.Namespace) -> int:
    run = portal.portal_run(find_project_dir(), args)
    out = _Output(args.json)
    ok = _play(out, run)
    portal.report(args, ok)
    return out.done(ExitCode.OK if ok else ExitCode.ERROR)


# -- image -------------------------------------------------------------------------------------------------
def cmd_image(args: argparse.Namespace) -> int:
    from carme_admin import images

    try:
        defs = images.load_all()
        if args.image_command == "catalog":
            text = images.catalog_text(defs)
            problems = [p for d in defs for p in images.check_definition(d, defs)]
            if problems:
                sys.stderr.write("".join(f"carme: {p}\n" for p in problems))
                return ExitCode.ERROR
            if args.write:
                images.CATALOG.write_text(text)
            else:
                sys.stdout.write(text)
            return ExitCode.OK
        base = args.base
        if args.runtime == "charliecloud" and base is None:
            script = find_project_dir() / "scripts" / "image-base.sh"
            done = subprocess.run(["bash", str(script)], check=True, capture_output=True, text=True)
            base = Path(done.stdout.strip().splitlines()[-1])
        built = images.build(args.name, args.runtime, args.dest, args.wheelhouse, defs=defs, base=base,
                             executable=args.apptainer, fakeroot=args.fakeroot)  # fmt: skip
    except images.DefinitionError as exc:
        sys.stderr.write(f"carme: error: {exc}\n")
        return ExitCode.USAGE
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.stderr.write(f"carme: image build failed: {exc}\n")
        return ExitCode.ERROR
    print(json.dumps({"name": built.defn.name, "runtime": args.runtime, "path": str(built.path),
                      "apps": built.defn.apps, "digest": built.digest}, sort_keys=True))  # fmt: skip
    argv = images.register_argv(shlex.split(args.register or "flask --app webui"), built)
    if not args.register:
        print("register it in the portal's catalogue (as the portal user, on the portal host):")
        print("  " + shlex.join(argv))
        return ExitCode.OK
    return ExitCode.OK if subprocess.run(argv, check=False).returncode == 0 else ExitCode.ERROR


# -- demo --------------------------------------------------------------------------------------------------
def _demo_nodes(out: _Output, project: Path, state: str, labels: dict[str, str] | None = None) -> bool:
    extravars: dict[str, Any] = {"demo_nodes_state": state}
    if state == "present":
        extravars.update(demo.node_vars(project / demo.DEMO_INVENTORY))  # CARME_RELEASE's image and options
        demo.clear_fact_cache(project)
    if labels:
        extravars["demo_nodes_labels"] = labels
    run = PlaybookRun(
        project=project,
        playbook=demo.DEMO_PLAYBOOK,
        inventory=project / demo.DEMO_INVENTORY,
        extravars=extravars,
    )
    return _play(out, run)


def _clear_for_up(out: _Output, project: Path, ident: str, replace: bool, runner: demo.CmdRunner) -> bool:
    """Remove what stands in the way of this checkout's demo (see demo.plan_up); False when refused."""
    containers, error = demo.demo_containers(runner)
    if error:
        sys.stderr.write(f"carme: {error}\n")
        return False
    plan = demo.plan_up(containers, ident, replace)
    if plan.refuse:
        sys.stderr.write(f"carme: {plan.refuse}\n")
        return False
    if plan.note:
        out.stream.write(f"carme: {plan.note}\n")
    if plan.remove_all and not _demo_nodes(out, project, "absent"):
        out.stream.write("carme: removing the other demo failed (see above)\n")
        return False
    for name in plan.remove:
        rc, _out, err = runner(["podman", "rm", "--force", name])
        if rc != 0:
            sys.stderr.write(f"carme: podman rm {name} failed: {err.strip() or f'rc={rc}'}\n")
            return False
    return True


def cmd_demo_up(args: argparse.Namespace, runner: demo.CmdRunner = demo.run_cmd) -> int:
    project = find_project_dir()
    inventory = project / demo.DEMO_INVENTORY
    out = _Output(args.json)
    try:
        image = demo.node_vars(inventory)["demo_nodes_image"]
    except ValueError as exc:  # an unknown CARME_RELEASE
        sys.stderr.write(f"carme: {exc}\n")
        return out.done(ExitCode.USAGE)
    problem = demo.preflight(image, runner, wheelhouse=project / demo.WHEELHOUSE)
    if problem:
        sys.stderr.write(f"carme: {problem}\n")
        return out.done(ExitCode.ERROR)
    secrets_dir = project / demo.SECRETS_DIR
    ident = demo.demo_id(secrets_dir)
    if not _clear_for_up(out, project, ident, args.replace, runner):
        return out.done(ExitCode.ERROR)
    if not _demo_nodes(out, project, "present", demo.owner_labels(secrets_dir, ident)):
        out.stream.write("carme: creating the demo nodes failed (see above)\n")
        return out.done(ExitCode.ERROR)
    if not args.no_deploy:
        site = PlaybookRun(project=project, playbook="site.yml", inventory=inventory)
        if not _play(out, site):
            out.stream.write("carme: deploying site.yml on the demo nodes failed (see above)\n")
            return out.done(ExitCode.ERROR)
    hints = demo.login_hints(demo.https_port(inventory), demo.apps_port(inventory))
    if args.no_deploy:
        hints[0] = "The demo nodes exist; deploy them with: carme deploy"
    out.stream.write("\n" + "\n".join(hints) + "\n")
    return out.done(ExitCode.OK)


def cmd_demo_down(args: argparse.Namespace) -> int:
    project = find_project_dir()
    out = _Output(args.json)
    return out.done(ExitCode.OK if _demo_nodes(out, project, "absent") else ExitCode.ERROR)


def cmd_demo_status(runner: demo.CmdRunner = demo.run_cmd) -> int:
    states, error = demo.node_states(runner)
    if error:
        sys.stderr.write(f"carme: {error}\n")
        return EXIT_NOT_RUNNING
    demo.print_status(states, sys.stdout)
    if demo.all_healthy(states):
        return ExitCode.OK
    sys.stdout.write("not every demo node is running with systemd `running` (create them: carme demo up)\n")
    return EXIT_NOT_RUNNING


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
