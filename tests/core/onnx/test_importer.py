"""import_to_tape: the tape computes what the executor computes, bit for bit; backward trains."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tapescope.core import Tape, ops, optim
from tapescope.core.onnx import OnnxError, Session, import_to_tape, run

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODELS = os.path.join(ROOT, "resources", "models")


def _same_bits(tape, imp, ref):
    for name, v in imp.outputs.items():
        got, want = tape.value(v), ref[name]
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=name)


@pytest.mark.parametrize("name", ["tiny_mlp", "tiny_convnet"])
def test_example_models_match_the_executor_bit_for_bit(name):
    path = os.path.join(MODELS, f"{name}.onnx")
    x = np.load(os.path.join(MODELS, f"{name}.input.x.npy"))
    tape = Tape(np.float32)
    imp = import_to_tape(path, tape, {"x": x})
    assert tape.ok
    _same_bits(tape, imp, run(path, {"x": x}))
    ops_used = {n.op for n in tape.nodes}
    assert {"matmul", "add"} <= ops_used
    if name == "tiny_convnet":
        assert {"conv2d", "maxpool2d", "mean"} <= ops_used


def test_resnet_like_matches_bit_for_bit():
    sys.path.insert(0, MODELS)
    from make_models import resnet_like

    model, feeds = resnet_like(np.random.default_rng(5), size=32, widths=(8, 16, 16, 16))
    tape = Tape(np.float32)
    imp = import_to_tape(model, tape, feeds)
    _same_bits(tape, imp, run(model, feeds))
    assert sum(n.op == "conv2d" for n in tape.nodes) == 20


def _transformerish():
    """LayerNorm, GELU (Erf), an embedding Gather, opset-11 Softmax and a shape subgraph."""
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT

    def init(name, a):
        return numpy_helper.from_array(np.asarray(a), name)

    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["e"], axis=0, name="embed"),
        helper.make_node("LayerNormalization", ["e", "g", "b"], ["ln"], axis=-1, name="ln"),
        helper.make_node("MatMul", ["ln", "w"], ["h"], name="proj"),
        helper.make_node("Div", ["h", "sqrt2"], ["hs"]),
        helper.make_node("Erf", ["hs"], ["er"]),
        helper.make_node("Add", ["er", "one"], ["er1"]),
        helper.make_node("Mul", ["h", "er1"], ["hm"]),
        helper.make_node("Mul", ["hm", "half"], ["gelu"]),
        # shape subgraph: (B*T, D) from the runtime shape, folded at import
        helper.make_node("Shape", ["gelu"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "i2"], ["d"], axis=0, name="last_dim"),
        helper.make_node("Concat", ["minus1", "d"], ["newshape"], axis=0, name="cat"),
        helper.make_node("Reshape", ["gelu", "newshape"], ["flat"], name="reshape"),
        helper.make_node("Softmax", ["flat"], ["y"], axis=1, name="softmax"),
    ]
    inits = [init("emb", rng.standard_normal((10, 6)).astype(np.float32)),
             init("g", (1 + 0.1 * rng.standard_normal(6)).astype(np.float32)),
             init("b", (0.1 * rng.standard_normal(6)).astype(np.float32)),
             init("w", rng.standard_normal((6, 6)).astype(np.float32)),
             init("sqrt2", np.float32(np.sqrt(2))), init("one", np.float32(1)),
             init("half", np.float32(0.5)), init("i2", np.array([2], np.int64)),
             init("minus1", np.array([-1], np.int64))]
    g = helper.make_graph(nodes, "t",
                          [helper.make_tensor_value_info("tokens", TensorProto.INT64, [2, 3])],
                          [helper.make_tensor_value_info("y", f, [6, 6])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    return model, {"tokens": np.array([[1, 4, 4], [9, 0, 2]], np.int64)}


def test_layernorm_gelu_gather_softmax11_and_folded_shape_subgraph():
    model, feeds = _transformerish()
    model.opset_import[0].version = 17  # LayerNormalization needs 17; Softmax still axis=1 2-D
    tape = Tape(np.float32)
    imp = import_to_tape(model, tape, feeds)
    _same_bits(tape, imp, run(model, feeds))
    folded = " ".join(imp.folded)
    assert "'shape'" in folded and "'last_dim'" in folded and "'cat'" in folded
    assert {"gather", "erf", "softmax", "reshape"} <= {n.op for n in tape.nodes}


def test_backward_reaches_every_param_and_sgd_lowers_the_loss():
    path = os.path.join(MODELS, "tiny_convnet.onnx")
    x = np.load(os.path.join(MODELS, "tiny_convnet.input.x.npy"))
    sess = Session(path, fold=False)
    tape = Tape(np.float64)
    first = import_to_tape(sess, tape, {"x": x})
    mark = tape.mark()
    opt = optim.SGD(tape, lr=0.01)
    opt.add_all()
    losses = []
    for _ in range(4):
        tape.reset_to(mark)
        imp = import_to_tape(sess, tape, {"x": x}, params=first.params)
        loss = ops.mean(imp.outputs["y"] * imp.outputs["y"])
        tape.backward(loss)
        assert all(tape.grad(p) is not None for p in first.params.values())
        losses.append(float(tape.value(loss)))
        opt.step()
    assert losses[-1] < losses[0] * 0.9, losses


def test_an_op_without_tape_form_is_named():
    x = np.zeros((1, 1, 4, 4), np.float32)
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("DepthToSpace", ["r"], ["y"], blocksize=1, name="d2s")], "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OnnxError, match=r"node 1 'd2s' \(DepthToSpace\).*no tape form"):
        import_to_tape(m, Tape(np.float32), {"x": x})


@pytest.mark.parametrize("opset, op", [(11, "Softmax"), (11, "LogSoftmax"), (13, "Softmax")])
def test_softmax_without_an_axis_takes_the_opsets_default(opset, op):
    # before opset 13 the default axis is 1 and the input is flattened to 2-D there, so each of
    # the 2 rows of a [2, 3, 4] input normalises over all 12 values; from 13 it is the last axis
    x = np.linspace(-2.0, 3.0, 24, dtype=np.float32).reshape(2, 3, 4)
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    tape = Tape(np.float32)
    imp = import_to_tape(model, tape, {"x": x})
    _same_bits(tape, imp, run(model, {"x": x}))
    y = tape.value(imp.outputs["y"]).astype(np.float64)
    p = np.exp(y) if op == "LogSoftmax" else y
    sums = p.reshape(2, 12).sum(axis=1) if opset < 13 else p.sum(axis=-1).ravel()
    np.testing.assert_allclose(sums, 1.0, rtol=1e-5)
