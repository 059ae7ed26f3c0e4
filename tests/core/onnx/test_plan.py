"""The run plan (core.onnx.plan: folding under the inputs' defaults, fused Conv chains, Gemm's
B transposed once) gives the plain executor's bits: every value a planned run makes is held
bit for bit to ``Session(..., plan=False)``, on the light conv nets and on small graphs with
NaN, infinities and signed zeros in the inputs, weights and normalisation statistics.

"Bit for bit" under the project's NaN policy (docs/reference-order.md): a NaN must be a NaN on
both sides, its sign and payload are outside the contract (numpy itself returns the first
operand's NaN of ``nan + nan`` in its vector body and the second's in its tail); every other
element, signed zeros included, must have the same bits."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tapescope.core import native
from tapescope.core.onnx import Limits, OnnxError, Session
from tapescope.core.onnx.plan import ConstArgs, FusedConv
from tests.helpers.onnx_plan import (
    assert_same_bits,
    bn_params,
    make_model,
    planned_values,
    same_bits,
    specials,
    spread,
)

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
needs_native = pytest.mark.skipif(native.library() is None, reason="no C compiler here")


def _input(sess: Session, scale: float = 1.0, seed: int = 0) -> dict:
    name = sess.input_names[0]
    vi = next(v for v in sess.model.graph.input if v.name == name)
    shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * np.float32(scale)
    return {name: x}


@needs_native
@pytest.mark.parametrize("model", ["squeezenet", "shufflenet", "resnet50"])
def test_light_models_planned_equal_plain_bit_for_bit(model):
    path = os.path.join(LIGHT, f"light_{model}.onnx")
    planned, plain = Session(path), Session(path, plan=False)
    plan = planned.plan()
    assert plan is not None and plan.values and plan.guard  # the weights' ConstantOfShapes
    assert any(isinstance(st, FusedConv) for st in plan.steps)
    assert len(plan.steps) < len(plain.graph.steps)
    for feeds in (_input(planned), _input(planned, 1e-3, 1)):
        assert same_bits(planned, plain, feeds) > 20
    feeds = _input(planned)
    name = next(iter(feeds))
    feeds[name] = specials(feeds[name])
    same_bits(planned, plain, feeds)


# ---- small hand-built graphs ------------------------------------------------------------------


def _chain_model(dtype, c_in, c_out, group, kernel, strides, pads, dilations, bias, bn, add,
                 relu, spatial=(9, 11), eps=1e-5):
    """x -> Conv -> [BN] -> [Sum/Add with r] -> [Relu] -> y, plus a second output that reads
    the input (so the graph has more than the chain)."""
    rng = np.random.default_rng(c_in * 100 + c_out + group)
    w = spread(rng, (c_out, c_in // group) + kernel, dtype)
    w.flat[0] = np.inf
    w.flat[-1] = -0.0
    inits = {"w": w}
    conv_in = ["x", "w"]
    if bias:
        inits["bias"] = spread(rng, (c_out,), dtype)
        conv_in.append("bias")
    nodes = [helper.make_node("Conv", conv_in, ["c"], group=group, kernel_shape=list(kernel),
                              strides=list(strides), pads=list(pads),
                              dilations=list(dilations))]
    cur = "c"
    if bn:
        inits.update(bn_params(rng, c_out, dtype, "bn_"))
        nodes.append(helper.make_node("BatchNormalization",
                                      [cur, "bn_s", "bn_b", "bn_m", "bn_v"], ["n"],
                                      epsilon=eps))
        cur = "n"
    inputs = {"x": specials(spread(rng, (2, c_in) + spatial, dtype), 23)}
    if add:
        oh = (spatial[0] + pads[0] + pads[2] - ((kernel[0] - 1) * dilations[0] + 1)) \
            // strides[0] + 1
        ow = (spatial[1] + pads[1] + pads[3] - ((kernel[1] - 1) * dilations[1] + 1)) \
            // strides[1] + 1
        inputs["r"] = specials(spread(rng, (2, c_out, oh, ow), dtype), 19)
        op, first = add
        nodes.append(helper.make_node(op, ["r", cur] if first else [cur, "r"], ["s"]))
        cur = "s"
    if relu:
        nodes.append(helper.make_node("Relu", [cur], ["y"]))
        cur = "y"
    nodes.append(helper.make_node("Neg", ["x"], ["other"]))
    return make_model(nodes, inputs, inits, [cur, "other"]), inputs


CHAINS = [
    # dtype, c_in, c_out, group, kernel, strides, pads, dilations, bias, bn, add, relu
    (np.float32, 6, 8, 2, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False, True, None, True),
    (np.float32, 6, 8, 2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, True, ("Sum", True), True),
    (np.float32, 6, 6, 1, (3, 3), (2, 2), (1, 0, 2, 1), (1, 1), True, True, ("Add", False), True),
    (np.float32, 8, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, True, None, False),
    (np.float32, 8, 8, 8, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, True, None, True),
    (np.float32, 8, 4, 4, (3, 2), (2, 3), (0, 2, 3, 1), (2, 1), False, True, ("Sum", False),
     True),
    (np.float32, 5, 7, 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), True, False, None, True),
    (np.float32, 12, 36, 3, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False, True, ("Sum", True),
     True),
    (np.float64, 6, 8, 2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True, True, ("Sum", False), True),
    (np.float64, 8, 8, 8, (3, 3), (2, 1), (1, 1, 1, 1), (1, 2), False, True, ("Add", True), True),
    (np.float64, 4, 70, 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False, False, None, True),
]


@needs_native
@pytest.mark.parametrize("case", CHAINS, ids=[str(i) for i in range(len(CHAINS))])
@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_fused_conv_chains_equal_the_separate_ops_bit_for_bit(case, eps):
    m, inputs = _chain_model(*case, eps=eps)
    planned, plain = Session(m), Session(m, plan=False)
    fused = [st for st in planned.plan().steps if isinstance(st, FusedConv)]
    assert len(fused) == 1
    assert len(fused[0].chain) == 1 + sum(bool(v) for v in case[9:12])
    same_bits(planned, plain, inputs)
    y = planned.run(inputs)
    assert np.isnan(next(iter(y.values()))).any()  # the specials went through


@needs_native
def test_a_shape_the_c_pass_does_not_take_runs_the_nodes_one_by_one():
    # the residual broadcasts (1, C, 1, 1): Sum's numpy broadcast, not the C pass
    m, inputs = _chain_model(np.float32, 6, 8, 2, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False,
                             True, ("Sum", True), True)
    r = next(v for v in m.graph.input if v.name == "r")
    for d in r.type.tensor_type.shape.dim:
        d.dim_param = "any"  # clears dim_value
    planned, plain = Session(m), Session(m, plan=False)
    inputs = dict(inputs, r=specials(np.random.default_rng(3).standard_normal(
        (1, 8, 1, 1)).astype(np.float32), 3))
    same_bits(planned, plain, inputs)


@needs_native
def test_asking_for_a_fused_intermediate_runs_plainly():
    m, inputs = _chain_model(np.float32, 6, 8, 2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True,
                             True, ("Sum", True), True)
    planned, plain = Session(m), Session(m, plan=False)
    assert {"c", "n", "s"} <= planned.plan().hidden
    got = planned.run(inputs, outputs=["c", "n", "s", "y"])
    want = plain.run(inputs, outputs=["c", "n", "s", "y"])
    for k in want:
        assert_same_bits(got[k], want[k], k)


@needs_native
def test_an_intermediate_read_twice_or_as_a_graph_output_is_not_fused_away():
    m, inputs = _chain_model(np.float32, 6, 8, 2, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False,
                             True, None, True)
    g = m.graph
    g.node.append(helper.make_node("Neg", ["n"], ["neg_n"]))  # n read twice: BN ends a chain
    g.output.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n", "c", "h", "w"]))
    planned, plain = Session(m), Session(m, plan=False)
    assert not planned.plan().hidden  # c is a graph output: nothing fused
    same_bits(planned, plain, inputs)


def _guarded_model():
    """Weights made by ConstantOfShape from an input with a default (the light models' form),
    and a Gemm with transB=1 on them."""
    shape = np.array([5, 4], np.int64)
    nodes = [helper.make_node("ConstantOfShape", ["wshape"], ["w"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.75])),
             helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, "k"]),
         helper.make_tensor_value_info("wshape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "m"])],
        [numpy_helper.from_array(shape, "wshape"),
         numpy_helper.from_array(np.arange(5, dtype=np.float32), "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_values_folded_under_defaults_give_way_to_a_feed():
    m = _guarded_model()
    planned, plain = Session(m), Session(m, plan=False)
    plan = planned.plan()
    assert "w" in plan.values and plan.guard == {"wshape"}
    assert not plan.values["w"].flags.writeable
    assert any(isinstance(st, ConstArgs) for st in plan.steps)  # B transposed once
    x = specials(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), 5)
    assert_same_bits(planned.run({"x": x})["y"], plain.run({"x": x})["y"])
    # feeding the defaulted input: the plain node list runs, with the fed shape
    feeds = {"x": np.ones((3, 2), np.float32), "wshape": np.array([5, 2], np.int64)}
    got, want = planned.run(feeds)["y"], plain.run(feeds)["y"]
    assert got.shape == (3, 5)
    assert_same_bits(got, want)
    assert_same_bits(planned.run({"x": x})["y"], plain.run({"x": x})["y"])


@needs_native
def test_a_fused_run_is_refused_by_the_same_limits():
    m, inputs = _chain_model(np.float32, 6, 8, 2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True,
                             True, ("Sum", True), True)
    assert Session(m).run(inputs)
    for plan in (True, False):
        sess = Session(m, plan=plan, limits=Limits(max_bytes=4000))
        with pytest.raises(OnnxError, match="bytes"):
            sess.run(inputs)


def test_the_env_switch_turns_the_plan_off(monkeypatch):
    monkeypatch.setenv("TAPESCOPE_ONNX_PLAN", "0")
    assert Session(_guarded_model()).plan() is None


@pytest.mark.parametrize("shape1, perm, shape2", [
    ((2, 3, 4, 5, 6), (0, 2, 1, 3, 4), (2, 12, 5, 6)),  # a channel shuffle: whole planes move
    ((2, 12, 30), (0, 2, 1), (2, 30, 12)),  # every element moves on its own
    ((2, 12, 5, 6), (0, 1, 3, 2), (2, 12, 30)),  # each plane transposed: runs of one element
    ((24, 30), (0, 1), (2, 12, 5, 6)),  # the identity: a view, as the plain run makes it
])
def test_reshape_transpose_reshape_as_one_copy(shape1, perm, shape2):
    x = specials(np.random.default_rng(5).standard_normal((2, 12, 5, 6)).astype(np.float32))
    nodes = [helper.make_node("Neg", ["x"], ["a"]),
             helper.make_node("Reshape", ["a", "s1"], ["b"]),
             helper.make_node("Transpose", ["b"], ["c"], perm=list(perm)),
             helper.make_node("Reshape", ["c", "s2"], ["y"])]
    m = make_model(nodes, {"x": x}, {"s1": np.array(shape1, np.int64),
                                 "s2": np.array(shape2, np.int64)}, ["y"])
    m.graph.output[0].type.tensor_type.shape.ClearField("dim")
    planned, plain = Session(m), Session(m, plan=False)
    from tapescope.core.onnx.plan import Shuffle

    assert any(isinstance(st, Shuffle) for st in planned.plan().steps)
    same_bits(planned, plain, {"x": x})
    got = planned.run({"x": x})["y"]
    assert got.shape == shape2
    assert got.tobytes() == plain.run({"x": x})["y"].tobytes()  # a copy: even NaN bits


@needs_native
def test_shufflenet_writes_its_channel_shuffles_from_the_fused_convs():
    planned = Session(os.path.join(LIGHT, "light_shufflenet.onnx"))
    assert sum(isinstance(st, FusedConv) and st.shuffle is not None
               for st in planned.plan().steps) == 16


@needs_native
@pytest.mark.parametrize("perm, shape1, shape2", [
    ((0, 2, 1, 3, 4), (2, 2, 4, 9, 11), (2, 8, 9, 11)),  # planes move: written in place
    ((0, 1, 2, 4, 3), (2, 2, 4, 9, 11), (2, 8, 11, 9)),  # not planes: the copy after
])
def test_a_fused_chain_writes_a_following_shuffle_bit_for_bit(perm, shape1, shape2):
    m, inputs = _chain_model(np.float32, 6, 8, 2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True,
                             True, ("Sum", True), True)
    g = m.graph
    g.node.extend([helper.make_node("Reshape", ["y", "s1"], ["b"]),
                   helper.make_node("Transpose", ["b"], ["c2"], perm=list(perm)),
                   helper.make_node("Reshape", ["c2", "s2"], ["z"])])
    g.initializer.extend([numpy_helper.from_array(np.array(shape1, np.int64), "s1"),
                          numpy_helper.from_array(np.array(shape2, np.int64), "s2")])
    g.output[0].name = "z"
    planned, plain = Session(m), Session(m, plan=False)
    assert [st.shuffle is not None for st in planned.plan().steps
            if isinstance(st, FusedConv)] == [True]
    same_bits(planned, plain, inputs)
    assert "z" in planned_values(planned)


def test_a_folded_value_asked_for_is_the_callers_own_copy():
    m = _guarded_model()
    planned = Session(m)
    x = np.ones((3, 4), np.float32)
    w = planned.run({"x": x}, outputs=["w", "y"])["w"]
    assert w.flags.writeable and w is not planned.plan().values["w"]
    w[...] = 7.0  # the session's value is not touched
    assert planned.run({"x": x}, outputs=["w"])["w"][0, 0] == np.float32(0.75)


def test_budget_replay_charges_what_before_charges():
    """A fused chain charges each of its nodes through Budget.cost + Budget.replay: the same
    node count and work as Budget.before on the same inputs, and the same refusals."""
    from tapescope.core.onnx.limits import Budget

    x = np.zeros((2, 6, 9, 11), np.float32)
    w = np.zeros((8, 3, 3, 3), np.float32)
    c = np.zeros((8,), np.float32)
    y = np.zeros((2, 8, 9, 11), np.float32)
    nodes = [("Conv", [x, w, c], dict(group=2, pads=[1, 1, 1, 1], kernel_shape=[3, 3])),
             ("BatchNormalization", [y, c, c, c, c], dict(epsilon=1e-5)),
             ("Sum", [y, y], {}), ("Add", [y, y], {}), ("Relu", [y], {}),
             ("Reshape", [y, np.array([2, 2, 4, 9, 11], np.int64)], {}),
             ("Transpose", [y.reshape(2, 2, 4, 9, 11)], dict(perm=[0, 2, 1, 3, 4]))]
    plain, replayed = Budget(Limits()), Budget(Limits())
    for op, ins, attrs in nodes:
        plain.before(op, ins, attrs, 17)
        replayed.replay(*Budget.cost(op, ins, attrs, 17))
    assert (plain.nodes, plain.work, plain.bytes) == (replayed.nodes, replayed.work,
                                                      replayed.bytes)
    tight = Limits(max_work=plain.work - 1)
    a, b = Budget(tight), Budget(tight)
    with pytest.raises(OnnxError, match="work"):
        for op, ins, attrs in nodes:
            a.before(op, ins, attrs, 17)
    with pytest.raises(OnnxError, match="work"):
        for op, ins, attrs in nodes:
            b.replay(*Budget.cost(op, ins, attrs, 17))
    assert a.nodes == b.nodes


# ---- lone convs and per-channel Mul -> Add [-> Relu] ------------------------------------------

def _affine_model(dtype, cshape, dshape, relu=True, swap=False, conv=True, bias=False):
    """x -> [Conv -> BN] -> Mul(c) -> Add(d) -> [Relu] -> y (densenet's BN written out), with
    specials in x, c and d; ``swap``: the constants as the first operands."""
    rng = np.random.default_rng(len(cshape) * 10 + len(dshape))
    inits, nodes, cur = {}, [], "x"
    if conv:
        inits["w"] = spread(rng, (6, 4, 3, 3), dtype)
        ins = ["x", "w"]
        if bias:
            inits["cb"] = spread(rng, (6,), dtype)
            ins.append("cb")
        nodes.append(helper.make_node("Conv", ins, ["c0"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
        inits.update(bn_params(rng, 6, dtype, "bn_"))
        nodes.append(helper.make_node("BatchNormalization", ["c0", "bn_s", "bn_b", "bn_m",
                                                             "bn_v"], ["n0"]))
        cur = "n0"
    c, d = spread(rng, cshape, dtype), spread(rng, dshape, dtype)
    c.flat[0], c.flat[-1] = -0.0, np.nan
    if d.size > 2:  # a zero product plus -0.0 (the channel with c = -0.0) and plus +0.0
        d.flat[0], d.flat[1], d.flat[2], d.flat[-1] = -0.0, -0.0, 0.0, np.inf
    inits.update(mc=c, ad=d)
    nodes.append(helper.make_node("Mul", ["mc", cur] if swap else [cur, "mc"], ["m0"]))
    nodes.append(helper.make_node("Add", ["ad", "m0"] if swap else ["m0", "ad"], ["a0"]))
    out = "a0"
    if relu:
        nodes.append(helper.make_node("Relu", ["a0"], ["y"]))
        out = "y"
    nodes.append(helper.make_node("Neg", ["x"], ["other"]))
    x = specials(spread(rng, (2, 4 if conv else 6, 7, 5), dtype), 97 if conv else 11)
    return make_model(nodes, {"x": x}, inits, [out, "other"]), {"x": x}


AFFINE = [  # dtype, c shape, d shape, relu, swap, conv, conv bias
    (np.float32, (6, 1, 1), (6, 1, 1), True, False, True, False),
    (np.float32, (1, 6, 1, 1), (6, 1, 1), False, True, True, True),
    (np.float32, (6, 1, 1), (1,), True, True, False, False),
    (np.float64, (1, 6, 1, 1), (1, 6, 1, 1), True, False, False, False),
    (np.float64, (6, 1, 1), (6, 1, 1), False, False, True, True),
]


@needs_native
@pytest.mark.parametrize("case", AFFINE, ids=[str(i) for i in range(len(AFFINE))])
def test_per_channel_mul_add_relu_equals_the_separate_ops_bit_for_bit(case):
    from tapescope.core.onnx.plan import ChannelAffine

    m, inputs = _affine_model(*case)
    planned, plain = Session(m), Session(m, plan=False)
    if case[5]:  # after Conv -> BN: the epilogue's second per-channel stage, one entry
        entry = [st for st in planned.plan().steps if isinstance(st, FusedConv)]
        assert len(entry) == 1 and len(entry[0].chain) == (5 if case[3] else 4)
    else:
        entry = [st for st in planned.plan().steps if isinstance(st, ChannelAffine)]
        assert len(entry) == 1 and len(entry[0].chain) == (3 if case[3] else 2)
    assert same_bits(planned, plain, inputs) >= 2
    assert entry[0]._prep[-1] is not None  # the C pass took it
    y = planned.run(inputs)["y" if case[3] else "a0"]
    assert np.isnan(y).any() and np.isfinite(y).any()  # the specials went through
    assert not (case[3] and (np.signbit(y) & (y == 0)).any())  # Relu made -0.0 +0.0


@needs_native
def test_a_constant_that_is_not_per_channel_runs_the_nodes_one_by_one():
    from tapescope.core.onnx.plan import ChannelAffine

    m, inputs = _affine_model(np.float32, (5,), (6, 1, 1), conv=False)  # broadcasts along w
    planned, plain = Session(m), Session(m, plan=False)
    aff = [st for st in planned.plan().steps if isinstance(st, ChannelAffine)]
    assert len(aff) == 1
    same_bits(planned, plain, inputs)
    assert aff[0]._prep[3] is None  # the C pass refused it, and remembers that


@needs_native
@pytest.mark.parametrize("bias", [False, True])
def test_a_lone_conv_runs_the_c_pass_bit_for_bit(bias):
    m, inputs = _chain_model(np.float32, 6, 8, 2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), bias,
                             False, None, False)
    planned, plain = Session(m), Session(m, plan=False)
    fused = [st for st in planned.plan().steps if isinstance(st, FusedConv)]
    assert len(fused) == 1 and len(fused[0].chain) == 1
    assert same_bits(planned, plain, inputs) == 2
    assert fused[0]._prep[3] is not None  # the C pass took it


def test_budget_replay_all_admits_what_replay_admits_or_nothing():
    from tapescope.core.onnx.limits import Budget

    costs = [(100, 50), (None, 7), (300, 20)]
    one, many = Budget(Limits()), Budget(Limits())
    for c in costs:
        one.replay(*c)
    assert many.replay_all(3, 300, 77)
    assert (one.nodes, one.work) == (many.nodes, many.work)
    for lim in (Limits(max_work=one.work - 1), Limits(max_elements=299),
                Limits(max_bytes=299)):
        b = Budget(lim)
        assert not b.replay_all(3, 300, 77)
        assert (b.nodes, b.work) == (0, 0)  # nothing charged: the caller goes one by one
