"""The lowerings of core/onnx/lowerings.py against the ONNX executor (an independent reference):
bit for bit where docs/reference-order-nn.md says the order is the executor's, close elsewhere;
and each one's gradients reach the weights."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tapescope.core import ops
from tapescope.core.onnx.errors import OnnxError
from tapescope.core.onnx.executor import Session
from tapescope.core.onnx.importer import import_to_tape
from tapescope.core.tape import Tape

D = TensorProto.DOUBLE


def _model(nodes, inputs, outputs, inits=(), opset=20):
    g = helper.make_graph(
        nodes, "m",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, D, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    # the outputs' shapes as the executor computes them (the checker wants them written)
    got = Session(m, check=False).run({k: v for k, v in inputs.items()})
    for o in m.graph.output:
        o.CopyFrom(helper.make_tensor_value_info(o.name, D, got[o.name].shape))
    return m


def _both(model, feeds):
    want = Session(model).run(feeds)
    tape = Tape(np.float64)
    imp = import_to_tape(Session(model, fold=False), tape, feeds)
    return want, imp, tape


def _unary(op_type, x, **attrs):
    return _model([helper.make_node(op_type, ["x"], ["y"], **attrs)], {"x": x}, ["y"])


X = np.random.default_rng(0).uniform(-4, 4, (5, 7))
X[0, :4] = [0.0, -0.0, 3.0, -3.0]


@pytest.mark.parametrize("op_type, attrs", [
    ("Gelu", {}), ("Gelu", {"approximate": "tanh"}), ("HardSigmoid", {}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}), ("Abs", {})])
def test_unary_lowerings_are_the_executor_bit_for_bit(op_type, attrs):
    want, imp, _ = _both(_unary(op_type, X, **attrs), {"x": X})
    got = np.asarray(imp.outputs["y"].value)
    np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(want["y"][got == 0]))
    assert got.tobytes() == want["y"].tobytes()


@pytest.mark.parametrize("e, exact", [(2.0, True), (0.5, True), (-1.0, True), (1.0, True),
                                      (3.0, False), (-2.0, False), (1.7, False)])
def test_pow_with_a_constant_exponent(e, exact):
    x = np.abs(X) + 0.5
    m = _model([helper.make_node("Pow", ["x", "e"], ["y"])], {"x": x}, ["y"],
               [("e", np.array(e))])
    want, imp, _ = _both(m, {"x": x})
    got = np.asarray(imp.outputs["y"].value)
    if exact:
        assert got.tobytes() == want["y"].tobytes()
    else:
        np.testing.assert_allclose(got, want["y"], rtol=1e-14)


def test_pow_with_a_computed_exponent_has_gradients_for_both():
    x = np.abs(X) + 0.5
    m = _model([helper.make_node("Pow", ["x", "w"], ["y"])], {"x": x}, ["y"],
               [("w", np.full((7,), 1.3))])
    want, imp, tape = _both(m, {"x": x})
    np.testing.assert_allclose(imp.outputs["y"].value, want["y"], rtol=1e-13)
    tape.backward(ops.sum(imp.outputs["y"]))
    assert np.all(tape.grad(imp.params["w"]) != 0)


def test_where_is_either_branch_bit_for_bit_and_masks_the_gradient():
    cond = np.random.default_rng(1).uniform(size=(5, 7)) > 0.5
    x = X.copy()
    x[1, 1] = np.nan
    m = _model([helper.make_node("Where", ["c", "w", "x"], ["y"])], {"x": x}, ["y"],
               [("c", cond), ("w", np.full((7,), -0.0))])
    want, imp, tape = _both(m, {"x": x})
    got = np.asarray(imp.outputs["y"].value)
    assert got.tobytes() == want["y"].tobytes()  # -0.0 from the branch, NaN where kept
    tape.backward(ops.sum(ops.mul(imp.outputs["y"], tape.const(np.ones((5, 7))))))
    np.testing.assert_array_equal(tape.grad(imp.params["w"]), cond.sum(0).astype(float))
    # masked_fill's -inf fill: the branch constant is kept exactly
    m2 = _model([helper.make_node("Where", ["c", "f", "x"], ["y"])], {"x": x}, ["y"],
                [("c", cond), ("f", np.array(-np.inf))])
    want, imp, _ = _both(m2, {"x": x})
    assert np.asarray(imp.outputs["y"].value).tobytes() == want["y"].tobytes()


def test_where_with_a_condition_computed_on_the_tape_says_what_works():
    m = _model([helper.make_node("Greater", ["x", "z"], ["c"]),
                helper.make_node("Where", ["c", "x", "z"], ["y"])], {"x": X}, ["y"],
               [("z", np.zeros((7,)))])
    with pytest.raises(OnnxError) as e:
        import_to_tape(Session(m, fold=False), Tape(), {"x": X})
    assert "Greater" in str(e.value) or "Where" in str(e.value)


@pytest.mark.parametrize("shape", [(6, 5), (2, 5, 3), (2, 5, 3, 4), (3, 5, 2, 4, 3)])
def test_softmax_cross_entropy_is_the_executor_bit_for_bit(shape):
    # rank >= 4 with distinct extents: at rank 2 and 3 the inverse of the permutation that
    # moves the classes last is the permutation itself, so a wrong one cannot show there
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    lab_shape = (shape[0],) + shape[2:]
    lab = rng.integers(0, 5, lab_shape).astype(np.int64)
    m = _model([helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"],
                                 ignore_index=-100)], {"x": x, "t": lab}, ["y"])
    want, imp, tape = _both(m, {"x": x, "t": lab})
    assert np.asarray(imp.outputs["y"].value).tobytes() == want["y"].tobytes()
    bad = lab.copy()
    bad.reshape(-1)[0] = -100
    with pytest.raises(OnnxError, match="ignore_index"):
        import_to_tape(Session(m, fold=False), Tape(), {"x": x, "t": bad})


def test_nll_loss_is_the_executor_bit_for_bit():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 5))
    x[0, 1] = -np.inf  # a class nobody picks: keep drops it (no inf * 0)
    lab = rng.integers(2, 5, (6,)).astype(np.int64)
    m = _model([helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"])],
               {"x": x, "t": lab}, ["y"])
    want, imp, _ = _both(m, {"x": x, "t": lab})
    assert np.asarray(imp.outputs["y"].value).tobytes() == want["y"].tobytes()


def _rnn_model(kind, direction, lbr, seq=4, batch=2, n_in=3, h=5, with_h0=True, peep=False):
    rng = np.random.default_rng(4)
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    nd = 2 if direction == "bidirectional" else 1
    inits = [("W", rng.uniform(-0.5, 0.5, (nd, g * h, n_in))),
             ("R", rng.uniform(-0.5, 0.5, (nd, g * h, h))),
             ("B", rng.uniform(-0.5, 0.5, (nd, 2 * g * h)))]
    names = ["x", "W", "R", "B", ""]
    if with_h0:
        inits.append(("h0", rng.uniform(-0.5, 0.5, (nd, batch, h))))
        names.append("h0")
    if kind == "LSTM" and peep:
        inits += [("c0", rng.uniform(-0.5, 0.5, (nd, batch, h))),
                  ("P", rng.uniform(-0.5, 0.5, (nd, 3 * h)))]
        names += ["c0", "P"]
    attrs = {"hidden_size": h, "direction": direction}
    if kind == "GRU":
        attrs["linear_before_reset"] = lbr
    outs = ["y", "yh"] + (["yc"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outs, **attrs)
    x = rng.standard_normal((seq, batch, n_in))
    return _model([node], {"x": x}, outs, inits, opset=14), x


@pytest.mark.parametrize("kind, direction, lbr, peep", [
    ("RNN", "forward", 0, False), ("RNN", "bidirectional", 0, False),
    ("GRU", "forward", 1, False), ("GRU", "reverse", 0, False),
    ("GRU", "bidirectional", 1, False), ("LSTM", "forward", 0, False),
    ("LSTM", "bidirectional", 0, True)])
def test_recurrent_layers_unrolled_match_the_executor(kind, direction, lbr, peep):
    m, x = _rnn_model(kind, direction, lbr, peep=peep)
    want, imp, tape = _both(m, {"x": x})
    for o in want:
        # the executor uses numpy's matmul and libm: close, not the tape's bits
        np.testing.assert_allclose(imp.outputs[o].value, want[o], rtol=1e-12, atol=1e-14)
    tape.backward(ops.sum(imp.outputs["y"]))
    for w in ("W", "R", "B"):
        assert np.any(tape.grad(imp.params[w]) != 0), w
    assert "h0" not in imp.params  # an initial state is data, not a weight


@pytest.mark.parametrize("axis, shape", [(-1, (3, 4, 5)), (1, (3, 4, 5))])
def test_layer_normalization_is_the_row_op_and_the_executor_bit_for_bit(axis, shape):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape)
    sc = rng.standard_normal(shape[axis:] if axis > 0 else shape[-1:])
    m = _model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=axis)],
               {"x": x}, ["y"], [("s", sc), ("b", sc * 0.5)], opset=17)
    want, imp, tape = _both(m, {"x": x})
    assert np.asarray(imp.outputs["y"].value).tobytes() == want["y"].tobytes()
    assert [n.op for n in tape.nodes].count("layer_norm") == 1
    tape.backward(ops.sum(imp.outputs["y"]))
    assert np.any(tape.grad(imp.params["s"]) != 0)


@pytest.mark.parametrize("axis, shape", [(-1, (3, 4, 5)), (1, (3, 4, 5)), (2, (2, 3, 4, 5)),
                                         (-3, (2, 3, 4, 5))])
def test_layer_normalization_with_mean_and_inv_std_dev_is_the_executor_bit_for_bit(axis, shape):
    # the optional outputs requested (issue 48): the composite path, whose Mean and InvStdDev
    # no test read: a variance over n - 1 would change all three outputs
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape) * 3 + 1
    sc = rng.standard_normal(shape[axis:])
    m = _model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"],
                                 axis=axis, epsilon=1e-3)],
               {"x": x}, ["y", "mean", "inv"], [("s", sc), ("b", sc * 0.5)], opset=17)
    want, imp, tape = _both(m, {"x": x})
    for o in ("y", "mean", "inv"):
        got = np.asarray(imp.outputs[o].value)
        assert got.shape == want[o].shape and got.tobytes() == want[o].tobytes(), o
    # the statistics are the population ones of each normalized block
    ax = tuple(range(axis % len(shape), len(shape)))
    np.testing.assert_allclose(imp.outputs["mean"].value, x.mean(ax, keepdims=True), rtol=1e-13)
    np.testing.assert_allclose(imp.outputs["inv"].value,
                               1 / np.sqrt(x.var(ax, keepdims=True) + float(np.float32(1e-3))),
                               rtol=1e-13)  # (an attribute's float is a float32)
    tape.backward(ops.sum(imp.outputs["y"]))
    assert np.any(tape.grad(imp.params["s"]) != 0)


@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple),
       axis=st.integers(-4, 3), outs=st.sampled_from([("y",), ("y", "mean"), ("y", "", "inv"),
                                                      ("y", "mean", "inv")]),
       seed=st.integers(0, 99))
@settings(max_examples=25, deadline=None)
def test_layer_normalization_any_axis_any_outputs_is_the_executor(shape, axis, outs, seed):
    axis = axis % len(shape)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 2 - 1
    sc = rng.standard_normal(shape[axis:])
    names = [o for o in outs if o]
    m = _model([helper.make_node("LayerNormalization", ["x", "s"], list(outs), axis=axis)],
               {"x": x}, names, [("s", sc)], opset=17)
    want, imp, _ = _both(m, {"x": x})
    for o in names:
        got = np.asarray(imp.outputs[o].value)
        assert got.shape == want[o].shape and got.tobytes() == want[o].tobytes(), o


@pytest.mark.parametrize("axis, shape, opset", [(-1, (4, 6), 13), (1, (2, 5, 3), 13),
                                                 (1, (2, 3, 4), 11), (0, (5, 4), 13)])
def test_log_softmax_is_the_row_op_and_the_executor_bit_for_bit(axis, shape, opset):
    rng = np.random.default_rng(6)
    x = rng.uniform(-30, 30, shape)  # far from 0: log(softmax) would underflow where this does not
    x.reshape(-1)[0] = 700.0
    m = _model([helper.make_node("LogSoftmax", ["x"], ["y"], axis=axis)], {"x": x}, ["y"],
               opset=opset)
    want, imp, tape = _both(m, {"x": x})
    got = np.asarray(imp.outputs["y"].value)
    assert got.tobytes() == want["y"].tobytes()
    assert np.all(np.isfinite(got))
    assert [n.op for n in tape.nodes].count("log_softmax") == 1
    # as a weight: d/dx sum(w * log_softmax(x)) = w - softmax(x) * sum(w) along the axis
    one = np.ones(shape)
    mw = _model([helper.make_node("Mul", ["u", "x"], ["p"]),
                 helper.make_node("LogSoftmax", ["p"], ["y"], axis=axis)], {"u": one}, ["y"],
                [("x", x)], opset=opset)
    _, imp, tape = _both(mw, {"u": one})
    w = rng.standard_normal(shape)
    tape.backward(ops.sum(ops.mul(imp.outputs["y"], tape.const(w))))
    ax = axis % len(shape)
    flat = (x.reshape(int(np.prod(shape[:ax])), -1), w.reshape(int(np.prod(shape[:ax])), -1)) \
        if opset < 13 else (x, w)
    a = 1 if opset < 13 else ax
    p = np.exp(flat[0] - flat[0].max(a, keepdims=True))
    p /= p.sum(a, keepdims=True)
    want_g = (flat[1] - p * flat[1].sum(a, keepdims=True)).reshape(shape)
    np.testing.assert_allclose(tape.grad(imp.params["x"]), want_g, rtol=1e-9, atol=1e-12)


# ---- the classes axis moved last at any rank (issue 48) ---------------------------------------

@given(classes=st.integers(2, 5), n=st.integers(1, 3),
       spatial=st.lists(st.integers(1, 4), max_size=3), op=st.sampled_from(
           ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"]), seed=st.integers(0, 99))
@example(classes=3, n=2, spatial=[4, 5], op="SoftmaxCrossEntropyLoss", seed=0)
@example(classes=3, n=2, spatial=[4, 5], op="NegativeLogLikelihoodLoss", seed=0)
@settings(max_examples=25, deadline=None)
def test_losses_over_classes_at_axis_1_are_the_executor_at_any_rank(classes, n, spatial, op,
                                                                    seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, classes, *spatial))
    lab = rng.integers(0, classes, (n, *spatial)).astype(np.int64)
    m = _model([helper.make_node(op, ["x", "t"], ["y"])], {"x": x, "t": lab}, ["y"])
    want, imp, _ = _both(m, {"x": x, "t": lab})
    assert np.asarray(imp.outputs["y"].value).tobytes() == want["y"].tobytes()
