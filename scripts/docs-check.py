#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Docs check: what the README, docs/, CONTRIBUTING.md and the role READMEs name must exist.

Checked, in every such Markdown file:

* repository paths: a token in backticks, in a fenced code block, in a link or in the prose that starts with a
  top-level entry of the repository (``roles/slurm/README.md``, ``tests/e2e/``, ``site.yml``); in a role's README also
  the role's own ``defaults/``, ``tasks/``, ``templates/`` ...; a path followed by a quoted title (``roles/x/README.md``
  "Preemption") must have a heading of that title. Skipped: absolute paths, URLs, what exists only at run time
  (``.secrets/``, ``.artifacts/``, ``.venv/`` ...); for ``<placeholder>``, ``{a,b}`` and globs the directory before
  them must exist, and a glob must match something;
* dotted module names of the Python packages (``webui.app_origin.session_label``): the module must exist and the
  name after it appear in it;
* ``make TARGET`` (a target of the Makefile) and ``carme COMMAND [ACTION]`` (carme_admin's parser), in backticks and
  code blocks;
* relative Markdown links and images: the file must exist; a ``#anchor`` must be a heading of the file it points to.

Each problem is printed as ``file:line: what``; the exit status is 1 when there is any. ``--root`` checks another
tree (the tests use a copy); files given on the command line replace the default set.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# CHANGELOG.md is not checked: it is history, and names what was renamed or removed
DOC_GLOBS = ("README.md", "CONTRIBUTING.md", "docs/*.md", "roles/*/README.md", "molecule/README.md")
# top-level directories that exist only at run time (created by make, the demo, the tools): named, never committed
RUNTIME_ONLY = frozenset(
    {".secrets", ".artifacts", ".venv", ".cache", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache",
     ".hypothesis", ".ansible", "carme.egg-info"}
)  # fmt: skip
# top-level names a doc may use for the repository even when the directory is gone (so that a rename is caught)
KNOWN_TOP = frozenset(
    {"bench", "carme_admin", "carme_runtime", "docs", "images", "inventories", "molecule", "packaging", "playbooks",
     "plugins", "requirements", "roles", "scripts", "tests", "webui", ".ci", ".config"}
)  # fmt: skip
ROLE_DIRS = frozenset({"defaults", "files", "handlers", "library", "meta", "tasks", "templates", "vars",
                       "filter_plugins", "module_utils"})  # fmt: skip
PATTERN_CHARS = "<{*?["
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
TITLE_AFTER = re.compile(r"\s*,?\s*[\"\u201c]([^\"\u201d]+)[\"\u201d]")
MAKE = re.compile(r"(?:^|[\s;&|(])make\s+((?:-\S+\s+|[A-Z_]+=\S+\s+)*)([a-z][\w.-]*)")
CARME = re.compile(r"(?:^|[\s;&|(/])carme((?:\s+-{1,2}[\w-]+)*)\s+([a-z][\w-]*)(?:\s+([a-z][\w-]*))?")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
STRIP_END = ".,;:)]}\"'\u201d\u2019!"
STRIP_START = "([{\"'\u201c\u2018"


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.what}"


@dataclass
class Repo:
    root: Path
    make_targets: frozenset[str]
    commands: dict[str, frozenset[str]]  # carme COMMAND -> its ACTIONs (empty: none)
    file_names: frozenset[str]  # the name of every file of the repository, for bare names (`test_x.py`)

    def top_names(self) -> set[str]:
        return ({p.name for p in self.root.iterdir()} | KNOWN_TOP) - RUNTIME_ONLY


def makefile_targets(makefile: Path) -> frozenset[str]:
    targets: set[str] = set()
    for line in makefile.read_text().splitlines():
        rule = re.match(r"^([A-Za-z0-9_.%/$() -]+?)\s*:(?![=:])", line)
        if rule and not line.startswith("\t"):
            targets.update(t for t in rule.group(1).split() if "$" not in t)
    return frozenset(targets - {".PHONY", ".ONESHELL"})


