# SPDX-License-Identifier: GPL-3.0-or-later
"""The test bed's cache of Apptainer SIFs (``/var/cache/carme/images/apptainer/<key>/``) and the Debian 13 demo's
session image taken from it.

Apptainer is not installable on the Debian 12 host, so the SIF of ``images/session/base.def`` is built in a throwaway
Debian 13 node by :func:`carme_admin.images.build` (``carme image build base --runtime apptainer``'s builder, with
``--fakeroot`` from the test bed's base tree): ``tests/runtime/test_apptainer_real.py`` does that and checks the SIF.
The cache is keyed by the recipe (:func:`recipe_key`): the definition, the base tree's recipe and the Apptainer
builder. ``python -m carme_admin.sif_cache DEST`` (scripts/session-images.sh, ``CARME_RELEASE=trixie make demo``)
copies the cached SIF of the current recipe into ``DEST`` and writes its catalogue reference (``PATH@sha256:DIGEST``)
to ``DEST/carme-base-1.0.ref``; exit status 2 when the recipe has no cached SIF (build it first).
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from carme_runtime.images import image_digest

REPO = Path(__file__).resolve().parents[1]
CACHE = Path("/var/cache/carme/images/apptainer")
SIF = "carme-base-1.0.sif"


def recipe_key(base: Path, repo: Path = REPO) -> str:
    """The cache directory's name for the SIF of base.def built from the base tree ``base``."""
    recipe = [
        (repo / "images/session/base.def").read_text(),
        (base / ".carme-recipe").read_text(),
        (repo / "carme_admin/image_apptainer.py").read_text(),
    ]
    return hashlib.sha256("\0".join(recipe).encode()).hexdigest()[:16]


def install(cached: Path, dest: Path) -> str:
    """Copy ``cached`` (a SIF) into ``dest`` unless an identical one is there; write and return its reference."""
    digest = image_digest(str(cached))
    target = dest / cached.name
    dest.mkdir(parents=True, exist_ok=True)
    if not target.exists() or image_digest(str(target)) != digest:
        partial = dest / f".{cached.name}.partial"
        shutil.copyfile(cached, partial)
        partial.chmod(0o644)
        partial.replace(target)
    reference = f"{target}@{digest}"
    (dest / (target.name.removesuffix(".sif") + ".ref")).write_text(reference + "\n")
    return reference


def main(argv: list[str]) -> int:
    """``DEST BASE_TREE [CACHE]``: install the cached SIF of the current recipe into DEST (2: none cached)."""
    dest, base = Path(argv[0]), Path(argv[1])
    cached = (Path(argv[2]) if len(argv) > 2 else CACHE) / recipe_key(base) / SIF
    if not cached.is_file():
        print(f"no cached SIF {cached} for the current recipe", file=sys.stderr)
        return 2
    print(install(cached, dest))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
