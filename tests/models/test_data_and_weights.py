"""Your data and your weights: --input NAME=FILE.npy, --shape NAME=d0,d1 for dynamic axes (what
was chosen is said), --weights FILE.safetensors by initializer name (never pickle; a name or
shape mismatch is one line naming it)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save
from safetensors.numpy import save_file

from tapescope.app.cli import main
from tapescope.core.onnx.errors import OnnxError
from tapescope.core.onnx.workload import OnnxWorkload, split_options, with_options


def _model(path):
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
        "m", [helper.make_tensor_value_info("x", f, ["batch", 3])],
        [helper.make_tensor_value_info("y", f, ["batch", 4])],
        [numpy_helper.from_array(np.ones((3, 4), np.float32), "w")])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_options_round_trip_through_the_spec():
    spec = with_options("onnx:/m.onnx", {"x": "/x.npy"}, {"x": (5, 3)}, "/w.safetensors")
    assert split_options(spec) == ("onnx:/m.onnx", {
        "inputs": {"x": "/x.npy"}, "shapes": {"x": (5, 3)}, "weights": "/w.safetensors"})


def test_dynamic_batch_is_said_and_shape_sets_it(tmp_path):
    m = _model(tmp_path / "m.onnx")
    wl = OnnxWorkload(m, dtype=np.float32)
    assert wl.input_specs["x"][0] == (1, 3)
    assert wl.input_notes == ["input 'x': dynamic batch=1 (give --shape x=...)"]
    wl = OnnxWorkload(m, dtype=np.float32, shapes={"x": (5, 3)})
    assert wl.record(0).tape.value(wl.inputs["x"]).shape == (5, 3)
    with pytest.raises(OnnxError, match="axis 1 is fixed at 3"):
        OnnxWorkload(m, shapes={"x": (5, 4)})
    with pytest.raises(OnnxError, match="no input 'z'"):
        OnnxWorkload(m, shapes={"z": (5, 3)})


def test_input_and_weights_files(tmp_path):
    m = _model(tmp_path / "m.onnx")
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
    np.save(tmp_path / "x.npy", x)
    w = np.full((3, 4), 0.5, np.float32)
    save_file({"w": w}, str(tmp_path / "w.safetensors"))
    wl = OnnxWorkload(m, dtype=np.float32, inputs={"x": str(tmp_path / "x.npy")},
                      shapes={"x": (2, 3)}, weights=str(tmp_path / "w.safetensors"))
    wl.record(0)
    assert np.array_equal(wl.tape.value(wl.inputs["x"]), x)
    assert np.array_equal(wl.params[0].value, w)
    save_file({"w": np.ones((4, 3), np.float32)}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(OnnxError, match=r"'w' has shape \(4, 3\), the model's is \(3, 4\)"):
        OnnxWorkload(m, weights=str(tmp_path / "bad.safetensors"))
    save_file({"v": w}, str(tmp_path / "name.safetensors"))
    with pytest.raises(OnnxError, match="'v' is not a weight of the model"):
        OnnxWorkload(m, weights=str(tmp_path / "name.safetensors"))
    (tmp_path / "pickle.npy").write_bytes(b"\x80\x04not an array")
    with pytest.raises(OnnxError, match="not a readable .npy"):
        OnnxWorkload(m, inputs={"x": str(tmp_path / "pickle.npy")})


def test_parity_takes_them_and_a_mismatch_is_one_line(tmp_path, capsys):
    m = _model(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((4, 3), np.float32))
    save_file({"w": np.full((3, 4), 0.25, np.float32)}, str(tmp_path / "w.safetensors"))
    out = tmp_path / "p.json"
    assert main(["parity", "--model", m, "--input", f"x={tmp_path / 'x.npy'}", "--shape",
                 "x=4,3", "--weights", str(tmp_path / "w.safetensors"), "--device", "host",
                 "--steps", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["exact"]
    assert "input 'x': dynamic batch=4" in capsys.readouterr().out
    assert main(["parity", "--model", m, "--input", f"x={tmp_path / 'x.npy'}", "--device",
                 "host", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shape (4, 3), the model takes (1, 3)" in err[0]
    assert "--shape x=4,3" in err[0]
    assert main(["parity", "--input", "x=y.npy", "--device", "host"]) == 2
