# SPDX-License-Identifier: GPL-3.0-or-later
"""Session images: definitions in ``images/session/*.def`` (Apptainer definition files, the one source of truth
per image), their checks, the derived catalogue ``images/session/catalog.json``, and ``carme image build``.

Rules every definition passes (:func:`check_definition`):

* ``Bootstrap: docker`` (the only bootstrap spython parses) with ``From: NAME:TAG`` (a tag other than ``latest``, or
  ``@sha256:``); ``From: carme/<name>:<version>`` names another definition here and its version (the builder
  builds that one first and starts from it: ``Bootstrap: localimage`` for Apptainer, a copy for Charliecloud);
* every ``pip install`` requirement is ``name==version``, and each has a label ``carme.framework.<name> <version>``
  with the same version (Debian packages come from the pinned base release);
* labels ``org.opencontainers.image.title``, ``org.opencontainers.image.version``, ``carme.apps`` (apps Carme
  knows) and ``carme.accelerator`` (``none`` or ``cuda``).

Definitions are parsed with spython (``pip install carme[images]``), the parser of Singularity/Apptainer recipes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from carme_admin.image_apptainer import WHEELHOUSE_IN_IMAGE
from carme_admin.image_apptainer import Run
from carme_admin.image_apptainer import build_apptainer
from carme_runtime.images import image_digest

REPO = Path(__file__).resolve().parents[1]
DEFINITIONS = REPO / "images" / "session"
CATALOG = DEFINITIONS / "catalog.json"
KNOWN_APPS = ("jupyterlab", "code-server", "tensorboard")
ACCELERATORS = ("none", "cuda")
REQUIRED_LABELS = (
    "org.opencontainers.image.title",
    "org.opencontainers.image.version",
    "carme.apps",
    "carme.accelerator",
)
PIN_RE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(?:\[[A-Za-z0-9_,.-]+\])?==(?P<version>[A-Za-z0-9_.+!-]+)$")
#: pip options that take a value (their value is not a requirement)
PIP_VALUE_OPTIONS = {"--find-links", "-f", "--index-url", "-i", "--extra-index-url", "--constraint", "-c"}
DOCKER_FROM_RE = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:(?P<tag>[A-Za-z0-9_.-]+))?(@sha256:[0-9a-f]{64})?$")
LOCAL_FROM_RE = re.compile(r"^carme/(?P<name>[a-z0-9-]+):(?P<version>[0-9][A-Za-z0-9.]*)$")


class DefinitionError(ValueError):
    """A definition that does not parse or breaks a rule; the message names the file."""


@dataclass
class Definition:
    name: str
    path: Path
    bootstrap: str
    base: str
    labels: dict[str, str]
    post: list[str]  # %post as shell lines, continuations joined
    environment: list[str] = field(default_factory=list)

    @property
    def version(self) -> str:
        return self.labels.get("org.opencontainers.image.version", "")

    @property
    def parent(self) -> str:
        """The definition this one starts from (``From: carme/<name>:<version>``), or ""."""
        m = LOCAL_FROM_RE.match(self.base)
        return m.group("name") if m else ""

    @property
    def apps(self) -> list[str]:
        return [a for a in self.labels.get("carme.apps", "").split(",") if a]

    @property
    def frameworks(self) -> dict[str, str]:
        prefix = "carme.framework."
        return {k[len(prefix) :]: v for k, v in self.labels.items() if k.startswith(prefix)}

    def pip_pins(self) -> list[str]:
        """Every requirement given to ``pip install`` in %post (options and their values left out)."""
        reqs: list[str] = []
        for line in self.post:
            words = shlex.split(line, comments=True)
            for i, word in enumerate(words):
                if word == "install" and i > 0 and words[i - 1].endswith("pip"):
                    skip = False
                    for arg in words[i + 1 :]:
                        if skip:
                            skip = False
                        elif arg in PIP_VALUE_OPTIONS:
                            skip = True
                        elif not arg.startswith("-"):
                            reqs.append(arg)
        return reqs


def _header(text: str) -> dict[str, str]:
    header: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("%"):
            break
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            header[key.strip().lower()] = value.strip()
    return header


def load_definition(path: Path) -> Definition:
    """Parse ``path`` with spython's Singularity recipe parser (plus its ``Bootstrap`` header line)."""
    from spython.main.parse.parsers import SingularityParser  # type: ignore[import-untyped]

    text = path.read_text()
    try:
        parsed = SingularityParser(str(path)).recipe
    except Exception as exc:  # spython raises bare exceptions on bad recipes
        raise DefinitionError(f"{path}: spython cannot parse it: {exc}") from exc
    recipe = next(iter(parsed.values())) if isinstance(parsed, dict) else parsed
    labels: dict[str, str] = {}
    for label in recipe.labels:
        key, _, value = str(label).partition(" ")
        labels[key] = value.strip()
    post: list[str] = []
    pending = ""
    for line in recipe.install:
        line = str(line)
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        post.append(pending + line)
        pending = ""
    if pending:
        post.append(pending)
    return Definition(
        name=path.stem,
        path=path,
        bootstrap=_header(text).get("bootstrap", ""),
        base=str(recipe.fromHeader or ""),
        labels=labels,
        post=post,
        environment=[str(e) for e in recipe.environ],
    )


