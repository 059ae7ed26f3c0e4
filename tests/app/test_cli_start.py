"""Building the CLI's parser imports no ONNX, torch or Qt, and no numpy (issue 47 item 4:
``tapescope --version`` within 2x ``python -c "import numpy"``; benchmarks/bench_cli_start.py
measures it). Every command module is imported and registered in a fresh interpreter, then
``sys.modules`` is read; the help that needed a heavy module (the ONNX budgets) still says the
same numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("onnx", "onnxruntime", "torch", "PySide6", "pyqtgraph", "cupy", "numpy")
OURS = ("tapescope.core.onnx", "tapescope.core.ops", "tapescope.core.tape", "tapescope.app.runs",
        "tapescope.app.wire")


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})


def test_building_the_parser_imports_nothing_heavy():
    code = ("import json, sys; from tapescope.app.cli import build_parser; p = build_parser();"
            " subs = p._subparsers._group_actions[0].choices;"
            " print(json.dumps({'mods': sorted(sys.modules), 'subs': sorted(subs)}))")
    out = _run(["-c", code])
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert {"parity", "onnx", "report", "gui", "worker", "capture"} <= set(got["subs"])
    heavy = [m for m in got["mods"] if m.split(".")[0] in HEAVY
             or any(m == o or m.startswith(o + ".") for o in OURS)]
    assert not heavy, f"building the parser imported {heavy[:10]}"


def test_the_help_shows_the_limits_own_defaults():
    """onnx_cmd's help defaults are Limits()'s, read without importing core.onnx."""
    from tapescope.app.commands.onnx_cmd import help_defaults
    from tapescope.core.onnx.limits import Limits, default_max_bytes

    d, lim = help_defaults(), Limits()
    assert vars(d) == {k: getattr(lim, k) for k in vars(d)}
    assert set(vars(d)) == {"max_elements", "max_bytes", "max_loop_iterations", "max_nodes",
                            "max_work"}
    assert d.max_bytes == default_max_bytes()


def test_version_and_help_still_work():
    version = _run(["-m", "tapescope.app.cli", "--version"])
    assert version.returncode == 0 and version.stdout.startswith("tapescope "), version
    top = _run(["-m", "tapescope.app.cli", "--help"])
    assert top.returncode == 0 and "parity" in top.stdout and "onnx" in top.stdout, top
    parity = _run(["-m", "tapescope.app.cli", "parity", "--help"])
    assert parity.returncode == 0 and "--against" in parity.stdout, parity.stderr[-2000:]
    onnx = _run(["-m", "tapescope.app.cli", "onnx", "--help"])
    assert onnx.returncode == 0 and f"(default {1 << 27})" in onnx.stdout, onnx.stderr[-2000:]
    report = _run(["-m", "tapescope.app.cli", "report", "--help"])
    assert report.returncode == 0 and "unfused-fused" in report.stdout, report.stderr[-2000:]
