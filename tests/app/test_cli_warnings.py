"""The CLI's stderr carries only its own lines (issue 49, red team 3): numpy's RuntimeWarnings of
a float16 model that overflows (an all-NaN output's statistics, inf - inf in the comparison with
--expected) are not printed; ``--debug`` shows them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

ROOT = Path(__file__).resolve().parents[2]


def _overflowing_float16_model(tmp_path) -> tuple[str, str, str]:
    """x * 60000 overflows float16 to inf; y - y is then NaN; z = y (inf)."""
    h = TensorProto.FLOAT16
    big = numpy_helper.from_array(np.full((1, 4), 60000, np.float16), "big")
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "big"], ["y"]), helper.make_node("Sub", ["y", "y"], ["n"]),
         helper.make_node("Identity", ["y"], ["z"])], "g",
        [helper.make_tensor_value_info("x", h, [1, 4])],
        [helper.make_tensor_value_info("n", h, [1, 4]),
         helper.make_tensor_value_info("z", h, [1, 4])], [big])
    m = str(tmp_path / "f16.onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), m)
    np.save(tmp_path / "x.npy", np.full((1, 4), 100, np.float16))
    np.save(tmp_path / "z.npy", np.full((1, 4), np.inf, np.float16))
    return m, str(tmp_path / "x.npy"), str(tmp_path / "z.npy")


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", *argv], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_an_overflowing_float16_model_prints_no_warning(tmp_path):
    m, x, z = _overflowing_float16_model(tmp_path)
    r = _cli("onnx", m, "--input", f"x={x}", "--expected", f"z={z}")
    assert r.returncode == 0, r.stderr
    assert "min nan" in r.stdout and "result  PASS" in r.stdout
    assert "Warning" not in r.stderr and r.stderr == "", r.stderr
    r = _cli("--debug", "onnx", m, "--input", f"x={x}", "--expected", f"z={z}")
    assert r.returncode == 0 and "RuntimeWarning" in r.stderr


def test_a_complex_input_is_one_line_not_a_complex_warning(tmp_path):
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
        "m", [helper.make_tensor_value_info("x", f, [2, 3])],
        [helper.make_tensor_value_info("y", f, [2, 4])],
        [numpy_helper.from_array(np.ones((3, 4), np.float32), "w")])
    m = str(tmp_path / "m.onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), m)
    np.save(tmp_path / "c.npy", np.ones((2, 3), np.complex64))
    for argv in (["onnx", m, "--input", f"x={tmp_path / 'c.npy'}"],
                 ["parity", "--model", m, "--input", f"x={tmp_path / 'c.npy'}", "--device",
                  "host", "--steps", "1"]):
        r = _cli(*argv)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"tapescope {argv[0]}: ")
        assert "Warning" not in r.stderr and "c.npy" in r.stderr and "complex" in r.stderr