def check_definition(defn: Definition, known: Iterable[Definition] = ()) -> list[str]:
    """Problems of one definition (empty: it passes the pin and label rules)."""
    problems = []
    where = defn.path.name
    local = LOCAL_FROM_RE.match(defn.base)
    if defn.bootstrap == "docker" and local:
        if (local.group("name"), local.group("version")) not in {(d.name, d.version) for d in known}:
            problems.append(f"{where}: From {defn.base!r} names no definition carme/<name>:<version> in images/session")
    elif defn.bootstrap == "docker":
        m = DOCKER_FROM_RE.match(defn.base)
        unpinned = not m or (m.group("tag") in (None, "latest") and "@sha256:" not in defn.base)
        if defn.base.startswith("carme/") or unpinned:
            problems.append(f"{where}: From {defn.base!r} is not pinned (a tag other than latest, or @sha256:)")
    else:
        problems.append(f"{where}: Bootstrap {defn.bootstrap!r} (docker or localimage)")
    for key in REQUIRED_LABELS:
        if not defn.labels.get(key):
            problems.append(f"{where}: label {key} missing")
    unknown = [a for a in defn.apps if a not in KNOWN_APPS]
    if unknown:
        problems.append(f"{where}: carme.apps names unknown apps {unknown} (known: {', '.join(KNOWN_APPS)})")
    if defn.labels.get("carme.accelerator", "none") not in ACCELERATORS:
        problems.append(f"{where}: carme.accelerator must be one of {', '.join(ACCELERATORS)}")
    frameworks = defn.frameworks
    for req in defn.pip_pins():
        m = PIN_RE.match(req)
        if not m:
            problems.append(f"{where}: pip requirement {req!r} is not pinned (name==version)")
            continue
        if frameworks.get(m.group("name")) != m.group("version"):
            problems.append(
                f"{where}: label carme.framework.{m.group('name')} {m.group('version')} missing or different"
            )
    return problems


def load_all(directory: Path = DEFINITIONS) -> list[Definition]:
    return [load_definition(p) for p in sorted(directory.glob("*.def"))]


def catalog(defs: Sequence[Definition]) -> dict[str, object]:
    """The derived catalogue (``images/session/catalog.json``): what the portal and the builder read."""
    return {
        d.name: {
            "title": d.labels.get("org.opencontainers.image.title", ""),
            "version": d.version,
            "apps": d.apps,
            "accelerator": d.labels.get("carme.accelerator", ""),
            "frameworks": d.frameworks,
            "from": d.base,
            "definition": f"images/session/{d.path.name}",
        }
        for d in defs
    }


def catalog_text(defs: Sequence[Definition]) -> str:
    return json.dumps(catalog(defs), indent=2, sort_keys=True) + "\n"


# -- carme image build ------------------------------------------------------------------------------------------
RUNTIMES = ("apptainer", "charliecloud")


def find(defs: Sequence[Definition], name: str) -> Definition:
    for d in defs:
        if d.name == name:
            return d
    raise DefinitionError(f"no image definition {name!r} in images/session (known: {', '.join(d.name for d in defs)})")


def build_order(defs: Sequence[Definition], name: str) -> list[Definition]:
    """``name`` and the definitions it starts from, parents first."""
    chain = [find(defs, name)]
    while chain[0].parent:
        if len(chain) > len(defs):
            raise DefinitionError(f"{name}: the From chain loops")
        chain.insert(0, find(defs, chain[0].parent))
    return chain


def post_script(defn: Definition) -> str:
    """%post as one ``sh -e`` script (what Apptainer runs too)."""
    return "\n".join(defn.post) + "\n"


def environment_file(defn: Definition) -> str:
    """``/ch/environment`` of a Charliecloud image from %environment (``export K=V`` lines; ``ch-run --set-env``)."""
    out = []
    for line in defn.environment:
        line = line.strip()
        line = line[len("export ") :] if line.startswith("export ") else line
        if "=" in line:
            out.append(line)
    return "\n".join(out) + "\n"


