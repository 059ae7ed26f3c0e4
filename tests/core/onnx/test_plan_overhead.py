"""What a planned run keeps from one run to the next to cost less Python per node (issue 49):
each kept answer is held to the plain executor when an input changes shape between runs (the
bits of every value and the budget's nodes, work and peak), and the budget's one-call forms
(``Budget.admit`` + ``hold_new``, ``pin_dropped``) to the calls they stand for."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tapescope.core import native
from tapescope.core.onnx import Limits, OnnxError, Session
from tapescope.core.onnx.costs import MACS, PREDICT
from tapescope.core.onnx.limits import (
    SHAPE_MACS,
    SHAPE_PREDICTED,
    Budget,
    shape_charged,
    shapes_key,
)
from tapescope.core.onnx.plan import ConcatInto, FusedConv
from tests.helpers.onnx_plan import budgets, same_bits, specials, spread

needs_native = pytest.mark.skipif(native.library() is None, reason="no C compiler here")

#: the PREDICT ops whose prediction reads an input's values: never replayed
VALUE_PREDICTED = {"ConstantOfShape", "Expand", "Tile", "Range", "Pad", "Resize", "Upsample",
                   "OneHot", "TopK", "HannWindow", "HammingWindow", "BlackmanWindow",
                   "MaxUnpool", "Col2Im", "ConcatFromSequence", "DFT", "Reshape"}


def test_every_predicted_op_is_charged_by_shape_or_by_value():
    # a new PREDICT or MACS entry fails here until it is said to read shapes only (or not)
    assert SHAPE_PREDICTED <= set(PREDICT)
    assert set(PREDICT) - SHAPE_PREDICTED == VALUE_PREDICTED
    assert SHAPE_MACS == set(MACS)
    assert shape_charged("MaxPool", {}) and shape_charged("Relu", {})
    assert not shape_charged("Reshape", {}) and not shape_charged("Cast", {"to": 8})
    x = np.zeros((2, 3), np.float32)
    assert shapes_key([x, None]) == (((2, 3), np.dtype(np.float32)), None)
    assert shapes_key([x.astype(object)]) is None and shapes_key([[x]]) is None


def _model(dtype):
    """x (N, 4, 9, 11) -> Conv + Relu -> channel shuffle (Reshape -> Transpose -> Reshape,
    the batch dim kept by a 0) -> MaxPool p -> Concat(1x1 Conv of p, p) -> Relu -> y: a
    fused chain writing its shuffle, a plain node, a Concat taking a fused input and a copied
    one under its Relu. The batch is symbolic: one session runs every N."""
    rng = np.random.default_rng(3)
    tt = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = {"a_w": spread(rng, (8, 4, 3, 3), dtype), "a_b": spread(rng, (8,), dtype),
             "q_w": spread(rng, (6, 8, 1, 1), dtype), "q_b": spread(rng, (6,), dtype),
             "s1": np.array([0, 2, 4, 9, 11], np.int64), "s2": np.array([0, 8, 9, 11], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "a_w", "a_b"], ["a_c"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a_c"], ["a"]),
             helper.make_node("Reshape", ["a", "s1"], ["b"]),
             helper.make_node("Transpose", ["b"], ["c"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["c", "s2"], ["z"]),
             helper.make_node("MaxPool", ["z"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "q_w", "q_b"], ["q"], kernel_shape=[1, 1]),
             helper.make_node("Concat", ["q", "p"], ["y0"], axis=1),
             helper.make_node("Relu", ["y0"], ["y"])]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", tt, ["N", 4, 9, 11])],
        [helper.make_tensor_value_info("y", tt, ["N", 14, 9, 11])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_new_batch_size_between_runs_gives_the_plain_bits_and_charges(monkeypatch, dtype):
    m = _model(dtype)
    planned, plain = Session(m), Session(m, plan=False)
    steps = planned.plan().steps
    (f,) = [e for e in steps if isinstance(e, FusedConv) and e.shuffle is not None]
    (c,) = [e for e in steps if isinstance(e, ConcatInto)]
    (pool,) = [e for e in steps if getattr(e, "op_type", None) == "MaxPool"]
    assert c.relu is not None and [p is not None for p in c.parts] == [True, False]
    for n in (1, 3, 1, 2, 2):
        x = specials(spread(np.random.default_rng(n), (n, 4, 9, 11), dtype), 11)
        feeds = {"x": x}
        assert same_bits(planned, plain, feeds) == 3  # z, p and y: the rest are hidden
        a, b = budgets(monkeypatch, planned, feeds), budgets(monkeypatch, plain, feeds)
        assert (a.nodes, a.work, a.peak_bytes) == (b.nodes, b.work, b.peak_bytes)
        # what each entry kept is this shape's
        assert f._prep[0] == x.shape and c._cost[0][1] == (n, 8, 9, 11)
        assert pool.charged[0][0][0] == (n, 8, 9, 11)
        y = planned.run(feeds)["y"]
        assert np.isnan(y).any() and not np.signbit(y[~np.isnan(y)]).any()


@needs_native
def test_a_new_batch_size_is_refused_by_the_same_limits_after_a_run_that_fitted():
    m = _model(np.float32)
    small = {"x": np.ones((1, 4, 9, 11), np.float32)}
    big = {"x": np.ones((40, 4, 9, 11), np.float32)}
    limits = Limits(max_bytes=400_000)
    errors = []
    for plan in (True, False):
        sess = Session(m, plan=plan, limits=limits)
        sess.run(small)
        with pytest.raises(OnnxError, match="max bytes") as exc:
            sess.run(big)
        errors.append(str(exc.value).split(": ", 2))
        sess.run(small)  # and the small one still runs
    # the same count; the planned run names the fused chain's last node (the plain one the
    # shuffle's copy, which the chain writes itself)
    assert errors[0][2] == errors[1][2]
    assert errors[0][1] == "node 1 (Relu)" and errors[1][1] == "node 4 (Reshape)"


def test_feeds_are_checked_again_when_their_type_or_shape_changes():
    m = _model(np.float32)
    sess = Session(m, plan=False)
    sess.run({"x": np.ones((1, 4, 9, 11), np.float32)})
    with pytest.raises(OnnxError, match="dtype float64"):
        sess.run({"x": np.ones((1, 4, 9, 11), np.float64)})
    with pytest.raises(OnnxError, match="shape"):
        sess.run({"x": np.ones((1, 4, 9), np.float32)})
    with pytest.raises(OnnxError, match="not an input"):
        sess.run({"x": np.ones((1, 4, 9, 11), np.float32), "w": np.ones(1, np.float32)})
    sess.run({"x": np.ones((2, 4, 9, 11), np.float32)})


@pytest.mark.parametrize("max_bytes", [10**9, 3 * 4 * 6000 + 100, 3 * 4 * 6000 - 1, 100])
def test_admit_and_hold_new_charge_what_replay_all_hold_and_charge_do(max_bytes):
    y = np.zeros((6000,), np.float32)
    limits = Limits(max_bytes=max_bytes, max_work=10**6)
    one, each = Budget(limits), Budget(limits)
    ok = one.admit(3, 300, 77, y.size, 3 * y.nbytes)
    if ok:
        one.hold_new(y, 2 * y.nbytes)
    try:
        assert each.replay_all(3, 300, 77)
        each.hold(y)
        each.charge(2 * y.nbytes)
        refused = False
    except (OnnxError, AssertionError):
        refused = True
    assert ok is not refused
    if ok:
        assert (one.nodes, one.work, one.bytes, one.peak_bytes) == \
            (each.nodes, each.work, each.bytes, each.peak_bytes)
        one.hold_new(y[1:], 0)  # a view of a held array adds nothing, as hold() does
        assert one.bytes == each.bytes
    else:
        assert (one.nodes, one.work, one.bytes) == (0, 0, 0)


def test_pin_dropped_keeps_a_dropped_value_counted_as_pin_does():
    b = Budget(Limits())
    env = {"a": np.ones(1000), "v": None, "k": np.ones(10)}
    env["av"] = env["a"][2:]  # a view: its base is what is pinned
    for v in env.values():
        b.hold(v)
    held = b.bytes
    b.pin_dropped(env, ("av", "v", "gone"))
    b.pin_dropped(env, ("a",))
    assert set(env) == {"k"} and b.bytes == held  # freed, still counted until the run ends
    del env["k"]  # not pinned: given back
    assert b.bytes == held - 80


@needs_native
def test_outputs_asked_for_are_not_dropped_and_the_rest_are():
    m = _model(np.float32)
    planned, plain = Session(m), Session(m, plan=False)
    plan = planned.plan()
    feeds = {"x": np.ones((2, 4, 9, 11), np.float32)}
    got = planned.run(feeds, outputs=["p", "y"])
    want = plain.run(feeds, outputs=["p", "y"])
    for k in want:
        assert got[k].tobytes() == want[k].tobytes()
    asked = plan.dead_for({"p", "y"})
    assert "p" in {n for d, _ in plan.dead_for({"y"}) for n in d}
    assert "p" not in {n for d, h in asked for n in d + h}
    # what a fused entry hides is dropped only where the entry ran its nodes
    assert {n for _, h in plan.dead_for({"y"}) for n in h} <= plan.hidden


def test_a_model_without_a_plan_of_its_own_types_still_runs_in_float16():
    # no C pass takes float16: every entry runs its nodes, the values they hide then dropped
    m = _model(np.float16)
    planned, plain = Session(m), Session(m, plan=False)
    x = np.random.default_rng(0).standard_normal((2, 4, 9, 11)).astype(np.float16)
    got, want = planned.run({"x": x})["y"], plain.run({"x": x})["y"]
    assert got.tobytes() == want.tobytes()
    assert TensorProto.FLOAT16 == m.graph.input[0].type.tensor_type.elem_type


def test_pools_of_one_input_shape_keep_a_geometry_per_attribute_set():
    # the pools' geometry is kept per input shape, dtype and attributes: nodes that differ in
    # one attribute only each get theirs
    rng = np.random.default_rng(4)
    x = specials(spread(rng, (2, 3, 9, 10), np.float32), 7)
    variants = [dict(kernel_shape=[3, 3]), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
                dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
                dict(kernel_shape=[2, 3], dilations=[2, 1], pads=[0, 1, 1, 0])]
    nodes, outs = [], []
    for i, kw in enumerate(variants):
        for op in ("AveragePool", "MaxPool"):
            if op == "MaxPool":
                kw = {k: v for k, v in kw.items() if k != "count_include_pad"}
            outs.append(f"{op}{i}")
            nodes.append(helper.make_node(op, ["x"], [outs[-1]], **kw))
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 9, 10])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["N", 3, "h", "w"]) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])  # (dilations)
    planned, plain = Session(m), Session(m, plan=False)
    for feeds in ({"x": x}, {"x": x[:1]}, {"x": x}):
        got, want = planned.run(feeds), plain.run(feeds)
        for o in outs:
            assert got[o].shape == want[o].shape, o
            np.testing.assert_array_equal(got[o].view(np.uint32), want[o].view(np.uint32), o)
    shapes = {planned.run({"x": x})[o].shape for o in outs}
    assert len(shapes) >= 4  # the variants differ in their output shapes, not only values
