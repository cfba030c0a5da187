# SPDX-License-Identifier: GPL-3.0-or-later
"""The apt half of ``carme bundle build``: resolve packages with their dependencies for a Debian release, download the
.deb files, and write a flat apt repository (``Packages``, ``Packages.gz``, ``Release`` with SHA256 sums).

apt runs with a private configuration in a temporary directory (its own sources.list for the release on this host's
mirror, ``scripts/debian-mirror.sh``; its own lists, cache and an empty dpkg status), so the host's apt state is
neither read nor changed and any release can be resolved from any Debian host. An empty status means the full
dependency closure is downloaded, as a bare node needs it. apt only prints the URIs (``--print-uris``); the files are
fetched here and checked against the hash apt gives. The repository is not signed: nodes use it with
``[trusted=yes]`` and the bundle's manifest checksums.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from pathlib import Path

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
FETCH_TRIES = 3
FETCH_PAUSE_S = 2.0
# apt prints no hash for some suites' packages (seen for bookworm-security): those lines end after the size, and the
# hash is read from the package's own record (apt-cache show), never left out
URI_LINE = re.compile(r"^'(?P<url>[^']+)' (?P<file>\S+) (?P<size>\d+)(?: (?P<algo>[A-Za-z0-9]+):(?P<hash>[0-9a-f]+))?$")
HASHES = {"MD5Sum": "md5", "SHA1": "sha1", "SHA256": "sha256", "SHA512": "sha512"}


class AptError(RuntimeError):
    """apt could not resolve or a download failed; the message names what."""


@dataclass(frozen=True)
class Uri:
    url: str
    filename: str
    size: int
    algo: str
    digest: str


def sources_list(mirror: str, release: str) -> str:
    """The release, its updates and, for deb.debian.org-style mirrors, its security suite."""
    signed = f"[signed-by={KEYRING}]"
    lines = [f"deb {signed} {mirror} {release} main", f"deb {signed} {mirror} {release}-updates main"]
    if mirror.rstrip("/").endswith("/debian"):
        lines.append(f"deb {signed} {mirror.rstrip('/')}-security {release}-security main")
    return "\n".join(lines) + "\n"


class PrivateApt:
    """apt-get and apt-cache with their own state under ``root`` (see the module's docstring)."""

    def __init__(self, root: Path, mirror: str, release: str, arch: str) -> None:
        self.root = root
        for sub in ("state/lists/partial", "cache/archives/partial", "parts"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "status").write_text("")
        (root / "sources.list").write_text(sources_list(mirror, release))
        self.options = [
            f"-oDir::Etc::sourcelist={root / 'sources.list'}", f"-oDir::Etc::sourceparts={root / 'parts'}",
            f"-oDir::Etc::preferencesparts={root / 'parts'}", f"-oDir::State={root / 'state'}",
            f"-oDir::State::status={root / 'status'}", f"-oDir::Cache={root / 'cache'}",
            "-oDebug::NoLocking=1", "-oAcquire::Languages=none", f"-oAPT::Architecture={arch}",
            "-oAPT::Sandbox::User=root", "-oAcquire::Retries=2",
        ]  # fmt: skip

    def _run(self, tool: str, *args: str, timeout: int = 600) -> str:
        argv = ["nice", "-n", "10", tool, *self.options, "-q", *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise AptError(f"{tool} {' '.join(args[:3])}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def update(self) -> None:
        self._run("apt-get", "update")

    def known(self, names: list[str]) -> tuple[list[str], list[str]]:
        """``names`` split into (on the mirror, not on it)."""
        available = set(self._run("apt-cache", "pkgnames").split())
        return [n for n in names if n in available], [n for n in names if n not in available]

    def uris(self, names: list[str]) -> list[Uri]:
        out = self._run("apt-get", "install", "--print-uris", "-y", "--no-install-recommends", *names)
        found = [m for m in (URI_LINE.match(line.strip()) for line in out.splitlines()) if m]
        unhashed = [m["file"] for m in found if not m["hash"]]
        known = self.record_hashes(unhashed) if unhashed else {}
        return [Uri(m["url"], m["file"], int(m["size"]), *((m["algo"], m["hash"]) if m["hash"] else known[m["file"]]))
                for m in found]  # fmt: skip

    def record_hashes(self, files: list[str]) -> dict[str, tuple[str, str]]:
        """``name_version_arch.deb`` -> ("SHA256", hash) from the packages' records (``apt-cache show``)."""
        wanted: dict[tuple[str, str], str] = {}
        for deb in files:
            name, version, _arch = deb.removesuffix(".deb").split("_")
            wanted[(name, urllib.parse.unquote(version))] = deb
        out = self._run("apt-cache", "show", "--no-all-versions", *(f"{n}={v}" for n, v in wanted))
        found: dict[str, tuple[str, str]] = {}
        for record in out.split("\n\n"):
            fields = dict(re.findall(r"^([A-Za-z0-9-]+): (.*)$", record, flags=re.MULTILINE))
            listed = wanted.get((fields.get("Package", ""), fields.get("Version", "")))
            if listed and fields.get("SHA256"):
                found[listed] = ("SHA256", fields["SHA256"])
        missing = sorted(set(files) - set(found))
        if missing:
            raise AptError(f"no checksum for {', '.join(missing)} in the mirror's index")
        return found


def _fetch(uri: Uri, dest: Path, tries: int = FETCH_TRIES) -> None:
    """Download one file, checked against the index; a network error (a name that did not resolve for a moment,
    seen under load on the test bed, a reset connection) is tried again after a pause, up to ``tries`` times."""
    for attempt in range(1, tries + 1):
        try:
            _fetch_once(uri, dest)
            return
        except (urllib.error.URLError, OSError):
            if attempt == tries:
                raise
            time.sleep(FETCH_PAUSE_S * attempt)


def _fetch_once(uri: Uri, dest: Path) -> None:
    target = dest / uri.filename
    digest = hashlib.new(HASHES.get(uri.algo, uri.algo.lower()))
    with urllib.request.urlopen(uri.url, timeout=60) as response, target.open("wb") as out:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != uri.digest or target.stat().st_size != uri.size:
        target.unlink()
        raise AptError(f"{uri.filename}: size or {uri.algo} differs from the mirror's index ({uri.url})")


def download(uris: list[Uri], dest: Path, workers: int = 6) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda u: _fetch(u, dest), uris))


def sha256_of(path: Path) -> str:
    """The file's SHA-256 in hex, read in 1 MiB chunks (the Release file and the bundle's manifest)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_repository(repo: Path, release: str, arch: str) -> None:
    """``Packages``, ``Packages.gz`` (dpkg-scanpackages) and a ``Release`` with the indices' sizes and SHA256."""
    argv = ["nice", "-n", "10", "dpkg-scanpackages", "--multiversion", "."]
    done = subprocess.run(argv, cwd=repo, capture_output=True, check=False, timeout=600)
    if done.returncode != 0:
        raise AptError(f"dpkg-scanpackages: {done.stderr.decode(errors='replace').strip()}")
    (repo / "Packages").write_bytes(done.stdout)
    with gzip.GzipFile(repo / "Packages.gz", "wb", mtime=0) as packed:
        packed.write(done.stdout)
    sums = "".join(f" {sha256_of(repo / n)} {(repo / n).stat().st_size} {n}\n" for n in ("Packages", "Packages.gz"))
    date = datetime.now(UTC).strftime("%a, %d %b %Y %H:%M:%S UTC")
    (repo / "Release").write_text(
        f"Origin: Carme offline bundle\nLabel: carme-bundle\nSuite: {release}\nCodename: {release}\n"
        f"Date: {date}\nArchitectures: {arch}\nDescription: Carme offline bundle for Debian {release} "
        f"(not signed: use [trusted=yes])\nSHA256:\n{sums}"
    )


def build_repository(work: Path, repo: Path, mirror: str, release: str, arch: str, names: list[str]) -> list[str]:
    """Download ``names`` and their dependencies into ``repo`` and index it; returns the names not on the mirror."""
    apt = PrivateApt(work, mirror, release, arch)
    apt.update()
    present, missing = apt.known(names)
    if not present:
        raise AptError(f"none of the {len(names)} packages is on {mirror} for {release}")
    download(apt.uris(present), repo)
    write_repository(repo, release, arch)
    return missing


def mirror_of(project: Path) -> str:
    done = subprocess.run(["bash", str(project / "scripts" / "debian-mirror.sh")], capture_output=True, text=True,
                          check=False, timeout=30)  # fmt: skip
    if done.returncode != 0:
        raise AptError(done.stderr.strip() or "scripts/debian-mirror.sh found no mirror")
    return done.stdout.strip()


def host_arch() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()


def copy_tree(src: Path, dest: Path) -> None:
    """Regular files of ``src`` (links followed, dot files left out) into ``dest``."""
    for path in sorted(src.resolve().rglob("*")):
        rel = path.relative_to(src.resolve())
        if path.is_file() and not any(part.startswith(".") for part in rel.parts):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest / rel)
