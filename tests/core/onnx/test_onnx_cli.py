"""``tapescope onnx``: outputs, comparison, exit codes 0 / 1 / 2 with a one-line reason."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from onnx import numpy_helper

from tapescope.app.cli import main

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODELS = os.path.join(ROOT, "resources", "models")
CONV = os.path.join(MODELS, "tiny_convnet.onnx")
X = os.path.join(MODELS, "tiny_convnet.input.x.npy")
Y = os.path.join(MODELS, "tiny_convnet.expected.y.npy")


def test_matching_expected_output_exits_0(capsys):
    assert main(["onnx", CONV, "--input", f"x={X}", "--expected", Y]) == 0
    out = capsys.readouterr().out
    assert "output  y" in out and "(1, 5)" in out and "PASS" in out


def test_tensorproto_pb_inputs_and_named_expected(tmp_path, capsys):
    pb = tmp_path / "x.pb"
    t = numpy_helper.from_array(np.load(X), "x")
    pb.write_bytes(t.SerializeToString())
    assert main(["onnx", CONV, "--input", str(pb), "--expected", f"y={Y}"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_differing_output_exits_1(tmp_path, capsys):
    bad = tmp_path / "y.npy"
    y = np.load(Y)
    y[0, 2] += 0.5
    np.save(bad, y)
    assert main(["onnx", CONV, "--input", f"x={X}", "--expected", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS at 1 of 5" in out and "(0, 2)" in out and "FAIL" in out


def test_no_input_generates_a_deterministic_one(capsys):
    assert main(["onnx", CONV]) == 0
    first = capsys.readouterr().out
    assert main(["onnx", CONV]) == 0
    assert capsys.readouterr().out == first and "(generated)" in first


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", "onnx", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_bad_model_and_bad_input_exit_2_with_one_line(tmp_path, capsys):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\x01garbage" * 10)
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((2, 2), np.float32))
    pickled = tmp_path / "obj.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    # a real process for the model (status, stderr and no traceback as a user sees them; every
    # command's bad inputs also go through one in tests/app/test_cli_contract.py) ...
    r = _cli(str(junk))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "junk.onnx" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    # ... and the same main() in this process for the bad inputs (~3 CPU s less each)
    for args, needle in (((CONV, "--input", f"x={wrong}"), "shape (2, 2)"),
                         ((CONV, "--input", f"x={pickled}"), "obj.npy"),
                         ((CONV, "--input", f"nope={X}"), "'nope'")):
        assert main(["onnx", *args]) == 2, args
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], captured.err
        assert lines[0].startswith("tapescope onnx: ") and "Traceback" not in captured.err
