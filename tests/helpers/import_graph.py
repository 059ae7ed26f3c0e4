"""Our modules and their import graph, built from the source with ast (test_import_cycles,
test_layers)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]


PACKAGES = ("core", "gpu", "views", "app")
TOP = ("app", "_top")  # the ``tapescope`` package itself (pyproject.toml's package-dir)


def module_name(path: Path) -> str:
    """The import name of one of our files: ``core/ops/x.py`` -> ``tapescope.core.ops.x``,
    ``app/_top/__init__.py`` -> ``tapescope``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if tuple(parts[:2]) == TOP:
        parts = parts[2:]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(["tapescope", *parts])


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)


@functools.cache  # each graph below walks the same trees: every file is parsed once, not per graph
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def module_imports(mod: str, path: Path, mods: dict[str, Path], lazy: bool) -> set[str]:
    """Our modules that ``mod`` imports (at import time only, unless ``lazy``)."""
    tree = _parse(path)
    if lazy:
        nodes = list(ast.walk(tree))
    else:  # module level, including under if/try, never under `if TYPE_CHECKING`
        nodes, todo = [], list(tree.body)
        while todo:
            n = todo.pop()
            nodes.append(n)
            if isinstance(n, (ast.If, ast.Try)) and not _type_checking(n):
                todo += n.body + n.orelse + getattr(n, "finalbody", [])
                for h in getattr(n, "handlers", []):
                    todo += h.body
    names: list[str] = []
    for n in nodes:
        if isinstance(n, ast.Import):
            names += [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
                for _ in range(n.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            names += [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                      for a in n.names]
    out = set()
    for full in names:
        name = full
        while name and name not in mods:
            name = name.rpartition(".")[0]
        # (a module outside PACKAGES, tapescope.resources, is not an import of tapescope's
        # own __init__: only ``import tapescope`` is)
        if name and name != mod and (name != "tapescope" or full == name):
            out.add(name)
    return out


@functools.cache  # read-only: the tests only look
def graph(lazy: bool, inits: bool = False) -> nx.DiGraph:
    """Module -> the modules it imports. ``inits``: an import of ``a.b.c`` also runs ``a/__init__``
    and ``a/b/__init__`` first, so it is an edge to those packages too (but for the importer's own
    packages, which are loaded before it)."""
    mods = modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for m, p in mods.items():
        for t in module_imports(m, p, mods, lazy):
            g.add_edge(m, t)
            parts = t.split(".")
            for i in range(1, len(parts)):
                pkg = ".".join(parts[:i])
                if inits and pkg != m and not m.startswith(pkg + "."):
                    g.add_edge(m, pkg)
    return g
