"""Imports flow downward only (docs/layers.md): core never imports gpu, Qt, views or app; gpu never
imports Qt, views or app; views never import app. The rules are import-linter contracts in
pyproject.toml ([tool.importlinter], docs/layers.md), run here; the ast checks below say the same
in a second way, and the subprocess checks prove what no static tool can (what is loaded)."""

import ast
from pathlib import Path

import pytest

from tests.helpers.import_graph import module_name
from tests.helpers.qt_block import BLOCK_QT, QT

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "core": QT + ("gpu", "views", "app", "cupy"),
    "gpu": QT + ("views", "app"),
    "views": ("app",),
    "views/models": QT + ("app",),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            # from tapescope import gpu, from tapescope.views import theme: the name may be a
            # module (an attribute reads the same: only prefixes are compared)
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def _top(mod: str) -> str:
    """The layer (or outside package) a module belongs to: ``tapescope.gpu.x`` -> ``gpu``."""
    parts = mod.split(".")
    return parts[1] if parts[0] == "tapescope" and len(parts) > 1 else parts[0]


# import-linter (grimp) finds a root package's files through its spec, and takes only a top-level
# package or one whose parent is a namespace: ``tapescope`` is a regular package now (app/_top),
# so the contracts run in a child whose ``tapescope`` is the repository's folders as a namespace
# package (what the layers are: app, core, gpu, views), loaded before anything imports it
_LINT = """
import importlib.machinery, importlib.util, sys
spec = importlib.machinery.ModuleSpec("tapescope", None, is_package=True)
spec.submodule_search_locations = [{root!r}]
sys.modules["tapescope"] = importlib.util.module_from_spec(spec)
sys.path.insert(0, {root!r})
from importlinter.cli import lint_imports
sys.exit(lint_imports(config_filenames=({config!r},), no_cache=True, no_logo=True))
"""


def test_import_linter_contracts_are_kept():
    """`lint-imports` over pyproject.toml's contracts (its API, no cache written)."""
    import subprocess
    import sys

    pytest.importorskip("importlinter", reason="import-linter is in the test extra")
    code = _LINT.format(root=str(ROOT), config=str(ROOT / "pyproject.toml"))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-6000:]
    n = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert n >= 8 and f"Contracts: {n} kept, 0 broken." in text, text[-6000:]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_flow_downward(package):
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, mod in _imports(path):
            if _top(mod) in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
    assert not bad, "\n".join(bad)


def test_core_onnx_is_the_only_core_module_importing_onnx():
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in (ROOT / "core").rglob("*.py")
           if "onnx" not in p.relative_to(ROOT / "core").parts[:1]
           for line, mod in _imports(p) if mod.split(".")[0] == "onnx"]
    assert not bad, bad


# The Qt boundary is two folders: app/qt/ and views/ (the widgets). Everything else of ours, the
# widgets' models in views/models/ included, is headless: computed here from the folders (no
# name list), and proved by importing each module with PySide6 and pyqtgraph blocked.
QT_SIDE = (("app", "qt"), ("views",))  # folders whose modules may import Qt
HEADLESS_FOLDERS = (("core",), ("gpu",), ("app",), ("views", "models"))


def _headless_paths() -> list[Path]:
    out = []
    for folder in HEADLESS_FOLDERS:
        for p in sorted(ROOT.joinpath(*folder).rglob("*.py")):
            rel = p.relative_to(ROOT).parts
            # (a __main__ runs its program when imported: ``python -m tapescope``)
            if "__pycache__" in rel or rel[:2] == ("app", "qt") or p.stem == "__main__":
                continue
            out.append(p)
    return out


QT_FREE = tuple(module_name(p) for p in _headless_paths())


