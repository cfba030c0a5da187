# SPDX-License-Identifier: GPL-3.0-or-later
"""The docs check (scripts/docs-check.py): it passes on the repository, and it fails, naming the file and line, when a
named path is renamed, a doc names a path, make target or carme command that does not exist, or a link is dead.

The failing cases run the check on a mirror of the repository (tmp_path): every top-level entry a symlink to the real
one, except the directories and docs a test changes, which are real directories of symlinks or edited copies."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.roles.harness import load_file

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "docs-check.py"


def load_check() -> ModuleType:
    return load_file(SCRIPT.relative_to(REPO), "docs_check")


docs_check = load_check()


def mirror(tmp_path: Path, *unfolded: str) -> Path:
    """A copy of the repository made of symlinks; each directory in ``unfolded`` is a real directory whose entries
    are symlinks, so that a test can rename or replace one of them."""
    root = tmp_path / "repo"
    root.mkdir()
    for entry in REPO.iterdir():
        (root / entry.name).symlink_to(entry)
    for folder in unfolded:
        (root / folder).unlink()
        (root / folder).mkdir()
        for entry in (REPO / folder).iterdir():
            (root / folder / entry.name).symlink_to(entry)
    return root


def replace_doc(root: Path, name: str, text: str) -> None:
    (root / name).unlink()
    (root / name).write_text(text)


def run_check(root: Path, capsys: pytest.CaptureFixture[str], *docs: str) -> tuple[int, list[str]]:
    """The check on the mirror ``root`` (only ``docs`` when given), as ``scripts/docs-check.py`` runs it."""
    rc = docs_check.main(["--root", str(root), *(str(root / doc) for doc in docs)])
    return rc, capsys.readouterr().out.splitlines()


def lines_naming(token: str) -> list[str]:
    """``file:line`` of every line of the checked docs that names ``token`` in backticks."""
    found = []
    for doc in docs_check.default_docs(REPO):
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            if re.search(rf"`[^`]*{re.escape(token)}[^`]*`", line):
                found.append(f"{doc.relative_to(REPO)}:{number}")
    return found


def test_the_repository_passes() -> None:
    """As `make lint` runs it."""
    result = subprocess.run([sys.executable, str(SCRIPT)], cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"docs check: \d+ files, 0 problems", result.stderr), result.stderr


def test_make_lint_runs_it() -> None:
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert lint and "$(PY) scripts/docs-check.py" in lint.group(1)


def test_a_renamed_file_fails_where_the_docs_name_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    named = lines_naming("scripts/netcheck.sh")
    assert named, "no doc names scripts/netcheck.sh any more: pick another file for this test"
    root = mirror(tmp_path, "scripts")
    (root / "scripts" / "netcheck.sh").rename(root / "scripts" / "netcheck-renamed.sh")
    rc, out = run_check(root, capsys)
    assert rc == 1
    for where in named:
        assert f"{where}: no such path: scripts/netcheck.sh" in out, out


def test_a_doc_naming_a_renamed_path_fails_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (REPO / "docs" / "demo.md").read_text()
    assert "`scripts/host-packages.txt`" in text
    line = text[: text.index("`scripts/host-packages.txt`")].count("\n") + 1
    root = mirror(tmp_path, "docs")
    replace_doc(root, "docs/demo.md", text.replace("`scripts/host-packages.txt`", "`scripts/host-package-list.txt`"))
    rc, out = run_check(root, capsys, "docs/demo.md")
    assert rc == 1
    assert out == [f"docs/demo.md:{line}: no such path: scripts/host-package-list.txt"]


@pytest.mark.parametrize(
    ("added", "problems"),
    [
        ("Then `make no-such-target`.", ["no make target: make no-such-target"]),
        ("```sh\nmake test SERIAL=1\nmake tests   # a typo\n```", ["no make target: make tests"]),
        ("`carme redeploy` and `.venv/bin/carme demo restart`.",
         ["no carme command: carme redeploy", "no carme command: carme demo restart"]),
        ("See [the upgrade guide](upgrade-guide.md).", ["dead link: upgrade-guide.md"]),
        ("See [sessions](portal.md#no-such-heading).", ["no heading for #no-such-heading in docs/portal.md"]),
        ("As `roles/slurm/README.md` \"No such section\" says.",
         ['no heading "No such section" in roles/slurm/README.md']),
        ("`carme_admin.commands.no_such_name`",
         ["no no_such_name in carme_admin/commands.py (in carme_admin.commands.no_such_name)"]),
        ("`tests/e2e/test_*_nothing.py`", ["nothing matches: tests/e2e/test_*_nothing.py"]),
        ("`tests/nowhere/<name>.py`", ["no such directory: tests/nowhere/ (in tests/nowhere/<name>.py)"]),
        ("`test_no_such_file.py` covers it.", ["no such path: test_no_such_file.py"]),
    ],
)  # fmt: skip
def test_a_bad_reference_fails_with_its_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], added: str, problems: list[str]
) -> None:
    text = (REPO / "docs" / "demo.md").read_text().rstrip("\n") + "\n\n"
    first = text.count("\n") + 1 + (1 if added.startswith("```") else 0)
    root = mirror(tmp_path, "docs")
    replace_doc(root, "docs/demo.md", text + added + "\n")
    rc, out = run_check(root, capsys, "docs/demo.md")
    assert rc == 1
    assert [re.sub(r"^docs/demo\.md:\d+: ", "", line) for line in out] == problems, out
    assert all(line.startswith("docs/demo.md:") for line in out)
    assert int(out[0].split(":")[1]) in (first, first + 1), out


@pytest.mark.parametrize(
    "fine",
    [
        "`.secrets/<cluster>/munge.key`, `.artifacts/e2e/<run>/`, `.venv/bin/carme demo status`",
        "`/etc/slurm/slurm.conf`, `~/datasets/demo-samples`, https://example.org/roles/x, `--flag=roles/x`",
        "`roles/<role>/README.md`, `roles/*/README.md`, `inventories/example/{hosts.yml,group_vars/}`",
        "[the portal](portal.md#an-origin-per-session), [tests](../tests/e2e/test_portal_e2e.py)",
        '`roles/slurm/README.md` "Preemption", `carme_admin.commands.build_parser`, `make test SERIAL=1`',
        "`python train.py` and `srun bash -c 'python train.py'`: a user's file, not the repository's",
    ],
)
def test_what_is_not_a_repository_path_or_exists_passes(fine: str) -> None:
    repo = docs_check.load_repo(REPO)
    assert docs_check.check_doc(repo, REPO / "docs" / "demo.md", fine) == []


def test_role_readmes_name_the_roles_own_files() -> None:
    repo = docs_check.load_repo(REPO)
    readme = REPO / "roles" / "slurm" / "README.md"
    problems = docs_check.check_doc(repo, readme, "`defaults/main.yml` and `defaults/gone.yml`")
    assert [str(p) for p in problems] == ["roles/slurm/README.md:1: no such path: defaults/gone.yml"]


def test_a_code_span_over_two_lines_is_read_as_one() -> None:
    repo = docs_check.load_repo(REPO)
    text = "Run `ansible-playbook -i inventories/demo\nplaybooks/no-such-play.yml` then.\n"
    problems = docs_check.check_doc(repo, REPO / "docs" / "demo.md", text)
    assert [str(p) for p in problems] == ["docs/demo.md:2: no such path: playbooks/no-such-play.yml"]


def test_heading_anchors_are_githubs() -> None:
    assert docs_check.slug("An origin per session") == "an-origin-per-session"
    assert docs_check.slug("Deployment (`roles/carme_webui`, `playbooks/portal.yml`)") == (
        "deployment-rolescarme_webui-playbooksportalyml"
    )
    assert docs_check.slug("Settings for `config.py`") == "settings-for-configpy"
