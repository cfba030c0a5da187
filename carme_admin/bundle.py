# SPDX-License-Identifier: GPL-3.0-or-later
"""``carme bundle build|verify``: an offline bundle for a Debian release, for nodes without a route to a mirror.

A bundle is a directory: ``apt/`` (the .deb files of the roles' packages with their dependencies, a flat apt
repository: ``Packages``, ``Packages.gz``, ``Release`` with SHA256 sums, not signed), ``wheelhouse/`` (the project's
wheelhouse, ``scripts/wheelhouse.sh``, when there is one) and ``manifest.json``: the release, its Debian version, the
architecture, when and how fast it was built, the packages asked for and those not on the mirror, and every file
with its size and sha256. ``verify`` recomputes them, names each damaged, missing or unlisted file and refuses a
bundle built for another release than the node's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

from carme_admin import bundle_apt
from carme_admin.playbook import UsageError
from carme_admin.project import find_project_dir

RELEASES = {"bookworm": "12", "trixie": "13"}
MANIFEST = "manifest.json"
PACKAGE_LIST = Path("packaging") / "bundle" / "packages.txt"
WHEELHOUSE = Path(".cache") / "wheelhouse"


def add_parser(commands: Any) -> None:
    """``carme bundle build --release R --out DIR [--packages FILE] [--wheelhouse DIR]``, ``carme bundle verify``."""
    bundle = commands.add_parser("bundle", help="offline bundle for nodes without internet (build, verify)")
    actions = bundle.add_subparsers(dest="bundle_command", metavar="ACTION", required=True)
    build = actions.add_parser(
        "build", help="download the roles' packages with their dependencies into a local apt repository",
        description="Resolve the package list for the Debian release on this host's mirror (scripts/debian-mirror.sh) "
        "with a private apt configuration, download the .deb files with their dependencies into DIR/apt (a flat "
        "repository, not signed), copy the wheelhouse, write DIR/manifest.json with every file's size and sha256.",
    )  # fmt: skip
    build.add_argument("--release", choices=sorted(RELEASES), required=True, help="the nodes' Debian release")
    build.add_argument("--out", type=Path, required=True, metavar="DIR", help="the bundle directory (new or empty)")
    build.add_argument("--packages", type=Path, metavar="FILE",
                       help=f"package names, one a line, # comments (default: {PACKAGE_LIST})")  # fmt: skip
    build.add_argument("--wheelhouse", type=Path, metavar="DIR",
                       help=f"wheels to include (default: {WHEELHOUSE} when it exists; '' for none)")  # fmt: skip
    build.add_argument("--arch", help="Debian architecture (default: this host's)")
    build.add_argument("--json", action="store_true", help="print the summary as JSON")
    verify = actions.add_parser("verify", help="recompute the checksums; refuse another release's bundle")
    verify.add_argument("dir", type=Path, metavar="DIR", help="the bundle directory")
    verify.add_argument("--release", choices=sorted(RELEASES), help="the node's Debian release: refuse any other")
    verify.add_argument("--json", action="store_true", help="print the result as JSON")


def read_packages(path: Path) -> list[str]:
    """Names from a list file: one a line, ``#`` starts a comment, duplicates dropped, order kept."""
    names = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return list(dict.fromkeys(n for n in names if n))


def release_name(release: str) -> str:
    return f"Debian {RELEASES.get(release, '?')} ({release})"


def file_entries(root: Path) -> dict[str, dict[str, Any]]:
    """Every regular file under ``root`` but the manifest: relative path -> size and sha256."""
    paths = sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)
    sha256_of = bundle_apt.sha256_of
    return {p.relative_to(root).as_posix(): {"size": p.stat().st_size, "sha256": sha256_of(p)} for p in paths}


def _wheelhouse(args: argparse.Namespace, project: Path) -> Path | None:
    if args.wheelhouse is not None:
        return args.wheelhouse if str(args.wheelhouse) not in ("", ".") else None
    default = project / WHEELHOUSE
    return default if default.is_dir() else None


def build(args: argparse.Namespace, project: Path) -> dict[str, Any]:
    out: Path = args.out
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} exists and is not empty")
    names = read_packages(args.packages or project / PACKAGE_LIST)
    arch = args.arch or bundle_apt.host_arch()
    mirror = bundle_apt.mirror_of(project)
    start = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="carme-bundle-") as work:
        missing = bundle_apt.build_repository(Path(work), out / "apt", mirror, args.release, arch, names)
    wheels = _wheelhouse(args, project)
    if wheels is not None:
        bundle_apt.copy_tree(wheels, out / "wheelhouse")
    files = file_entries(out)
    manifest = {
        "release": args.release, "debian_version": RELEASES[args.release], "architecture": arch,
        "created": datetime.now(UTC).isoformat(timespec="seconds"), "mirror": mirror,
        "packages": names, "not_on_mirror": missing, "wheelhouse": wheels is not None,
        "file_count": len(files), "total_size": sum(int(f["size"]) for f in files.values()),
        "build_seconds": round(time.monotonic() - start, 1), "files": files,
    }  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def verify(root: Path, release: str | None) -> list[str]:
    """The problems of the bundle at ``root``: another release, missing, damaged or unlisted files (empty: sound)."""
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        return [f"{root / MANIFEST}: cannot be read ({exc})"]
    problems = []
    built_for = str(manifest.get("release"))
    if release is not None and built_for != release:
        problems.append(f"bundle built for {release_name(built_for)}, this node runs {release_name(release)}")
    listed: dict[str, dict[str, Any]] = manifest.get("files", {})
    for rel, entry in sorted(listed.items()):
        path = root / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
        elif path.stat().st_size != entry["size"] or bundle_apt.sha256_of(path) != entry["sha256"]:
            problems.append(f"{rel}: damaged (size or sha256 differs from the manifest)")
    extra = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)
    problems += [f"{rel}: not in the manifest" for rel in extra if rel not in listed]
    return problems


def _summary(manifest: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in manifest.items() if k not in ("files", "packages")}


def cmd_bundle(args: argparse.Namespace) -> int:
    if args.bundle_command == "verify":
        problems = verify(args.dir, args.release)
        if args.json:
            sys.stdout.write(json.dumps({"ok": not problems, "problems": problems}, indent=2) + "\n")
        else:
            sys.stdout.write("".join(f"carme: {p}\n" for p in problems) or f"carme: {args.dir}: sound\n")
        return 1 if problems else 0
    try:
        manifest = build(args, find_project_dir())
    except (bundle_apt.AptError, OSError) as exc:
        sys.stderr.write(f"carme: bundle build failed: {exc}\n")
        return 1
    summary = _summary(manifest)
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return 0
    print(f"carme: {args.out}: {summary['file_count']} files, {summary['total_size'] / 1e6:.1f} MB for "
          f"{release_name(args.release)} in {summary['build_seconds']} s")  # fmt: skip
    if summary["not_on_mirror"]:
        print(f"carme: not on the mirror (get them elsewhere): {' '.join(summary['not_on_mirror'])}")
    return 0