def test_the_headless_modules_are_every_module_but_the_qt_folders():
    """The computed list covers what it must (every command, the worker, the models, core, gpu)
    and nothing of app/qt."""
    free = set(QT_FREE)
    commands = {f"tapescope.app.commands.{p.stem}" for p in (ROOT / "app" / "commands").glob(
        "*.py") if p.stem != "__init__"}
    assert len(commands) > 15 and commands <= free
    assert {"tapescope.app.cli", "tapescope.app.live_worker", "tapescope.app.report_html",
            "tapescope.app.report_svg", "tapescope.views.models.graph_model",
            "tapescope.views.models.layout", "tapescope.core", "tapescope.gpu"} <= free
    assert not [m for m in free if m.startswith(("tapescope.app.qt", "tapescope.views.")) and
                not m.startswith("tapescope.views.models")]
    assert len(free) > 200


def test_only_the_qt_folders_import_qt():
    """The ast twin of the ``qt`` contract: a Qt import (at any level, lazy ones included) in a
    headless folder fails, naming the file and line."""
    bad = [f"{p.relative_to(ROOT)}:{line} imports {mod}" for p in _headless_paths()
           for line, mod in _imports(p) if mod.split(".")[0] in QT]
    assert not bad, "\n".join(bad)


def test_the_qt_folders_hold_every_qt_import():
    """And the other way: app/qt holds no module without Qt (a headless one belongs outside),
    through its own imports or the widgets it shows."""
    qt_dir = ROOT / "app" / "qt"
    lonely = []
    for p in sorted(qt_dir.glob("*.py")):
        if p.name == "__init__.py":
            continue
        mods = [m for _, m in _imports(p)]
        if not any(m.split(".")[0] in QT or m.startswith(("tapescope.app.qt", "tapescope.views."))
                   and not m.startswith("tapescope.views.models") for m in mods):
            lonely.append(p.name)
    assert not lonely, lonely


def test_model_logic_imports_with_qt_blocked():
    import subprocess
    import sys

    code = BLOCK_QT + _IMPORT_ALL.format(qt=QT, mods=QT_FREE)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


_IMPORT_ALL = """
import importlib
for m in {mods!r}:
    importlib.import_module(m)
    assert not [k for k in sys.modules if k.split(".")[0] in {qt!r}], m
print("ok")
"""


_INSTALLED = """
import importlib, sys
for m in {mods!r}:
    importlib.import_module(m)
    loaded = [k for k in sys.modules if k.split(".")[0] in {qt!r}]
    assert not loaded, (m, loaded[:3])
print("ok")
"""


def test_headless_modules_load_no_qt_where_pyside6_is_installed():
    """Blocking Qt proves a module works without it; this proves it does not load it where it is
    there (the headless worker once loaded PySide6.QtCore through views/__init__)."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("PySide6") is None:
        pytest.skip("PySide6 is not installed: test_model_logic_imports_with_qt_blocked covers it")
    code = _INSTALLED.format(qt=QT, mods=QT_FREE)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_every_qt_module_applies_the_pyside_guard():
    """views/__init__ is Qt-free, so the PySide6 refcount guard (views/_pyside_guard.py) runs
    because each module that imports Qt at import time imports it, directly or through a module
    it imports, before any of its code can call Qt."""
    import networkx as nx

    from tests.helpers.import_graph import graph, modules

    def imports_qt(path: Path) -> bool:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        return any(mod.split(".")[0] in QT for node in tree.body
                   for mod in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                               [node.module or ""] if isinstance(node, ast.ImportFrom) else []))

    mods, g = modules(), graph(lazy=False)
    qt_mods = {m for m, p in mods.items() if imports_qt(p)} - {"tapescope.views._pyside_guard"}
    assert {"tapescope.views.graph_view", "tapescope.app.qt.main_window",
            "tapescope.app.qt.live"} <= qt_mods
    bad = sorted(m for m in qt_mods if "tapescope.views._pyside_guard" not in nx.descendants(g, m))
    assert not bad, f"import tapescope.views._pyside_guard in: {bad}"
    assert not qt_mods & set(QT_FREE)
