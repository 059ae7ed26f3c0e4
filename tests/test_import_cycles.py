"""No import cycles among our modules (core, gpu, views, app), built from the source with ast.

Module-level imports (what runs at import time) must form a DAG. Imports inside functions are
lazy; a cycle through one still couples two modules both ways, so those left today are listed
below and may only disappear: a new one fails this test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "gpu", "views", "app")

# lazy (function-level) cycles left: each as its sorted member list
KNOWN_LAZY_CYCLES = {
    ("core.onnx.executor", "core.onnx.importer", "core.onnx.ops", "core.onnx.ops.training"),
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)


def _imports(mod: str, path: Path, mods: dict[str, Path], lazy: bool) -> set[str]:
    """Our modules that ``mod`` imports (at import time only, unless ``lazy``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
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
    for name in names:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        if name and name != mod:
            out.add(name)
    return out


def _graph(lazy: bool) -> nx.DiGraph:
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for m, p in mods.items():
        g.add_edges_from((m, t) for t in _imports(m, p, mods, lazy))
    return g


def test_module_level_imports_form_a_dag():
    g = _graph(lazy=False)
    cycles = list(nx.simple_cycles(g))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_new_lazy_import_cycle():
    found = {tuple(sorted(c)) for c in nx.simple_cycles(_graph(lazy=True))}
    new = found - KNOWN_LAZY_CYCLES
    assert not new, "new import cycles (through function-level imports):\n" + "\n".join(
        " <-> ".join(c) for c in sorted(new))


def test_the_graph_sees_our_imports():
    g = _graph(lazy=False)
    assert g.has_edge("gpu.program", "core.tape") and g.has_edge("core.ops", "core.tape")
    assert not g.has_edge("core.tape", "core.ops") and not g.has_edge("gpu.program", "gpu.fusion")
