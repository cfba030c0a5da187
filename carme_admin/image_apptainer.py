# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme image build --runtime apptainer``: the definition Apptainer is given and its ``apptainer build`` command
line (:func:`carme_admin.images.build` calls :func:`build_apptainer` for each definition of the chain)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from carme_admin.images import Definition

Run = Callable[[list[str]], None]
WHEELHOUSE_IN_IMAGE = "/opt/carme/wheelhouse"

#: %setup makes the wheelhouse's mount point before %post (Apptainer binds only onto paths that exist in the image)
SETUP_LINES = ["%setup", f'    mkdir -p "${{APPTAINER_ROOTFS}}{WHEELHOUSE_IN_IMAGE}"', ""]


def apptainer_definition(defn: Definition, start: Path | None) -> str:
    """The definition Apptainer builds (derived at build time, never stored in images/session): the source file with
    :data:`SETUP_LINES` before its first section (unless it has a ``%setup``), and with ``Bootstrap``/``From``
    replaced by ``Bootstrap: localimage`` of ``start`` when given: the parent's SIF (``From: carme/<name>:<version>``),
    or for a definition without a parent a root filesystem directory (``--base``; the test bed has no registry)."""
    source = defn.path.read_text().splitlines()
    setup = not any(line.strip().lower().startswith("%setup") for line in source)
    lines: list[str] = []
    for line in source:
        key = line.partition(":")[0].strip().lower()
        if start is not None and key in ("bootstrap", "from"):
            line = "Bootstrap: localimage" if key == "bootstrap" else f"From: {start}"
        if setup and line.startswith("%"):
            lines += SETUP_LINES
            setup = False
        lines.append(line)
    return "\n".join(lines) + "\n"


def apptainer_argv(executable: str, out: Path, definition: Path, wheelhouse: Path, fakeroot: bool = False) -> list[str]:
    """``apptainer build [--fakeroot] --force --bind WHEELHOUSE:/opt/carme/wheelhouse:ro OUT.sif DEF`` (``--bind``
    applies to %post). ``--fakeroot``: a builder that is not real root (a container's root, no CAP_SYS_ADMIN)."""
    argv = [
        executable,
        "build",
        "--force",
        "--bind",
        f"{wheelhouse}:{WHEELHOUSE_IN_IMAGE}:ro",
        str(out),
        str(definition),
    ]
    return argv[:2] + ["--fakeroot"] * fakeroot + argv[2:]


def build_apptainer(
    defn: Definition, dest: Path, wheelhouse: Path, start: Path | None, *, executable: str, run: Run, fakeroot: bool
) -> Path:
    """``carme-NAME-VERSION.sif`` in ``dest``; the definition Apptainer was given stays next to it (``.def``). The
    build reads and writes only under ``dest``, ``wheelhouse`` and ``start``: ``run`` may run it on a node."""
    out = dest / f"carme-{defn.name}-{defn.version}.sif"
    definition = dest / f"carme-{defn.name}-{defn.version}.def"
    definition.write_text(apptainer_definition(defn, start))
    partial = dest / f".{out.name}.partial"
    run(apptainer_argv(executable, partial, definition, wheelhouse, fakeroot))
    os.replace(partial, out)
    return out
