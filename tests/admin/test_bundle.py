# SPDX-License-Identifier: GPL-3.0-or-later
"""`carme bundle`: the package list covers every package a role installs with ansible.builtin.apt (parsed from the
roles' YAML), a small bundle built from the mirror verifies, a flipped byte in a .deb is named, and a bundle built for
bookworm is refused on a trixie node. The build tests skip (with the reason) when the mirror is unreachable."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from carme_admin import bundle
from carme_admin import bundle_apt
from tests.roles.harness import REPO_ROOT

ROLES = REPO_ROOT / "roles"
LIST_LITERAL = re.compile(r"\[\s*'([a-z0-9][a-z0-9+.-]+)'")
IDENT = re.compile(r"\b(__?[a-z][a-z0-9_]*|[a-z][a-z0-9_]*packages[a-z0-9_]*)\b")


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def _role_vars(role: Path) -> dict[str, Any]:
    return {**(_yaml(role / "defaults" / "main.yml") or {}), **(_yaml(role / "vars" / "main.yml") or {})}


def _tasks(items: Any, scope: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every task with the variables it sees (role vars, set_fact, block vars, task vars), blocks flattened."""
    found = []
    for task in items or []:
        scope.update(task.get("ansible.builtin.set_fact") or {})
        inner = {**scope, **(task.get("vars") or {})}
        for key in ("block", "rescue", "always"):
            found += _tasks(task.get(key), inner)
        found.append((task, inner))
    return found


def _per_release(value: Any, scope: dict[str, Any]) -> list[str]:
    """A variable's values: itself, or each release's where it picks from a table by release
    (``{{ __zabbix_server_by_release[__zabbix_server_release].php }}``: 8.2 and 8.4)."""
    table = re.fullmatch(r"\{\{\s*(\w+)\[\s*\w+\s*\]\.(\w+)\s*\}\}", str(value).strip())
    if table is None:
        return [str(value)]
    return [str(row[table[2]]) for row in scope[table[1]].values()]


def _names(value: Any, scope: dict[str, Any], depth: int = 0) -> set[str]:
    """Package names in an apt task's `name` (a literal, a list, a Jinja expression over the role's variables)."""
    if depth > 6 or value is None:
        return set()
    if isinstance(value, list):
        return set().union(*(_names(v, scope, depth + 1) for v in value)) if value else set()
    if isinstance(value, dict):  # e.g. beegfs_server's packages per service
        return _names(list(value.values()), scope, depth + 1)
    text = str(value)
    if "{{" not in text:
        return {text}
    if re.fullmatch(r"[a-z0-9+.-]+\{\{\s*\w+\s*\}\}[a-z0-9+.-]*", text):  # "php{{ __zabbix_server_php }}-fpm"
        ident = re.search(r"\{\{\s*(\w+)\s*\}\}", text)[1]  # type: ignore[index]
        return {re.sub(r"\{\{\s*\w+\s*\}\}", value, text) for value in _per_release(scope[ident], scope)}
    found = set(LIST_LITERAL.findall(text))
    for ident in IDENT.findall(text):
        if ident in scope and ("packages" in ident or ident.endswith("_wanted")):
            found |= _names(scope[ident], scope, depth + 1)
    return found


def role_packages() -> dict[str, set[str]]:
    """Role -> the package names its apt tasks install (with every optional switch on)."""
    result: dict[str, set[str]] = {}
    for role in sorted(p for p in ROLES.iterdir() if (p / "tasks").is_dir()):
        scope = _role_vars(role)
        for tasks_file in sorted((role / "tasks").glob("*.yml")):
            for task, seen in _tasks(_yaml(tasks_file), scope):
                apt = task.get("ansible.builtin.apt")
                if isinstance(apt, dict) and "name" in apt:
                    result.setdefault(role.name, set()).update(_names(apt["name"], seen))
    return result


def test_the_package_list_covers_every_role_package() -> None:
    listed = set(bundle.read_packages(REPO_ROOT / bundle.PACKAGE_LIST))
    per_role = role_packages()
    assert {"common", "slurm", "ldap_server", "zabbix_server"} <= set(per_role)
    wanted = {"slurmctld", "php8.2-fpm", "php8.4-fpm", "beegfs-mgmtd", "apptainer-suid", "sssd-ldap"}
    assert wanted <= set().union(*per_role.values())
    missing = {role: sorted(names - listed) for role, names in per_role.items() if names - listed}
    assert not missing, f"add these to {bundle.PACKAGE_LIST}: {missing}"


def _mirror_reachable() -> str | None:
    mirror = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "debian-mirror.sh")], capture_output=True,
                            text=True, check=False).stdout.strip()  # fmt: skip
    try:
        urllib.request.urlopen(f"{mirror}/dists/bookworm/Release", timeout=10).close()
    except (OSError, ValueError) as exc:
        return f"the Debian mirror {mirror or '(none)'} is unreachable: {exc}"
    return None