def carme_commands() -> dict[str, frozenset[str]]:
    """COMMAND -> ACTIONs of the ``carme`` CLI, from carme_admin's own parser."""
    import argparse as ap

    from carme_admin.commands import build_parser

    def choices(parser: ap.ArgumentParser) -> dict[str, ap.ArgumentParser]:
        for action in parser._actions:
            if isinstance(action, ap._SubParsersAction):
                return dict(action.choices)
        return {}

    return {name: frozenset(choices(sub)) for name, sub in choices(build_parser()).items()}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, links' text kept, punctuation but - and _ dropped, spaces to
    hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(path: Path) -> list[str]:
    found, fenced = [], False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append(match.group(2))
    return found


def lines_of(text: str) -> Iterator[tuple[int, str, bool]]:
    """(number, line, inside a fenced code block); a code span that goes on to the next line of its paragraph is
    closed at the end of the line and opened again at the start of the next."""
    fenced, open_span = False, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced, open_span = not fenced, False
            continue
        if not line.strip() or re.match(r"\s*(\||[*+-] |\d+\. |#)", line):  # a new paragraph, row, item, heading
            open_span = False
        if not fenced:
            line = "`" + line if open_span else line
            open_span = len(re.findall(r"(?<!`)`(?!`)", line)) % 2 == 1
            line = line + "`" if open_span else line
        yield number, line, fenced


def clean(token: str) -> str:
    token = token.lstrip(STRIP_START)
    token = re.sub(r"(::\S*|:\d+(-\d+)?)$", "", token.rstrip(STRIP_END))
    return token.rstrip(STRIP_END)


def check_path(repo: Repo, doc: Path, token: str, alone: bool = False) -> str | None:
    """What is wrong with ``token`` as a path of the repository, or None (fine, or not a repository path).

    ``alone``: the token is all of its code span, so a bare source file name (`test_x.py`) counts as a path."""
    token = clean(token)
    if not token or token.startswith(("/", "~", "$", "-")) or "://" in token or "=" in token:
        return None
    base = _base_for(repo, doc, token, alone)
    if base is None:
        return None
    cut = min((token.find(c) for c in PATTERN_CHARS if c in token), default=-1)
    if cut < 0:
        return None if (base / token).exists() else f"no such path: {token}"
    head = token[: token.rfind("/", 0, cut) + 1]
    if head and not (base / head).is_dir():
        return f"no such directory: {head} (in {token})"
    if not any(c in token for c in "<{") and not glob.glob(str(base / token)):
        return f"nothing matches: {token}"
    return None


def _base_for(repo: Repo, doc: Path, token: str, alone: bool = False) -> Path | None:
    first = token.split("/", 1)[0]
    if doc.name == "README.md" and doc.parent.parent.name == "roles" and first in ROLE_DIRS and "/" in token:
        return doc.parent
    if first in RUNTIME_ONLY or first in (".", ".."):
        return None
    if "/" in token:
        return repo.root if first in repo.top_names() else None
    if alone and re.fullmatch(r"[\w.-]+\.(py|sh|md)", token) and token not in repo.file_names:
        return repo.root  # a source file named alone: some file of the repository must have that name
    # a bare name: a root file, or one of the upper-case files every project keeps there
    root_file = ((repo.root / token).is_file() and "." in token) or re.fullmatch(r"[A-Z]+\.md|LICENSE|Makefile", token)
    return repo.root if root_file else None


def check_module(repo: Repo, token: str) -> str | None:
    """``pkg.module.name``: the module file must exist and ``name`` appear in it."""
    parts = clean(token).split(".")
    if len(parts) < 2 or not all(p.isidentifier() for p in parts) or parts[-1] in ("py", "md"):
        return None
    if not (repo.root / parts[0] / "__init__.py").is_file() or parts[0] not in KNOWN_TOP:
        return None
    path = repo.root / parts[0]
    for i, part in enumerate(parts[1:], 1):
        if (path / part / "__init__.py").is_file():
            path = path / part
            continue
        if (path / f"{part}.py").is_file():
            path = path / f"{part}.py"
            rest = parts[i + 1 : i + 2]
        else:
            path, rest = path / "__init__.py", [part]
        if rest and not re.search(rf"\b{re.escape(rest[0])}\b", path.read_text()):
            return f"no {rest[0]} in {path.relative_to(repo.root)} (in {'.'.join(parts)})"
        return None
    return None


