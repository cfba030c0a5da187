# SPDX-License-Identifier: GPL-3.0-or-later
"""Container runtimes behind one interface.

* :class:`ApptainerRuntime` (the configuration's default runtime): ``apptainer exec [--nv] --contain --cleanenv
  --no-eval [--pwd DIR] --bind src:dst[:ro],... IMAGE argv...``. Binds come only from an allow-list (the user's home,
  the job's scratch, dataset directories from the site config); anything else raises :class:`BindNotAllowed`.
  With ``--cleanenv`` the host environment is dropped, so :meth:`ApptainerRuntime.environment` passes the
  app's variables as ``APPTAINERENV_<NAME>`` (Apptainer's documented way; unlike ``--env`` it keeps
  secrets off the command line).
* :class:`CharliecloudRuntime`: ``ch-run [--home] [-b SRC:DST]... [-c DIR] IMAGE -- argv...`` (Charliecloud
  0.31, Debian 12's ``charliecloud-runtime``; on newer ch-run, Debian 13's 0.38, the home's parent is bound instead
  of ``--home``; fully unprivileged, user namespaces only, no setuid helper). ch-run
  passes the host environment through (``ch-run(1)``, "ENVIRONMENT VARIABLES"), so the app's variables, the
  secret among them, travel in the environment of the ``ch-run`` process and never in argv. ch-run shares the
  host's ``/tmp`` at ``/tmp`` and its ``/dev``; bind destinations must already exist in the (read-only) image.
* :class:`NoneRuntime`: run on the node inside a venv/conda prefix: ``<prefix>/bin`` goes first on
  ``PATH`` and the program is resolved there; no shell, no ``activate`` script.

Both run for real in test-bed nodes: Apptainer 1.4.5 in a Debian 13 node (``tests/runtime/test_apptainer_real.py``),
Charliecloud in a Debian 12 one (``tests/runtime/test_charliecloud_real.py``).
"""

from __future__ import annotations

import os
import re
from abc import ABC
from abc import abstractmethod
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass

RUNTIME_NAMES = ("apptainer", "charliecloud", "none")


class BindNotAllowed(ValueError):
    """A bind mount outside the allow-list (or with characters Apptainer cannot express)."""


@dataclass(frozen=True)
class Bind:
    src: str
    dst: str
    readonly: bool = False

    def spec(self) -> str:
        return f"{self.src}:{self.dst}:ro" if self.readonly else f"{self.src}:{self.dst}"


@dataclass(frozen=True)
class AllowedBind:
    """An allow-list entry: ``src`` and everything below it may be bound; ``readonly`` forces ``:ro``."""

    prefix: str
    readonly: bool = False


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def _clean_path(path: str, what: str) -> str:
    if not os.path.isabs(path):
        raise BindNotAllowed(f"{what} {path!r} is not an absolute path")
    if any(c in path for c in ",:\n\0") or any(ord(c) < 32 for c in path):
        raise BindNotAllowed(f"{what} {path!r} contains ',', ':' or control characters")
    norm = os.path.normpath(path)
    if norm != path.rstrip("/") and norm != path:
        raise BindNotAllowed(f"{what} {path!r} is not normalised (use {norm!r})")
    return norm


def check_binds(binds: Iterable[Bind], allowed: Iterable[AllowedBind]) -> list[Bind]:
    """Return the binds (``:ro`` forced where the allow-list says so) or raise :class:`BindNotAllowed`.

    Paths are compared after ``normpath``; the launcher resolves symlinks (``realpath``) before calling.
    """
    allow = list(allowed)
    out = []
    for bind in binds:
        src = _clean_path(bind.src, "bind source")
        dst = _clean_path(bind.dst, "bind destination")
        match = [a for a in allow if _under(src, os.path.normpath(a.prefix))]
        if not match:
            raise BindNotAllowed(f"bind source {src!r} is not in the allow-list")
        readonly = bind.readonly or any(a.readonly for a in match)
        out.append(Bind(src, dst, readonly))
    return out


