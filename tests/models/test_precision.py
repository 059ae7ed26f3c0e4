"""A model's precision by default: a float32 model runs float32 episodes unless --dtype says
otherwise; a half-precision model runs a half episode (docs/reference-order.md)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from tapescope.app.cli import main
from tapescope.app.commands.model_args import resolve_dtype
from tapescope.core.onnx.workload import model_dtype, model_spec


def _model(path, elem, np_dt):
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "p",
        [helper.make_tensor_value_info("x", elem, [2, 3])],
        [helper.make_tensor_value_info("y", elem, [2, 4])],
        [numpy_helper.from_array(np.ones((3, 4), np_dt), "w")])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_the_model_precision_is_the_default(tmp_path):
    f32 = _model(tmp_path / "f32.onnx", TensorProto.FLOAT, np.float32)
    f64 = _model(tmp_path / "f64.onnx", TensorProto.DOUBLE, np.float64)
    assert model_dtype(f32) == "float32" and model_dtype(f64) == "float64"
    assert resolve_dtype(None, model_spec(f32)) == "float32"
    assert resolve_dtype(None, model_spec(f64)) == "float64"
    assert resolve_dtype("float64", model_spec(f32)) == "float64"  # --dtype wins
    assert resolve_dtype(None, "mlp") == "float64"


def test_parity_runs_a_float32_model_in_float32(tmp_path, capsys):
    import json

    f32 = _model(tmp_path / "f32.onnx", TensorProto.FLOAT, np.float32)
    out = tmp_path / "p.json"
    assert main(["parity", "--model", f32, "--device", "host", "--steps", "1",
                 "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["dtype"] == "float32"
    (loss,) = rep["losses"]
    assert loss["step"] == 1 and loss["reference"] == loss["candidate"]
    assert float(np.float32(loss["reference"])) == loss["reference"]  # a float32 loss


def _bf16_model(path):
    import ml_dtypes

    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    w.data_type = TensorProto.BFLOAT16  # bfloat16 bits in the raw data
    w.raw_data = np.ones((3, 4), np.float32).astype(ml_dtypes.bfloat16).tobytes()
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "p",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 4])], [w])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_a_half_model_runs_at_its_own_type(tmp_path, capsys, name):
    import json

    half = (_model(tmp_path / "h.onnx", TensorProto.FLOAT16, np.float16) if name == "float16"
            else _bf16_model(tmp_path / "h.onnx"))
    assert model_dtype(half) == name and resolve_dtype(None, model_spec(half)) == name
    out = tmp_path / "p.json"
    rc = main(["parity", "--model", half, "--device", "host", "--steps", "2", "--json", str(out)])
    text = capsys.readouterr()
    assert rc == 0, text
    rep = json.loads(out.read_text())
    assert rep["dtype"] == name and rep["exact"] is True
    assert all(e["reference"] == e["candidate"] for e in rep["losses"])