def _carme(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "carme_admin", *argv], capture_output=True, text=True,
                          timeout=120, check=False, cwd=REPO_ROOT)  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = _mirror_reachable()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("bundle")
    (work / "packages.txt").write_text("# a small one\nlibpopt0\nno-such-package-carme\n")
    done = _carme("bundle", "build", "--release", "bookworm", "--out", str(work / "b"),
                  "--packages", str(work / "packages.txt"), "--wheelhouse", "", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["release"] == "bookworm" and summary["not_on_mirror"] == ["no-such-package-carme"]
    return work / "b"


def test_a_built_bundle_verifies(built: Path) -> None:
    manifest = json.loads((built / "manifest.json").read_text())
    debs = [name for name in manifest["files"] if name.endswith(".deb")]
    assert any(n.startswith("apt/libpopt0_") for n in debs) and any(n.startswith("apt/libc6_") for n in debs)
    assert {"apt/Packages", "apt/Packages.gz", "apt/Release"} <= set(manifest["files"])
    assert manifest["total_size"] == sum(f["size"] for f in manifest["files"].values())
    assert "SHA256:" in (built / "apt" / "Release").read_text()
    done = _carme("bundle", "verify", str(built), "--release", "bookworm")
    assert done.returncode == 0, done.stdout


def test_another_release_is_refused(built: Path) -> None:
    done = _carme("bundle", "verify", str(built), "--release", "trixie")
    assert done.returncode == 1
    assert "bundle built for Debian 12 (bookworm), this node runs Debian 13 (trixie)" in done.stdout


def test_a_damaged_deb_is_named(built: Path, tmp_path: Path) -> None:
    copy = tmp_path / "b"
    subprocess.run(["cp", "-a", str(built), str(copy)], check=True)
    deb = next((copy / "apt").glob("libpopt0_*.deb"))
    data = bytearray(deb.read_bytes())
    data[len(data) // 2] ^= 0xFF
    deb.write_bytes(bytes(data))
    (copy / "apt" / "Packages").unlink()
    done = _carme("bundle", "verify", str(copy), "--json")
    assert done.returncode == 1
    problems = json.loads(done.stdout)["problems"]
    assert f"apt/{deb.name}: damaged (size or sha256 differs from the manifest)" in problems
    assert "apt/Packages: missing" in problems


def test_the_role_renders_the_bundle_as_the_only_source() -> None:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["regex_replace"] = lambda value, pattern, repl: re.sub(pattern, repl, value)
    template = env.from_string((ROLES / "common" / "templates" / "carme-offline.list.j2").read_text())
    lines = [x for x in template.render(common_offline_bundle_path="/srv/bundle/").splitlines() if x[:1] != "#"]
    assert lines == ["deb [trusted=yes] file:/srv/bundle/apt ./"]
    assert _yaml(ROLES / "common" / "defaults" / "main.yml")["common_offline_bundle_path"] == ""


def test_a_package_apt_prints_without_a_hash_is_kept_with_its_records_hash(tmp_path: Path, monkeypatch: Any) -> None:
    """apt --print-uris gives bookworm-security's packages no hash: they were left out of the bundle (libevent-dev,
    which libpmix-dev needs, was missing on the site scenario's nodes); now their hash comes from apt-cache show."""

    apt = bundle_apt.PrivateApt(tmp_path, "http://m/debian", "bookworm", "amd64")
    printed = {
        "apt-get": "Need to get 2 kB\n'http://m/debian-security/pool/libx_1.0%2bdeb12u1_amd64.deb' "
        "libx_1.0+deb12u1_amd64.deb 10 \n'http://m/debian/pool/y_1%3a2_all.deb' y_1%3a2_all.deb 5 SHA256:ab\n",
        "apt-cache": "Package: libx\nVersion: 1.0+deb12u1\nSHA256: cd\n\nPackage: other\nVersion: 1\nSHA256: ef\n",
    }
    monkeypatch.setattr(apt, "_run", lambda tool, *args, **kw: printed[tool])
    found = [(u.filename, u.size, u.algo, u.digest) for u in apt.uris(["libx", "y"])]
    assert found == [("libx_1.0+deb12u1_amd64.deb", 10, "SHA256", "cd"), ("y_1%3a2_all.deb", 5, "SHA256", "ab")]
    printed["apt-cache"] = ""
    with pytest.raises(bundle_apt.AptError, match=r"no checksum for libx_1\.0"):
        apt.uris(["libx"])


def test_a_download_is_tried_again_after_a_network_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One name that did not resolve for a moment (seen under load here) must not fail a bundle of 400 files."""
    calls: list[str] = []

    def flaky(uri: bundle_apt.Uri, dest: Path) -> None:
        calls.append(uri.filename)
        if len(calls) < 3:
            raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(bundle_apt, "_fetch_once", flaky)
    monkeypatch.setattr(bundle_apt, "FETCH_PAUSE_S", 0.0)
    uri = bundle_apt.Uri(url="http://m/debian/pool/a.deb", filename="a.deb", size=1, algo="SHA256", digest="x")
    bundle_apt._fetch(uri, tmp_path)
    assert calls == ["a.deb"] * 3
    calls.clear()
    with pytest.raises(urllib.error.URLError):
        bundle_apt._fetch(uri, tmp_path, tries=2)
