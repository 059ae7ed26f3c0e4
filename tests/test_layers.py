"""Imports flow downward only (DESIGN.md): core never imports gpu, Qt, views or app; gpu never
imports Qt, views or app; views never import app. Checked on the source, like import-linter."""

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
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_flow_downward(package):
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, mod in _imports(path):
            top = mod.split(".")[0]
            if top in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
    assert not bad, "\n".join(bad)


def test_core_onnx_is_the_only_core_module_importing_onnx():
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in (ROOT / "core").rglob("*.py")
           if "onnx" not in p.relative_to(ROOT / "core").parts[:1]
           for line, mod in _imports(p) if mod.split(".")[0] == "onnx"]
    assert not bad, bad