class Runtime(ABC):
    """The interface: :meth:`wrap` (the command line, the same call for every runtime) and :meth:`environment`."""

    name: str

    def wrap(
        self,
        argv: Sequence[str],
        *,
        image: str,
        binds: Sequence[Bind],
        gpus: int,
        env: Mapping[str, str],
        workdir: str = "",
    ) -> list[str]:
        """The full argv that runs ``argv`` inside this runtime (in ``workdir``, where the runtime sets it). ``env``
        reaches the app through :meth:`environment`, never the command line."""
        if not argv:
            raise ValueError("empty argv")
        return self.command(list(argv), image, binds, gpus, workdir)

    @abstractmethod
    def command(self, argv: list[str], image: str, binds: Sequence[Bind], gpus: int, workdir: str) -> list[str]:
        """This runtime's command line for a non-empty ``argv`` (:meth:`wrap`)."""

    @abstractmethod
    def environment(self, env: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
        """Environment of the runtime process: ``base`` plus the app's ``env`` as this runtime needs it."""


class ApptainerRuntime(Runtime):
    """``apptainer exec [--nv] --contain --cleanenv --no-eval [--pwd DIR] [--bind ...] IMAGE argv...``, as the user.

    * No ``--fakeroot``, ``--writable`` or setuid: the user keeps her uid (user namespaces, ``allow setuid = no`` in
      the role's apptainer.conf); ``--contain`` gives a private ``/tmp`` and no automatic home, so what the session
      sees of the node is exactly the allow-listed binds (home, job scratch, datasets read-only, the socket
      directory of a socket app, at the same paths inside);
    * ``--cleanenv``: nothing of the job's environment but ``APPTAINERENV_*`` (:meth:`environment`); ``--no-eval``:
      those values are taken as they are, never evaluated by a shell in the container (Apptainer >= 1.1);
    * ``--nv`` only when the job has GPUs (``gpus > 0``); ``--pwd``: the session's working directory.
    """

    name = "apptainer"

    def __init__(self, allowed: Iterable[AllowedBind], executable: str = "apptainer") -> None:
        self.allowed = list(allowed)
        self.executable = executable

    def command(self, argv: list[str], image: str, binds: Sequence[Bind], gpus: int, workdir: str) -> list[str]:
        if not image or image.startswith("-") or "\n" in image:
            raise ValueError(f"bad image {image!r}")
        checked = check_binds(binds, self.allowed)
        cmd = [self.executable, "exec"]
        if gpus > 0:
            cmd.append("--nv")  # binds the driver libraries; without GPUs it only prints warnings
        cmd += ["--contain", "--cleanenv", "--no-eval"]
        if workdir:
            if not os.path.isabs(workdir) or "\n" in workdir:
                raise ValueError(f"bad working directory {workdir!r}")
            cmd += ["--pwd", os.path.normpath(workdir)]
        if checked:
            cmd += ["--bind", ",".join(b.spec() for b in checked)]
        cmd.append(image)
        cmd += argv
        return cmd

    def environment(self, env: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
        out = dict(base)
        for key, value in env.items():
            out[f"APPTAINERENV_{key}"] = value
        if "CUDA_VISIBLE_DEVICES" in base and "CUDA_VISIBLE_DEVICES" not in env:
            out["APPTAINERENV_CUDA_VISIBLE_DEVICES"] = base["CUDA_VISIBLE_DEVICES"]
        return out


#: ``PATH`` inside a Charliecloud container: the image's app environment first (``images/``), then the usual
CONTAINER_PATH = "/opt/carme/env/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: the host's ``/tmp`` is the container's ``/tmp`` (ch-run binds it unless ``--private-tmp``)
SHARED_TMP = "/tmp"


class CharliecloudRuntime(Runtime):
    """Charliecloud's ``ch-run``: unprivileged, the image a directory (or a SquashFS file where squashfuse works).

    * Home on ch-run 0.31 (``version``, runtime.json's ``charliecloud_version``): ``--home`` binds ``$HOME`` at
      ``/home/$USER`` (over a tmpfs on ``/home``); a bind of the home directory is expressed that way, so it needs
      no mount point in the image. Where the host home is not ``/home/$USER`` the session's working directory is
      translated (``-c``). On newer ch-run (0.38, Debian 13) ``--home`` implies ``--write-fake``, whose overlay
      hides the sources of the other binds (``/srv/...``): there the home's parent directory is bound at the same
      path (``--bind=/home:/home``; it must exist in the image, as ``/home`` does) and ``--set-env=HOME=...`` (else
      ch-run sets ``HOME=/root``), so the home keeps its path and other users' homes are as visible as on the node,
      guarded by their own permissions.
    * Other binds (job scratch, read-only datasets) need their destination in the image (:meth:`mount_point`);
      for a directory image without it or a parent to use, :class:`BindNotAllowed` names the fix (create it in
      the image definition) before ch-run would fail. ch-run 0.31 has no read-only bind: a dataset directory is bound as
      it is, and its permissions (not writable by users, as a site's dataset layout must be anyway) keep it
      read-only.
    * Binds under ``/tmp`` (the socket directory of a socket app) need nothing: ch-run shares the host's
      ``/tmp`` at the same path, so :meth:`environment` sets ``TMPDIR=/tmp`` for ch-run (which unsets it inside).
    * GPUs: ch-run shares the host's ``/dev``; the devices a session can open are those its Slurm cgroup allows
      (``ConstrainDevices``) and ``CUDA_VISIBLE_DEVICES`` passes through. The driver's user-space libraries are
      injected into a directory image on real sites with ``ch-fromhost --nvidia IMAGE`` (Charliecloud's full
      package), once per driver version.
    """

    name = "charliecloud"

    def __init__(
        self,
        allowed: Iterable[AllowedBind],
        *,
        home: str,
        user: str,
        executable: str = "ch-run",
        version: str = "0.31",
    ) -> None:
        self.allowed = list(allowed)
        self.home = os.path.normpath(home)
        self.user = user
        self.executable = executable
        #: ``--home`` (ch-run 0.31) or the home's parent bound at its path (newer ch-run)
        self.home_option = version_tuple(version) <= (0, 31)

    @property
    def guest_home(self) -> str:
        return f"/home/{self.user}"

    def guest_path(self, path: str) -> str:
        """Where a host path under the home directory appears inside the container (moved by ``--home`` only)."""
        if self.home_option and _under(path, self.home):
            return self.guest_home + path[len(self.home) :]
        return path

    @staticmethod
    def mount_point(image: str, bind: Bind, used: set[str]) -> str:
        """Where ``bind`` goes in ``image``: its destination when the image has it (or the image is a SquashFS
        file, where ch-run itself checks), else the nearest existing parent directory below ``/`` that no other
        bind uses (the job's scratch ``/scratch/41`` appears at ``/scratch``, which the images create)."""
        if not os.path.isdir(image):
            return bind.dst
        dst = bind.dst
        while dst != "/":
            if os.path.isdir(os.path.join(image, dst.lstrip("/"))) and dst not in used:
                return dst
            dst = os.path.dirname(dst)
        raise BindNotAllowed(
            f"image {image} has no mount point for {bind.dst!r} (bind of {bind.src!r}): create it in the image "
            "definition (ch-run cannot create it in a read-only image)"
        )

    def home_bind(self, image: str, used: set[str]) -> list[str]:
        """``--bind=PARENT:PARENT`` of the home and ``--set-env=HOME=HOME`` (newer ch-run, no ``--home``; without it
        ch-run sets ``HOME=/root``, measured on 0.38); the parent must be in the image."""
        parent = os.path.dirname(self.home)
        in_image = not os.path.isdir(image) or os.path.isdir(os.path.join(image, parent.lstrip("/")))
        if parent == "/" or parent in used or not in_image:
            raise BindNotAllowed(f"image {image} has no directory {parent} to bind the home {self.home} on")
        used.add(parent)
        return [f"--bind={parent}:{parent}", f"--set-env=HOME={self.home}"]

    def command(self, argv: list[str], image: str, binds: Sequence[Bind], gpus: int, workdir: str) -> list[str]:
        if not image or image.startswith("-") or "\n" in image or not os.path.isabs(image):
            raise ValueError(f"bad image {image!r} (an absolute path to an image directory or SquashFS file)")
        if not self.user or "/" in self.user or self.user.startswith("."):
            raise ValueError(f"bad user name {self.user!r}")
        checked = check_binds(binds, self.allowed)
        cmd = [self.executable]
        used: set[str] = set()
        for bind in checked:
            if bind.src == self.home and bind.dst == self.home:
                cmd += ["--home"] if self.home_option else self.home_bind(image, used)
                continue
            if _under(bind.src, SHARED_TMP) and bind.src == bind.dst:
                continue  # already there: ch-run shares /tmp
            dst = self.mount_point(image, bind, used)
            used.add(dst)
            cmd.append(f"--bind={bind.src}:{dst}")
            continue
        if workdir:
            cmd.append(f"--cd={self.guest_path(os.path.normpath(workdir))}")
        cmd += [image, "--", *argv]
        return cmd

    def environment(self, env: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
        """ch-run hands its own environment to the app: ``base`` (the job's), the container's ``PATH``, the
        app's variables; ``HOME``/``USER`` as ``--home`` needs them and ``TMPDIR=/tmp`` (the shared ``/tmp``)."""
        out = dict(base)
        out.update(env)
        out["PATH"] = CONTAINER_PATH
        out["HOME"] = self.home
        out["USER"] = self.user
        out["TMPDIR"] = SHARED_TMP
        for key in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH"):
            if key not in env:
                out.pop(key, None)  # host paths that would mislead the image's Python
        return out


def version_tuple(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ch-run's ``0.38`` or ``0.31~pre+g1234``."""
    found = re.match(r"\s*([0-9]+)\.([0-9]+)", version)
    if not found:
        raise ValueError(f"bad version {version!r}")
    return int(found.group(1)), int(found.group(2))


class NoneRuntime(Runtime):
    """No container: a venv or conda prefix on the node (sites without containers, the demo)."""

    name = "none"

    def __init__(self, prefix: str) -> None:
        if not os.path.isabs(prefix):
            raise ValueError(f"environment prefix {prefix!r} must be absolute")
        self.prefix = os.path.normpath(prefix)

    def command(self, argv: list[str], image: str, binds: Sequence[Bind], gpus: int, workdir: str) -> list[str]:
        """``image``, ``binds`` and ``workdir`` are ignored (no container: the launcher starts the app in
        ``workdir``); argv[0] is resolved in ``<prefix>/bin``."""
        program = argv[0]
        if "/" not in program:
            program = os.path.join(self.prefix, "bin", program)
        return [program, *argv[1:]]

    def environment(self, env: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
        out = dict(base)
        out.update(env)
        bindir = os.path.join(self.prefix, "bin")
        path = base.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        out["PATH"] = f"{bindir}:{path}" if path else bindir
        if os.path.exists(os.path.join(self.prefix, "conda-meta")):
            out["CONDA_PREFIX"] = self.prefix
        else:
            out["VIRTUAL_ENV"] = self.prefix
        return out


def default_binds(home: str, scratch: str | None, datasets: Iterable[str]) -> list[Bind]:
    """The binds a session gets: home and job scratch read-write, datasets read-only (same paths inside)."""
    binds = [Bind(home, home)]
    if scratch:
        binds.append(Bind(scratch, scratch))
    binds += [Bind(d, d, readonly=True) for d in datasets]
    return binds


def default_allow_list(home: str, scratch_root: str | None, datasets: Iterable[str]) -> list[AllowedBind]:
    allowed = [AllowedBind(home)]
    if scratch_root:
        allowed.append(AllowedBind(scratch_root))
    allowed += [AllowedBind(d, readonly=True) for d in datasets]
    return allowed
