# SPDX-License-Identifier: GPL-3.0-or-later
"""Run one playbook of the project through ansible-runner (imported lazily: it is in the ``admin`` extra).

Inputs go to ansible-runner as keyword arguments only, with ``suppress_env_files=True``: nothing is
written to ``<private_data_dir>/env/`` (extra vars may hold secrets, and runner would silently reuse stale
``env/extravars`` or ``env/cmdline`` files on the next run). Each run's artifacts (events, stdout, the
command) land in ``<project>/.artifacts/runner/artifacts/<ident>/``, 0700; the last 10 runs are kept.

A run with ``deploy_lock`` (``carme deploy``, the upgrade's deploy stage) holds ``<project>/.artifacts/deploy.lock``
while ansible runs (an flock: a second deploy from the checkout is refused): its pid, start time and command, removed
when it ends. ``playbooks/upgrade_preflight.yml`` (run first by ``carme backup``)
refuses while the pid in it is alive; a file left by a killed deploy names a dead pid and is ignored.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import signal
import sys
import threading
import uuid
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

from carme_admin.progress import ProgressPrinter

KEEP_RUNS = 10


class UsageError(Exception):
    """A bad command line: the CLI prints it and exits 2."""


@dataclass(frozen=True)
class PlaybookRun:
    project: Path
    playbook: str
    inventory: Path | None = None
    limit: str | None = None
    tags: str | None = None
    check: bool = False
    diff: bool = False
    extravars: Mapping[str, Any] | None = None  # ansible-runner writes them as JSON: any YAML value
    extra_args: Sequence[str] = ()  # passed through to ansible-playbook (`-e @file`, `-e '{json}'`)
    deploy_lock: bool = False  # hold <project>/.artifacts/deploy.lock while it runs (carme deploy)


@dataclass(frozen=True)
class RunResult:
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    rc: int
    artifacts: Path

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0


def artifacts_root(project: Path) -> Path:
    return project / ".artifacts"


def deploy_lock_path(project: Path) -> Path:
    return artifacts_root(project) / "deploy.lock"


@contextlib.contextmanager
def deploy_lock(project: Path) -> Iterator[Path]:
    """Hold the deploy lock for the block (an flock on the file, which names this process); refuse while another
    deploy holds it; remove it after, if it is still this process's."""
    path = deploy_lock_path(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = path.read_text().split("\n")
        os.close(fd)
        raise UsageError(
            f"another deploy runs from this checkout (pid {holder[0]}, started {holder[1] if len(holder) > 1 else '?'}"
            f": {path}): wait for it to end"
        ) from None
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n{started}\n{shlex.join(['carme', *sys.argv[1:]])}\n".encode())
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            if path.read_text().split("\n", 1)[0] == str(os.getpid()):
                path.unlink()
        os.close(fd)


def private_data_dir(project: Path) -> Path:
    return artifacts_root(project) / "runner"


def _pair(word: str) -> tuple[str, str] | None:
    key, sep, val = word.partition("=")
    return (key, val) if sep and key.isidentifier() else None


def split_extra_vars(values: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """``-e`` values become runner ``extravars`` (strings, as ansible's ``k=v`` gives them):
    ``a=1 b='x y'`` (several shell-quoted pairs, as ansible takes them) or ``msg=hello world`` (one pair
    whose value is the rest). ``@file`` and JSON/YAML documents go through to ansible-playbook as they are."""
    extravars: dict[str, str] = {}
    passthrough: list[str] = []
    for value in values:
        stripped = value.strip()
        if stripped.startswith(("@", "{", "[")):
            passthrough += ["-e", stripped]
            continue
        try:
            pairs = [_pair(word) for word in shlex.split(stripped)]
        except ValueError:
            pairs = [None]
        if pairs and all(pair is not None for pair in pairs):
            extravars.update(pair for pair in pairs if pair is not None)
            continue
        single = _pair(stripped)
        if single is None:
            raise UsageError(f"-e {value!r}: expected key=value with a valid variable name, @file or JSON")
        extravars[single[0]] = single[1]
    return extravars, passthrough


def resolve_playbook(project: Path, playbook: str) -> Path:
    path = Path(playbook).expanduser()
    path = path if path.is_absolute() else (project / path)
    if not path.is_file():
        # also accept a path relative to the current directory (tab completion from elsewhere)
        here = Path(playbook).expanduser().resolve()
        if here.is_file():
            return here
        raise UsageError(f"playbook not found: {playbook} (looked in {project})")
    return path.resolve()


def resolve_inventory(inventory: Path) -> Path:
    path = inventory.expanduser().resolve()
    if not path.exists():
        # never pass a missing path: ansible-runner would take the string as inventory *content*
        raise UsageError(f"inventory not found: {inventory}")
    return path


def runner_envvars(project: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of ansible-playbook: the project's ansible.cfg, and this interpreter's scripts
    first on PATH so that `carme` run from a virtualenv without activating it finds its ansible; before them the
    wrapper directory (:func:`write_child_wrapper`)."""
    environ = os.environ if environ is None else environ
    bindir = str(Path(sys.executable).parent)
    path = environ.get("PATH", os.defpath)
    if bindir not in path.split(os.pathsep):
        path = os.pathsep.join([bindir, path])
    path = os.pathsep.join([str(wrapper_dir(project)), path])
    envvars = {"PATH": path, "ANSIBLE_FORCE_COLOR": "false", "ANSIBLE_NOCOLOR": "true"}
    cfg = project / "ansible.cfg"
    if cfg.is_file():
        envvars["ANSIBLE_CONFIG"] = str(cfg)
    return envvars


def runner_kwargs(run: PlaybookRun, playbook: Path, ident: str) -> dict[str, Any]:
    """The keyword arguments of ``ansible_runner.run`` (pure: tests check them)."""
    cmdline: list[str] = []
    if run.check:
        cmdline.append("--check")
    if run.diff:
        cmdline.append("--diff")
    cmdline += list(run.extra_args)
    kwargs: dict[str, Any] = {
        "private_data_dir": str(private_data_dir(run.project)),
        "project_dir": str(run.project),
        "playbook": str(playbook),
        "ident": ident,
        "envvars": runner_envvars(run.project),
        "rotate_artifacts": KEEP_RUNS,
        "suppress_env_files": True,
        "quiet": True,
    }
    if run.inventory is not None:
        kwargs["inventory"] = str(resolve_inventory(run.inventory))
    if run.limit:
        kwargs["limit"] = run.limit
    if run.tags:
        kwargs["tags"] = run.tags
    if run.extravars:
        kwargs["extravars"] = dict(run.extravars)
    if cmdline:
        kwargs["cmdline"] = shlex.join(cmdline)
    return kwargs


def new_ident(playbook: Path) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{playbook.stem}-{uuid.uuid4().hex[:6]}"


def wrapper_dir(project: Path) -> Path:
    return private_data_dir(project) / "bin"


def write_child_wrapper(project: Path) -> None:
    """``<private data dir>/bin/ansible-playbook``, first on the runner's PATH: this environment's ansible-playbook
    under ``carme_admin.child`` (which ends its process group when carme dies) started by ``setpriv --pdeathsig
    TERM``. ansible-runner starts ansible-playbook in a session of its own that ignores SIGHUP, so a SIGKILL of carme
    (a lost terminal, a kill of its process group) left it running beside the next run (measured on the demo: the
    drain's ansible-playbook ran on). Without setpriv (not Linux) the wrapper runs ansible-playbook as it is."""
    folder = wrapper_dir(project)
    folder.mkdir(mode=0o700, exist_ok=True)
    wrapper = folder / "ansible-playbook"
    # the real one, where the runner's PATH would find it without the wrapper (never the wrapper itself: run from
    # the wrapper's own PATH lookup, an unresolved name made ansible-playbook start itself again and again)
    search = [str(Path(sys.executable).parent), *os.environ.get("PATH", os.defpath).split(os.pathsep)]
    mine = folder.resolve()
    found = shutil.which("ansible-playbook", path=os.pathsep.join(p for p in search if p and Path(p).resolve() != mine))
    if found is None or Path(found).resolve().parent == mine:
        wrapper.unlink(missing_ok=True)  # nothing to wrap: the runner's PATH finds whatever it finds
        return
    setpriv = shutil.which("setpriv")
    program = shlex.quote(str(Path(found).absolute()))
    if setpriv:
        child = f"{shlex.quote(sys.executable)} -m carme_admin.child"
        command = f"{shlex.quote(setpriv)} --pdeathsig TERM -- {child} {program}"
    else:
        command = program
    text = f'#!/bin/sh\nexec {command} "$@"\n'
    if not wrapper.is_file() or wrapper.read_text() != text:
        wrapper.write_text(text)
    wrapper.chmod(0o700)


def prepare_private_data_dir(project: Path) -> Path:
    pdd = private_data_dir(project)
    pdd.mkdir(parents=True, exist_ok=True)
    for path in (artifacts_root(project), pdd):
        path.chmod(0o700)
    # no input files: everything is passed as arguments (stale env/ files would be reused by runner)
    shutil.rmtree(pdd / "env", ignore_errors=True)
    (pdd / "artifacts").mkdir(mode=0o700, exist_ok=True)
    write_child_wrapper(project)
    return pdd


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """ansible-runner replaces SIGTERM's and SIGINT's handlers (in the main thread) with one that only sets a flag and
    leaves it there: put back what the command had, so Ctrl-C and a TERM stop ``carme`` again after a playbook."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in kept.items():
            if handler is not None:  # None: set outside Python, which cannot be put back from here
                signal.signal(number, handler)


def run_playbook(run: PlaybookRun, printer: ProgressPrinter) -> RunResult:
    playbook = resolve_playbook(run.project, run.playbook)
    kwargs = runner_kwargs(run, playbook, new_ident(playbook))
    try:
        import ansible_runner  # type: ignore[import-untyped]  # lazy: admin extra only, no type hints
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise UsageError(f"ansible-runner is missing: pip install 'carme[admin]' ({exc})") from exc
    prepare_private_data_dir(run.project)
    with deploy_lock(run.project) if run.deploy_lock else contextlib.nullcontext(), _signal_handlers_kept():
        runner = ansible_runner.run(event_handler=printer.handle, **kwargs)
    artifacts = Path(str(runner.config.artifact_dir))
    status = str(runner.status)
    rc = int(runner.rc) if runner.rc is not None else 1
    printer.finish(status=status, rc=rc, artifacts=str(artifacts))
    return RunResult(status=status, rc=rc, artifacts=artifacts)
