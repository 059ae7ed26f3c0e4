"""Concat on the channel axis in the run plan (core.onnx.plan's ConcatInto): the fused convs
that make its inputs for it alone write straight into their slices of its output, and a chain
of Concats each taking the one before as its first input (densenet's dense blocks) grows one
buffer in place. Every value is held bit for bit to ``Session(plan=False)`` (NaN's sign and
payload aside: tests/core/onnx/test_plan.py), and the run charges its budget what the plain run
charges: the same nodes, work and most bytes held."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tapescope.core import native
from tapescope.core.onnx import Limits, OnnxError, Session
from tapescope.core.onnx.fused import _Block, _root
from tapescope.core.onnx.plan import ConcatInto
from tests.helpers.onnx_plan import budgets, make_model, same_bits, specials, spread

needs_native = pytest.mark.skipif(native.library() is None, reason="no C compiler here")


def _conv(rng, inits, name, x, c_in, c_out, group=1, k=1, relu=True, bias=True, dtype=None):
    """Conv [+ bias] [-> Relu] of ``x`` into ``name``: the nodes."""
    w = spread(rng, (c_out, c_in // group, k, k), dtype)
    w.flat[-1] = -0.0
    inits[f"{name}_w"] = w
    ins = [x, f"{name}_w"]
    if bias:
        inits[f"{name}_b"] = spread(rng, (c_out,), dtype)
        ins.append(f"{name}_b")
    out = f"{name}_c" if relu else name
    nodes = [helper.make_node("Conv", ins, [out], group=group, kernel_shape=[k, k],
                              pads=[k // 2] * 4)]
    if relu:
        nodes.append(helper.make_node("Relu", [out], [name]))
    return nodes


def _fire(dtype, n, axis=1, extra=(), outputs=("y",), ca=3, cb=6):
    """x -> a (1x1 conv + Relu, ``ca`` channels), b (3x3 conv, 2 groups, ``cb``), d
    (depthwise 3x3 + Relu), p (MaxPool of x: not a fused input) -> Concat(a, p, b, d) -> y,
    plus ``extra`` nodes."""
    rng = np.random.default_rng(n + 10 * (dtype == np.float64))
    inits: dict = {}
    nodes = _conv(rng, inits, "a", "x", 4, ca, dtype=dtype) \
        + _conv(rng, inits, "b", "x", 4, cb, group=2, k=3, relu=False, dtype=dtype) \
        + _conv(rng, inits, "d", "x", 4, 4, group=4, k=3, bias=False, dtype=dtype)
    nodes.append(helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3],
                                  pads=[1, 1, 1, 1], strides=[1, 1]))
    nodes.append(helper.make_node("Concat", ["a", "p", "b", "d"], ["y"], axis=axis))
    nodes += list(extra)
    x = specials(spread(rng, (n, 4, 5, 7), dtype), 13)
    return make_model(nodes, {"x": x}, inits, list(outputs)), {"x": x}


def _same_budget(monkeypatch, planned, plain, feeds):
    a, b = budgets(monkeypatch, planned, feeds), budgets(monkeypatch, plain, feeds)
    assert (a.nodes, a.work, a.peak_bytes) == (b.nodes, b.work, b.peak_bytes)


def _entries(sess):
    return [e for e in sess.plan().steps if isinstance(e, ConcatInto)]


@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2])
def test_fused_convs_write_into_the_concat_bit_for_bit(monkeypatch, dtype, n):
    m, feeds = _fire(dtype, n)
    planned, plain = Session(m), Session(m, plan=False)
    (c,) = _entries(planned)
    assert [f is not None for f in c.parts] == [True, False, True, True]
    assert {"a", "b", "d"} <= planned.plan().hidden
    same_bits(planned, plain, feeds)
    y = planned.run(feeds)["y"]
    assert y.flags.owndata and np.isnan(y).any() and np.isfinite(y).any()
    _same_budget(monkeypatch, planned, plain, feeds)


@needs_native
def test_a_concat_input_read_elsewhere_or_asked_for_still_exists():
    extra = [helper.make_node("Neg", ["a"], ["neg_a"])]
    m, feeds = _fire(np.float32, 2, extra=extra, outputs=("y", "neg_a"))
    planned, plain = Session(m), Session(m, plan=False)
    (c,) = _entries(planned)
    assert c.parts[0] is None and "a" not in planned.plan().hidden  # read by Neg too
    same_bits(planned, plain, feeds)
    m, feeds = _fire(np.float32, 1)
    planned, plain = Session(m), Session(m, plan=False)
    assert "b" in planned.plan().hidden
    got, want = planned.run(feeds, outputs=["b", "y"]), plain.run(feeds, outputs=["b", "y"])
    for k in want:  # a hidden value asked for: the plain node list
        np.testing.assert_array_equal(got[k], want[k])


@needs_native
def test_a_concat_on_another_axis_is_left_to_its_node():
    for axis in (0, 3, -1):
        m, feeds = _fire(np.float32, 1, axis=axis, ca=4, cb=4)
        planned, plain = Session(m), Session(m, plan=False)
        assert not _entries(planned)
        same_bits(planned, plain, feeds)


def _dense(dtype, n, layers=3, branch=False):
    """A dense block: f = Relu(x); layer i: k_i = conv(c_{i-1}) (3x3 + bias), c_i =
    Concat(c_{i-1}, k_i) with c_0 = f; each c_i also read by a Neg. ``branch``: a second Concat
    takes c_1 as its first input too (so neither may grow c_1 in place)."""
    rng = np.random.default_rng(3 * n + layers + branch)
    inits: dict = {}
    nodes = [helper.make_node("Relu", ["x"], ["c0"])]
    chans = 4
    outs = []
    for i in range(1, layers + 1):
        nodes += _conv(rng, inits, f"k{i}", f"c{i - 1}", chans, 2 + i % 2, k=3, relu=i == 2,
                       dtype=dtype)
        nodes.append(helper.make_node("Concat", [f"c{i - 1}", f"k{i}"], [f"c{i}"], axis=1))
        nodes.append(helper.make_node("Neg", [f"c{i}"], [f"neg{i}"]))
        outs.append(f"neg{i}")
        chans += 2 + i % 2
    if branch:
        nodes += _conv(rng, inits, "kb", "c1", 7, 2, dtype=dtype)
        nodes.append(helper.make_node("Concat", ["c1", "kb"], ["cb"], axis=1))
        outs.append("cb")
    x = specials(spread(rng, (n, 4, 6, 5), dtype), 11)
    return make_model(nodes, {"x": x}, inits, [f"c{layers}"] + outs), {"x": x}


@needs_native
@pytest.mark.parametrize("dtype, n", [(np.float32, 1), (np.float64, 1), (np.float32, 2)])
def test_a_dense_block_grows_one_buffer_bit_for_bit(monkeypatch, dtype, n):
    m, feeds = _dense(dtype, n)
    planned, plain = Session(m), Session(m, plan=False)
    cs = _entries(planned)
    assert [(c.grows, c.next is not None) for c in cs] == [(False, True), (True, True),
                                                           (True, False)]
    same_bits(planned, plain, feeds)  # the earlier Concats' outputs, untouched by the later
    got = planned.run(feeds, outputs=["c1", "c2", "c3"])
    if n == 1:  # all three the start of one block, filled by the last
        blk = _root(got["c3"])
        assert isinstance(blk, _Block) and blk.filled == blk.shape[1] == got["c3"].shape[1]
        assert all(_root(got[k]) is blk for k in ("c1", "c2"))
        assert type(got["c1"]) is np.ndarray
    else:  # strided channel slices: each Concat its own array
        assert all(got[k].flags.owndata for k in got)
    _same_budget(monkeypatch, planned, plain, feeds)


@needs_native
def test_a_concat_read_first_by_two_concats_is_copied_by_both():
    m, feeds = _dense(np.float32, 1, layers=2, branch=True)
    planned, plain = Session(m), Session(m, plan=False)
    c1 = next(c for c in _entries(planned) if c.out == "c1")
    assert c1.next is None and not any(c.grows for c in _entries(planned))
    same_bits(planned, plain, feeds)


@needs_native
@pytest.mark.parametrize("build", [lambda: _fire(np.float32, 2), lambda: _dense(np.float32, 1)])
def test_a_concat_run_is_refused_by_the_same_limits(build):
    m, feeds = build()
    assert Session(m).run(feeds)
    for plan in (True, False):
        with pytest.raises(OnnxError, match="bytes"):
            Session(m, plan=plan, limits=Limits(max_bytes=3000)).run(feeds)


@needs_native
def test_a_read_only_image_goes_through_the_prepared_call_bit_for_bit():
    # the prepared call's address of a read-only array: numpy's, not ctypes' writeable view
    m, feeds = _fire(np.float64, 2)
    feeds["x"].flags.writeable = False
    assert native.address(feeds["x"]) == feeds["x"].ctypes.data
    same_bits(Session(m), Session(m, plan=False), feeds)


@needs_native
@pytest.mark.parametrize("dtype, n", [(np.float32, 1), (np.float64, 2)])
def test_a_relu_alone_reading_the_concat_is_taken_by_each_slice(monkeypatch, dtype, n):
    # the MaxPool slice carries x's NaN, infinities and signed zeros through the in-place Relu
    m, feeds = _fire(dtype, n, extra=[helper.make_node("Relu", ["y"], ["yr"])], outputs=("yr",))
    planned, plain = Session(m), Session(m, plan=False)
    (c,) = _entries(planned)
    assert c.relu is not None and c.out == "yr" and "y" in planned.plan().hidden
    same_bits(planned, plain, feeds)
    y = planned.run(feeds)["yr"]
    assert np.isnan(y).any() and not np.signbit(y[~np.isnan(y)]).any()
    _same_budget(monkeypatch, planned, plain, feeds)
    m, feeds = _fire(dtype, n, extra=[helper.make_node("Relu", ["y"], ["yr"])],
                     outputs=("yr", "y"))
    planned, plain = Session(m), Session(m, plan=False)
    (c,) = _entries(planned)
    assert c.relu is None  # the Concat's output is asked for: the Relu is its own node
    same_bits(planned, plain, feeds)


@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_one_pass_bn_chain_equals_the_per_op_epilogue(dtype):
    # ts_ep_apply's one-pass loop (BN [-> Mul -> Add] [-> Relu]) against its per-op passes,
    # which a bias of -0.0 (x + -0.0 is x, bit for bit) sends the same epilogue through
    rng = np.random.default_rng(5)
    x = specials(spread(rng, (2, 5, 3, 7), dtype), 7)
    vs = [spread(rng, (5,), dtype) for _ in range(6)]
    vs[0][1], vs[4][2], vs[5][3] = np.inf, -0.0, np.nan
    bn = (vs[0], np.abs(vs[1]), vs[2], vs[3])
    for aff in (None, 0, 1, 2, 3):
        for relu in (False, True):
            eps = [native.epilogue(dtype, 5, bias=bias, bn=bn, relu=relu)
                   for bias in (None, np.full(5, -0.0, dtype))]
            if aff is not None:
                for ep, _ in eps:
                    ep.mul2, ep.add2, ep.aff_first = vs[4].ctypes.data, vs[5].ctypes.data, aff
            one, per_op = (native.ep_apply(x, ep) for ep, _ in eps)
            nan = np.isnan(one)
            assert np.array_equal(nan, np.isnan(per_op)) and nan.any()
            u = np.dtype(f"u{x.itemsize}")
            assert np.array_equal(one[~nan].view(u), per_op[~nan].view(u)), (aff, relu)
