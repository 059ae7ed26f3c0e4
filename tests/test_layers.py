"""Imports flow downward only (docs/layers.md): core never imports gpu, Qt, views or app; gpu never
imports Qt, views or app; views never import app. The rules are import-linter contracts in
pyproject.toml ([tool.importlinter], docs/layers.md), run here; the ast checks below say the same
in a second way, and the subprocess checks prove what no static tool can (what is loaded)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QT = ("PySide6", "pyqtgraph", "shiboken6")
FORBIDDEN = {
    "core": QT + ("gpu", "views", "app", "cupy"),
    "gpu": QT + ("views", "app"),
    "views": ("app",),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            if node.module == "tapescope":  # from tapescope import gpu
                out += [(node.lineno, f"tapescope.{a.name}") for a in node.names]
    return out


def _top(mod: str) -> str:
    """The layer (or outside package) a module belongs to: ``tapescope.gpu.x`` -> ``gpu``."""
    parts = mod.split(".")
    return parts[1] if parts[0] == "tapescope" and len(parts) > 1 else parts[0]


def test_import_linter_contracts_are_kept():
    """`lint-imports` over pyproject.toml's contracts (its API, no cache written)."""
    import contextlib
    import io
    import os
    import sys

    pytest.importorskip("importlinter", reason="import-linter is in the test extra")
    from importlinter.cli import lint_imports

    out, old = io.StringIO(), os.getcwd()
    try:
        os.chdir(ROOT)
        sys.path.insert(0, str(ROOT))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = lint_imports(config_filenames=(str(ROOT / "pyproject.toml"),), no_cache=True,
                                no_logo=True)
    finally:
        sys.path.remove(str(ROOT))
        os.chdir(old)
    text = out.getvalue()
    assert code == 0, text[-6000:]
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


# The app's model logic: no Qt, proved by importing each with PySide6 and pyqtgraph blocked.
# (A "(no Qt)" docstring is not a boundary; this is.) Widgets and the live toolbar stay out.
QT_FREE = tuple("tapescope." + m for m in (
    "app.session", "app.runs", "app.report_data", "app.report_html", "app.live_worker",
    "app.run_provenance", "app.platform_check", "app.remote", "app.remote_protocol",
    "app.remote_client", "app.remote_server", "app.step_history", "app.cli",
    "app.live_inspect", "app.onnx_view", "app.wire",
    "app.commands.fuse", "app.commands.gradcheck", "app.commands.gui", "app.commands.kernels",
    "app.commands.model_args", "app.commands.onnx_cmd", "app.commands.parity",
    "app.commands.report", "app.commands.train", "app.commands.worker", "app.commands.argtypes",
    "app.commands.doctor", "app.about", "app.commands.against", "app.torch_run",
    "app.commands.capture", "app.commands.capture_pair", "app.commands.parity_table",
    "app.commands.sweep", "app.commands.capture_ranks", "app.capture.ranks_html",
    "core.capture.ranks",
    "app.qt.style", "app.tensor_window",
    "views.models.graph_model", "views.models.array_stats", "views.models.node_details",
    "views.models.layout", "views.models.parity_rows", "views.models.search",
    "views.models.scope_runs", "views.models.stepper_model",
    "views.models.synthetic", "views.models.repro", "views.examples",
    "core", "core.ops", "core.parity", "core.provenance", "core.onnx", "core.native", "gpu",
    "gpu.fusion", "gpu.emitc", "gpu.host", "gpu.nvrtc", "gpu.backends",
))

_BLOCKER = """
import importlib, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {qt!r}:
            raise ImportError("Qt is blocked: " + name)
sys.meta_path.insert(0, Block())
for m in {mods!r}:
    importlib.import_module(m)
    assert not [k for k in sys.modules if k.split(".")[0] in {qt!r}], m
print("ok")
"""


def test_model_logic_imports_with_qt_blocked():
    import subprocess
    import sys

    code = _BLOCKER.format(qt=QT, mods=QT_FREE)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_every_command_module_is_checked_headless():
    """Every CLI command starts without Qt (Qt only inside ``run``): none escapes the list."""
    names = {f"tapescope.app.commands.{p.stem}" for p in (ROOT / "app" / "commands").glob("*.py")
             if p.stem != "__init__"}
    assert names and names <= set(QT_FREE), sorted(names - set(QT_FREE))


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
