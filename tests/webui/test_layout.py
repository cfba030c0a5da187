# SPDX-License-Identifier: GPL-3.0-or-later
"""The portal's layout (issue 28): one package per feature, a small core, no circle, small modules and functions.

The import graph is read from the source with ``ast`` (every ``import webui...`` and ``from webui... import``, also
those inside functions: a lazy import is still a dependency), never by importing the code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WEBUI = Path(__file__).resolve().parents[2] / "webui"

#: what webui/'s root may hold besides the feature packages: the app factory and what every feature shares
CORE = {"__init__", "wsgi", "settings", "extensions", "models", "forms", "caches", "tokens", "user_lock"}
#: one package per feature, and webui/slurm/ for Slurm's REST client, records, cluster state and scheduler
PACKAGES = {
    "admin",
    "api",
    "auth",
    "dashboard",
    "history",
    "monitoring",
    "notifications",
    "projects",
    "quota",
    "reservations",
    "sessions",
    "slurm",
    "utilisation",
}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def module_name(path: Path, root: Path) -> str:
    """``webui/sessions/service.py`` -> ``webui.sessions.service``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imported(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` imports (a name imported from a package that is a module of
    its own counts as that module)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package this module is in (or is)
                package = name.split(".") if is_package else name.split(".")[:-1]
                anchor = package[: len(package) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m in known and m != name}


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the package at ``root`` -> the package's modules it imports."""
    mods = modules(root)
    known = set(mods)
    return {
        name: imported(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py", known)
        for name, path in mods.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """A circle of imports (its first node repeated at its end), or ``[]``."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack = [(start, iter(sorted(graph[start])))]
        path.append(start)
        on_path.add(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
            elif child in on_path:
                return [*path[path.index(child) :], child]
            elif child not in done:
                stack.append((child, iter(sorted(graph.get(child, ())))))
                path.append(child)
                on_path.add(child)
    return []


def unit(module: str) -> str:
    """The package a module belongs to (``webui.sessions.service`` -> ``webui.sessions``), or the core module."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (len(parts) == 2 and parts[1] in PACKAGES) else module


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between packages (and core modules): an edge where any module of one imports the other's."""
    out: dict[str, set[str]] = {}
    for name, targets in graph.items():
        out.setdefault(unit(name), set()).update(unit(t) for t in targets if unit(t) != unit(name))
    return out


def long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path.relative_to(WEBUI.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


# --- the portal ----------------------------------------------------------------------------------------------------


def test_no_module_of_the_portal_imports_itself_back() -> None:
    graph = import_graph(WEBUI)
    assert len(graph) > 50, "the graph missed the portal's modules"
    assert "webui.sessions.service" in graph["webui.api.views"]  # a package's import of a module counts
    cycle = find_cycle(graph)
    assert not cycle, "a circle of imports: " + " -> ".join(cycle)


def test_no_package_of_the_portal_imports_another_back() -> None:
    packages = package_graph(import_graph(WEBUI))
    assert "webui.quota" in packages["webui.reservations"] and "webui.reservations" in packages["webui.sessions"]
    cycle = find_cycle(packages)
    assert not cycle, "a circle between packages: " + " -> ".join(cycle)


def test_the_root_holds_only_the_core_and_the_feature_packages() -> None:
    assert {p.stem for p in WEBUI.glob("*.py")} == CORE
    code_dirs = {p.parent.relative_to(WEBUI).parts[0] for p in WEBUI.rglob("*.py") if p.parent != WEBUI}
    assert code_dirs == PACKAGES | {"migrations"}
    assert all((WEBUI / name / "__init__.py").is_file() for name in PACKAGES)


def test_a_package_init_imports_only_its_own_modules() -> None:
    """Importing one module of a feature runs its package's ``__init__``: that must not pull in another feature
    (the blueprints live in ``views.py``, not in ``__init__.py``)."""
    graph = import_graph(WEBUI)
    for name in PACKAGES:
        package = f"webui.{name}"
        foreign = {m for m in graph[package] if not m.startswith(package + ".")}
        assert not foreign, f"{package}/__init__.py imports {sorted(foreign)}"


def test_no_module_over_400_lines_and_no_function_over_60() -> None:
    files = sorted(WEBUI.rglob("*.py"))
    sizes = {p: len(p.read_text().splitlines()) for p in files}
    too_big = [f"{p.relative_to(WEBUI.parent)} ({n} lines)" for p, n in sizes.items() if n > MAX_MODULE_LINES]
    assert not too_big, "split these modules:\n" + "\n".join(too_big)
    too_long = [entry for p in files for entry in long_functions(p)]
    assert not too_long, "split these into named functions:\n" + "\n".join(too_long)


# --- the checks themselves -----------------------------------------------------------------------------------------


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


@pytest.mark.parametrize(
    "b_imports",
    ["from pkg import a\n", "import pkg.a\n", "from . import a\n", "def f():\n    from pkg.a import x\n"],
)
def test_a_circle_is_found_in_any_import_form(tmp_path: Path, b_imports: str) -> None:
    root = write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import y\nx = 1\n", "pkg/b.py": b_imports})
    assert find_cycle(import_graph(root)) in (["pkg.a", "pkg.b", "pkg.a"], ["pkg.b", "pkg.a", "pkg.b"])


def test_a_straight_line_is_no_circle_and_outside_imports_do_not_count(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "from pkg.sub import c\n",
        "pkg/a.py": "import os\nfrom pkg import b\nfrom pkg.sub.c import z\n",
        "pkg/b.py": "import flask\nfrom pkg.sub import c\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "z = 1\n",
    }
    root = write(tmp_path, files)
    graph = import_graph(root)
    assert (
        graph["pkg.a"] == {"pkg.b", "pkg.sub.c"} and graph["pkg.b"] == {"pkg.sub.c"} and graph["pkg"] == {"pkg.sub.c"}
    )
    assert find_cycle(graph) == []