BUILD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run_checked(argv: list[str]) -> None:
    """Run ``argv`` (no shell) with a clean environment (nothing of the admin's pip or proxy settings reaches the
    build); output goes to the terminal; a failure raises ``CalledProcessError``."""
    env = {"PATH": BUILD_PATH, "HOME": "/root", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(argv, check=True, env=env)


@dataclass
class Built:
    defn: Definition
    path: Path
    digest: str

    @property
    def reference(self) -> str:
        return f"{self.path}@{self.digest}"


def build_charliecloud(defn: Definition, dest: Path, wheelhouse: Path, parent: Path, *, run: Run) -> Path:
    """A directory image: a copy of ``parent`` (the debootstrap base, or the parent definition's image), %post run
    in a chroot with the wheelhouse bound read-only at /opt/carme/wheelhouse, %environment in /ch/environment."""
    out = dest / f"carme-{defn.name}-{defn.version}"
    work = dest / f".{out.name}.partial"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    run(["cp", "-a", f"{parent}/.", f"{work}/"])
    (work / ".carme-recipe").unlink(missing_ok=True)
    mount_point = work / WHEELHOUSE_IN_IMAGE.lstrip("/")
    mount_point.mkdir(parents=True, exist_ok=True)
    shutil.copyfile("/etc/resolv.conf", work / "etc" / "resolv.conf")  # apt in the chroot
    run(["mount", "--bind", str(wheelhouse), str(mount_point)])
    try:
        run(["mount", "-o", "remount,bind,ro", str(mount_point)])
        run(["chroot", str(work), "/bin/sh", "-e", "-c", post_script(defn)])
    finally:
        run(["umount", str(mount_point)])
    (work / "ch").mkdir(exist_ok=True)
    (work / "ch" / "environment").write_text(environment_file(defn))
    (work / "ch" / "labels.json").write_text(json.dumps(defn.labels, indent=2, sort_keys=True) + "\n")
    if out.exists():
        shutil.rmtree(out)
    os.replace(work, out)
    return out


def build(
    name: str,
    runtime: str,
    dest: Path,
    wheelhouse: Path,
    *,
    defs: Sequence[Definition] | None = None,
    base: Path | None = None,
    executable: str = "apptainer",
    run: Run = run_checked,
    rebuild_parents: bool = False,
    fakeroot: bool = False,
) -> Built:
    """Build ``name`` (and the images it starts from, when missing) into ``dest``; return it with its digest. ``base``:
    the root tree the chain starts from (Charliecloud: required; Apptainer: in place of ``Bootstrap: docker``)."""
    if runtime not in RUNTIMES:
        raise DefinitionError(f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")
    defs = list(defs if defs is not None else load_all())
    problems = [p for d in build_order(defs, name) for p in check_definition(d, defs)]
    if problems:
        raise DefinitionError("; ".join(problems))
    dest.mkdir(parents=True, exist_ok=True)
    parent: Path | None = None
    chain = build_order(defs, name)
    for defn in chain:
        suffix = ".sif" if runtime == "apptainer" else ""
        target = dest / f"carme-{defn.name}-{defn.version}{suffix}"
        if defn is not chain[-1] and target.exists() and not rebuild_parents:
            parent = target
            continue
        if runtime == "apptainer":
            start = parent or base
            parent = build_apptainer(defn, dest, wheelhouse, start, executable=executable, run=run, fakeroot=fakeroot)
        else:
            if parent is None and base is None:
                raise DefinitionError(f"{defn.name}: Charliecloud builds need a base directory (scripts/image-base.sh)")
            parent = build_charliecloud(defn, dest, wheelhouse, parent or base or Path("/"), run=run)
    assert parent is not None
    built = Built(chain[-1], parent, image_digest(str(parent)))
    # the catalogue reference next to the image, for an inventory to read (lookup('file', ...)) or an admin to copy
    ref = dest / f"carme-{built.defn.name}-{built.defn.version}.ref"
    ref.write_text(built.reference + "\n")
    return built


def register_argv(prefix: Sequence[str], built: Built) -> list[str]:
    """The portal's admin-only catalogue command (``flask --app webui image-ensure``, root on the portal host)."""
    title = built.defn.labels.get("org.opencontainers.image.title", built.defn.name)
    return [
        *prefix,
        "image-ensure",
        built.defn.name,
        "--image",
        built.reference,
        "--kind",
        "container",
        "--description",
        title,
        *[f"--app={a}" for a in built.defn.apps],
    ]
