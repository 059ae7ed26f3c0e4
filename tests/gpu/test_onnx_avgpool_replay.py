"""An ONNX model with strided AveragePools, imported onto the tape and replayed on the host
backend: values and gradients bit-identical, and equal to the ONNX executor's outputs.

The windows overlap (kernel 3, stride 2) and some include padding, so each input gets the
gradient of several windows: a kernel that sums a window in another order, or adds the
overlapping window gradients in another order, changes the last bits and fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops

onnx = pytest.importorskip("onnx")
pytest.importorskip("tapescope.core.ops.nn",
                    reason="the imported-model ops (core/ops/nn.py) are absent")

from onnx import helper, numpy_helper  # noqa: E402

POOLS = {
    "k3s2p1": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "k3s2p1_include_pad": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                               count_include_pad=1),
    "k3x2_s2x1_ceil": dict(kernel_shape=[3, 2], strides=[2, 1], pads=[0, 1, 1, 0],
                           ceil_mode=1),
}


def _model(pool: dict, dtype) -> onnx.ModelProto:
    """x -> Conv(W) -> AveragePool(strided) -> Mul(s) -> y: W and s are trainable, so the
    gradients flow back through the pool's backward."""
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    rng = np.random.default_rng(18)
    w = rng.standard_normal((3, 2, 3, 3)).astype(dtype) * dtype(0.4)
    s = rng.standard_normal((1, 3, 1, 1)).astype(dtype)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("AveragePool", ["c"], ["p"], name="pool", **pool),
             helper.make_node("Mul", ["p", "s"], ["y"], name="scale")]
    g = helper.make_graph(nodes, "avgpool", [helper.make_tensor_value_info("x", et, [2, 2, 9, 8])],
                          [helper.make_tensor_value_info("y", et, None)],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(s, "s")])
    g.output[0].type.tensor_type.shape.SetInParent()
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("pool", list(POOLS))
def test_strided_average_pool_replays_bit_identically(host, pool, dtype):
    from tapescope.core.onnx import run
    from tapescope.core.onnx.importer import import_to_tape

    model = _model(POOLS[pool], dtype)
    x = np.random.default_rng(7).standard_normal((2, 2, 9, 8)).astype(dtype)
    tape = Tape(dtype)
    imp = import_to_tape(model, tape, {"x": x})
    y = imp.outputs["y"]
    assert [n.op for n in tape.nodes].count("avgpool2d") == 1
    # the tape's forward is the executor's, bit for bit
    assert np.array_equal(tape.value(y.id), run(model, {"x": x})["y"])
    loss = ops.mean(ops.mul(y, y))
    tape.backward(loss)
    prog = gpu.capture(host, tape, loss)
    prog.forward()
    prog.backward()
    rep = gpu.parity.compare(tape, prog)
    assert rep.exact, rep.first_divergence
    pool_node = next(n for n in rep.nodes if n.op == "avgpool2d")
    assert pool_node.value.exact and pool_node.grad is not None and pool_node.grad.exact
    # and the gradients that went through the pool reached the conv's weights, on both sides
    w = imp.params["W"]
    assert np.any(tape.grad(w.id) != 0)
    assert next(n for n in rep.nodes if n.id == w.id).grad.exact
