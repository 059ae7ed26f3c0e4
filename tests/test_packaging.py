"""One import name (issue 42 item 5): everything of ours installs under ``tapescope``
(pyproject.toml's package-dir maps the repository's folders to tapescope.app, tapescope.core,
...), so a user's own ``core``/``app``/``gpu``/``views``/``resources`` packages stay theirs when
tapescope runs inside their process (a capture). tests/capture/test_guest.py captures a script
that sits beside its own ``core/`` and ``app/``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
OURS = ("app", "core", "gpu", "views", "resources")


TOP = ROOT / "app" / "_top"  # the ``tapescope`` package itself (pyproject.toml says why here)


def test_the_package_list_is_every_folder_with_an_init():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert cfg["package-dir"] == {"tapescope": "app/_top",
                                  **{f"tapescope.{top}": top for top in OURS}}
    folders = sorted("tapescope." + ".".join(p.parent.relative_to(ROOT).parts)
                     for top in OURS for p in (ROOT / top).rglob("__init__.py")
                     if "__pycache__" not in p.parts and TOP not in p.parents)
    assert sorted(cfg["packages"]) == ["tapescope", *folders]


def test_import_tapescope_loads_nothing_until_asked(tmp_path):
    """``import tapescope`` runs before every ``import tapescope.core...``: it loads no
    subpackage, numpy or torch; ``tapescope.capture`` is the capture API, loaded when read;
    ``__version__`` the installed one; ``python -m tapescope`` the command."""
    code = ("import sys, importlib.metadata as md\n"
            "import tapescope\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tapescope', 'numpy', 'torch')))\n"
            "print(tapescope.__version__ == md.version('tapescope'), dir(tapescope))\n"
            "from tapescope.app.capture import capture\n"
            "print(tapescope.capture is capture, 'torch' in sys.modules)\n"
            "try:\n    tapescope.nothing\nexcept AttributeError as e:\n    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == [
        "['tapescope']", "True ['__version__', 'capture']", "True False",
        "module 'tapescope' has no attribute 'nothing'"], p.stdout
    v = subprocess.run([sys.executable, "-m", "tapescope", "--version"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert v.returncode == 0 and v.stdout.split()[0] == "tapescope", (v.stdout, v.stderr[-2000:])


def _top_level_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    bad = []
    for n in ast.walk(tree):
        names = [a.name for a in n.names] if isinstance(n, ast.Import) else \
            [n.module] if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module else []
        bad += [f"{path.relative_to(ROOT)}:{n.lineno} imports {m}" for m in names
                if m.split(".")[0] in OURS]
    return bad


def test_nothing_of_ours_imports_a_generic_top_level_name():
    """`import core` in our code would load a second copy of core (or the user's own core)."""
    files = [p for top in (*OURS, "tests", "benchmarks") for p in (ROOT / top).rglob("*.py")
             if "zoo" not in p.parts]  # the capture zoo is user code: theirs to name
    bad = [b for p in files for b in _top_level_imports(p)]
    assert len(files) > 300 and not bad, "\n".join(bad)


def test_a_command_loads_no_generic_top_level_module(tmp_path):
    """Run a command in-process in a fresh interpreter, from a folder that is not the checkout:
    afterwards no module named core, app, gpu, views or resources is loaded."""
    code = ("import sys; from tapescope.app.cli import main\n"
            "rc = main(['parity', '--workload', 'mlp', '--device', 'host', '--steps', '1'])\n"
            f"print(rc, sorted(m for m in sys.modules if m.split('.')[0] in {OURS!r}))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines()[-1] == "0 []", p.stdout[-2000:]