def check_link(repo: Repo, doc: Path, target: str) -> str | None:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
        return None  # https:, mailto: ...
    name, _, anchor = target.partition("#")
    dest = (doc.parent / name) if name else doc
    if name.startswith("/") or not dest.exists():
        return f"dead link: {target}"
    if anchor and dest.suffix == ".md" and anchor not in {slug(h) for h in headings(dest)}:
        return f"no heading for #{anchor} in {dest.relative_to(repo.root) if name else doc.name}"
    return None


def check_title(repo: Repo, doc: Path, token: str, title: str) -> str | None:
    """``docs/x.md`` "Some title": the file must have a heading that is, or starts with, the title."""
    path = clean(token)
    base = _base_for(repo, doc, path)
    if base is None or not path.endswith(".md") or not (base / path).is_file():
        return None
    if any(h == title or h.startswith(title) for h in headings(base / path)):
        return None
    return f'no heading "{title}" in {path}'


def commands_in(repo: Repo, code: str) -> Iterator[str]:
    """Problems with the ``make`` and ``carme`` commands of a code span or code line."""
    for match in MAKE.finditer(code):
        if match.group(2) not in repo.make_targets:
            yield f"no make target: make {match.group(2)}"
    for match in CARME.finditer(code):
        command, action = match.group(2), match.group(3)
        if command not in repo.commands:
            yield f"no carme command: carme {command}"
        elif repo.commands[command] and action and action not in repo.commands[command]:
            yield f"no carme command: carme {command} {action}"


def check_line(repo: Repo, doc: Path, line: str, fenced: bool) -> Iterator[str]:
    if fenced:
        yield from commands_in(repo, re.sub(r"(^|\s)#.*", "", line))  # not in a shell comment
        yield from (p for t in line.split() if (p := check_path(repo, doc, t)))
        return
    for target in LINK.findall(line):
        if problem := check_link(repo, doc, target):
            yield problem
    spans = list(CODE_SPAN.finditer(line))
    for span in spans:
        yield from commands_in(repo, span.group(2))
        tokens = span.group(2).split()
        for token in tokens:
            if problem := check_path(repo, doc, token, len(tokens) == 1) or check_module(repo, token):
                yield problem
        title = TITLE_AFTER.match(line, span.end())
        if title and (problem := check_title(repo, doc, span.group(2), title.group(1))):
            yield problem
    prose = LINK.sub(" ", CODE_SPAN.sub(" ", line))
    for token in prose.split():
        if "/" in clean(token) and (problem := check_path(repo, doc, token)):
            yield problem


def check_doc(repo: Repo, doc: Path, text: str | None = None) -> list[Problem]:
    name = str(doc.relative_to(repo.root))
    text = doc.read_text() if text is None else text
    return [
        Problem(name, n, what) for n, line, fenced in lines_of(text) for what in check_line(repo, doc, line, fenced)
    ]


def default_docs(root: Path) -> list[Path]:
    return sorted({p for pattern in DOC_GLOBS for p in root.glob(pattern) if p.is_file()})


def repo_file_names(root: Path) -> frozenset[str]:
    names: set[str] = set()
    for directory, subdirs, files in os.walk(root, followlinks=True):
        subdirs[:] = [d for d in subdirs if not (directory == str(root) and d in RUNTIME_ONLY)]
        names.update(files)
    return frozenset(names)


def load_repo(root: Path) -> Repo:
    targets, names = makefile_targets(root / "Makefile"), repo_file_names(root)
    return Repo(root=root, make_targets=targets, commands=carme_commands(), file_names=names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=Path(__file__).absolute().parent.parent, help="repository")
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README, docs/, role READMEs)")
    args = parser.parse_args(argv)
    root = args.root.absolute()
    repo = load_repo(root)
    docs = [f.absolute() for f in args.files] or default_docs(root)
    problems = [p for doc in docs for p in check_doc(repo, doc)]
    for problem in problems:
        print(problem)
    sys.stdout.flush()
    print(f"docs check: {len(docs)} files, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
