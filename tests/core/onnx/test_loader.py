"""Loader hardening: every bad file or input is an OnnxError naming the file, node and reason."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tapescope.core.onnx import OnnxError, Session, load, run
from tests.helpers.onnx_nodes import one_node

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "resources", "models")
MLP = os.path.join(MODELS, "tiny_mlp.onnx")


def test_missing_file_names_it(tmp_path):
    p = tmp_path / "nope.onnx"
    with pytest.raises(OnnxError, match="no such file") as e:
        load(p)
    assert str(p) in str(e.value)


def test_empty_truncated_corrupt_and_foreign_files(tmp_path):
    data = open(MLP, "rb").read()
    cases = {
        "empty.onnx": b"",
        "truncated.onnx": data[: len(data) // 2],
        "corrupt.onnx": bytes(b ^ 0x5A for b in data),
        "foreign.onnx": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4,
    }
    for name, blob in cases.items():
        p = tmp_path / name
        p.write_bytes(blob)
        with pytest.raises(OnnxError) as e:
            Session(p)
        assert str(p) in str(e.value), name
        assert "\n" not in str(e.value), name


def test_unsupported_opset_is_refused():
    m = one_node("Relu", {"x": np.zeros((2,), np.float32)}, opset=99)
    with pytest.raises(OnnxError, match="unsupported opset 99"):
        load(m)


def test_unsupported_op_names_the_node():
    m = one_node("Relu", {"x": np.zeros((2,), np.float32)})
    m.graph.node[0].op_type = "FrobnicateTensor"
    m.graph.node[0].domain = "com.example"
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(OnnxError, match=r"node 0 'the_relu' \(FrobnicateTensor\).*unsupported op"):
        Session(m)


def test_missing_input_wrong_shape_and_dtype():
    sess = Session(MLP)
    x = np.load(os.path.join(MODELS, "tiny_mlp.input.x.npy"))
    with pytest.raises(OnnxError, match="missing input 'x'"):
        sess.run({})
    with pytest.raises(OnnxError, match=r"'x': shape \(3, 8\) but the model declares \(2, 8\)"):
        sess.run({"x": np.zeros((3, 8), np.float32)})
    with pytest.raises(OnnxError, match="dtype float64"):
        sess.run({"x": x.astype(np.float64)})
    with pytest.raises(OnnxError, match="'z' is not an input"):
        sess.run({"x": x, "z": x})


def test_runtime_failure_names_the_node():
    # a Reshape to an impossible shape only fails when it runs
    m = one_node("Reshape", {"x": np.zeros((2, 3), np.float32)},
                 inits={"s": np.array([4, 4], np.int64)})
    with pytest.raises(OnnxError, match=r"node 0 'the_reshape' \(Reshape\): ValueError"):
        run(m, {"x": np.zeros((2, 3), np.float32)})


def _external_model(tmp_path, location: str) -> str:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = numpy_helper.from_array(w, "w")
    m = one_node("Add", {"x": np.zeros((2, 3), np.float32)}, inits={"w": w})
    m.graph.initializer[0].CopyFrom(t)
    onnx.external_data_helper.set_external_data(m.graph.initializer[0], location=location)
    m.graph.initializer[0].ClearField("raw_data")
    m.graph.initializer[0].data_location = TensorProto.EXTERNAL
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    (d / "weights.bin").write_bytes(w.tobytes())
    (tmp_path / "outside.bin").write_bytes(w.tobytes())
    p = d / "m.onnx"
    p.write_bytes(m.SerializeToString())
    return str(p)


def test_external_data_inside_the_folder_is_read(tmp_path):
    p = _external_model(tmp_path, "weights.bin")
    out = run(p, {"x": np.ones((2, 3), np.float32)})["y0"]
    np.testing.assert_array_equal(out, np.arange(6, dtype=np.float32).reshape(2, 3) + 1)


@pytest.mark.parametrize("loc", ["../outside.bin", "/etc/passwd", "missing.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, loc):
    p = _external_model(tmp_path, loc)
    with pytest.raises(OnnxError, match="external data of tensor 'w'") as e:
        load(p)
    assert p in str(e.value)


def test_symlink_escaping_the_folder_is_refused(tmp_path):
    p = _external_model(tmp_path, "link.bin")
    os.symlink(tmp_path / "outside.bin", tmp_path / "model" / "link.bin")
    with pytest.raises(OnnxError, match="escapes the model's folder"):
        load(p)


def test_load_does_not_modify_the_callers_model():
    m = onnx.load(MLP)
    before = m.SerializeToString()
    Session(m).run({"x": np.zeros((2, 8), np.float32)})
    assert m.SerializeToString() == before


def test_mutated_models_fail_only_with_onnx_error(tmp_path):
    # flip, drop and duplicate bytes of a valid model: whatever happens, it is an OnnxError
    from tapescope.core.onnx import default_inputs

    data = bytearray(open(os.path.join(MODELS, "tiny_convnet.onnx"), "rb").read())
    rng = np.random.default_rng(11)
    outcomes = {"ok": 0, "error": 0}
    for i in range(150):
        blob = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(0, len(blob)))
            kind = rng.integers(0, 3)
            if kind == 0:
                blob[pos] ^= 1 << int(rng.integers(0, 8))
            elif kind == 1:
                del blob[pos:pos + int(rng.integers(1, 8))]
            else:
                blob[pos:pos] = blob[pos:pos + int(rng.integers(1, 8))]
        p = tmp_path / f"m{i}.onnx"
        p.write_bytes(bytes(blob))
        try:
            sess = Session(p)
            sess.run(default_inputs(sess))
            outcomes["ok"] += 1
        except OnnxError as e:
            assert str(p) in str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 0  # the mutations did break models, and each one said where
