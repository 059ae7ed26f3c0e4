"""benchmarks/device_check.sh --dry-run (its stages on the host backend) in an interpreter that
looks like the GPU machines': no PySide6, pyqtgraph, pytest-qt, Hypothesis or onnx. And the
headless CLI never imports Qt."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A sitecustomize that refuses the named top-level modules and logs every attempt. `import X`
# fails as for a missing package; importlib.util.find_spec(X) answers a spec with no origin
# instead of raising (PyTorch probes optional packages that way and must not crash).
_BLOCKER = '''
import importlib.machinery, os, sys
class _Absent:
    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r} (blocked by the test)",
                                  name=spec.name)
    def exec_module(self, module):
        pass
class _Block:
    names = set(os.environ["TS_BLOCK"].split(","))
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            with open(os.environ["TS_BLOCK_LOG"], "a") as f:
                f.write(name + "\\n")
            return importlib.machinery.ModuleSpec(name, _Absent())
        return None
sys.meta_path.insert(0, _Block())
'''
QT = ("PySide6", "shiboken6", "pyqtgraph", "pytestqt")


def _env(tmp_path: Path, blocked: tuple[str, ...]) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_BLOCKER)
    return dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{ROOT}", TS_BLOCK=",".join(blocked),
                TS_BLOCK_LOG=str(tmp_path / "imports.log"), PYTHON=sys.executable)


def _attempts(tmp_path: Path) -> list[str]:
    log = tmp_path / "imports.log"
    return log.read_text().split() if log.exists() else []


def test_headless_parity_never_imports_qt(tmp_path):
    env = _env(tmp_path, QT)
    proc = subprocess.run([sys.executable, "-m", "app.cli", "parity", "--workload", "mlp",
                           "--device", "host", "--steps", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bit-identical" in proc.stdout
    assert _attempts(tmp_path) == []  # not even a caught attempt


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                    reason="device_check.sh needs bash and coreutils' timeout")
def test_device_check_dry_run(tmp_path):
    env = _env(tmp_path, (*QT, "hypothesis", "onnx", "onnxruntime"))
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "device_check.sh"), "--dry-run"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-3000:]
    assert "Traceback" not in out + proc.stderr
    summary = out[out.index("device check summary"):]
    rows = [ln for ln in summary.splitlines() if ln[:2] in ("1 ", "2 ", "3 ", "4 ")]
    assert len(rows) == 11 and all(" ok " in r for r in rows), summary
    assert "smoke: bit-identical" in out
    assert out.count("bit-identical; first divergence: none") == 8  # every parity run
    # the benchmark table is printed last
    tail = [ln for ln in out.splitlines() if ln.strip()][-4:]
    assert tail[0].startswith("CPU tape") and tail[2].startswith("host episode"), tail
    # onnx is blocked: the full CLI cannot build its parser, the script says so and goes on
    assert "running the subcommands directly" in out or "onnx" not in _attempts(tmp_path)
    assert not any(a.split(".")[0] in QT for a in _attempts(tmp_path))
