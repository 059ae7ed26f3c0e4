"""`gui M.onnx --live` and `gui --workload rel.py --live` with relative paths work from any
directory: the live worker starts in the repository root, so the spec carries absolute paths."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tapescope.app.commands.model_args import absolute_spec, resolve_workload

ROOT = Path(__file__).resolve().parents[2]


def test_specs_name_absolute_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(model="m.onnx", reinit=True, workload=None)
    assert resolve_workload(args) == "onnx+reinit:" + str(tmp_path / "m.onnx")
    assert absolute_spec("w.py") == str(tmp_path / "w.py")
    assert absolute_spec("onnx:sub/m.onnx") == "onnx:" + str(tmp_path / "sub" / "m.onnx")
    assert absolute_spec("mlp") == "mlp" and absolute_spec(None) is None


@pytest.mark.slow
@pytest.mark.parametrize("how", ["model", "workload"])
def test_gui_live_from_another_directory(tmp_path, how):
    if how == "model":
        shutil.copy(ROOT / "resources" / "models" / "tiny_convnet.onnx", tmp_path / "m.onnx")
        argv = ["m.onnx", "--live"]
    else:
        shutil.copy(ROOT / "resources" / "workloads" / "logistic.py", tmp_path / "w.py")
        argv = ["--workload", "w.py", "--live"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "gui", *argv, "--device",
                           "host",
                           "--steps", "2", "--screenshot", "shot.png"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "shot.png").stat().st_size > 0
    assert "no such" not in proc.stdout + proc.stderr
