"""The epilogue's second per-channel stage and BN-led chains in the run plan (core.onnx.plan):
Conv -> BN -> Mul -> Add [-> Sum] [-> Relu] as one FusedConv, BatchNormalization [-> Mul ->
Add] [-> Relu] as one ChannelChain, each bit for bit against ``Session(plan=False)`` (NaN's
sign and payload aside: tests/core/onnx/test_plan.py), with NaN, infinities and signed zeros in
the input, the constants and the normalisation statistics, either operand order, float32 and
float64, and the fallback when a constant does not broadcast per channel."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tapescope.core import native
from tapescope.core.onnx import Session
from tapescope.core.onnx.plan import ChannelAffine, ChannelChain, FusedConv
from tests.helpers.onnx_plan import bn_params, make_model, same_bits, specials, spread

needs_native = pytest.mark.skipif(native.library() is None, reason="no C compiler here")


def _model_for(dtype, lead, cshape=(6, 1, 1), dshape=(6, 1, 1), swap=(False, False),
               affine=True, res=None, relu=True, eps=1e-5):
    """x -> [Conv] -> BN -> [Mul(c) -> Add(d)] -> [Sum/Add with r] -> [Relu] -> out, plus a
    second output that reads x. ``lead``: "conv" or "bn" (the BN reads x)."""
    rng = np.random.default_rng(7 + len(cshape) + 3 * len(dshape) + (lead == "bn"))
    inits, nodes, cur = {}, [], "x"
    c_in = 4 if lead == "conv" else 6
    if lead == "conv":
        inits["w"] = spread(rng, (6, 4, 3, 3), dtype)
        inits["w"].flat[3] = -0.0
        nodes.append(helper.make_node("Conv", ["x", "w"], ["c0"], pads=[1, 1, 1, 1],
                                      kernel_shape=[3, 3]))
        cur = "c0"
    inits.update(bn_params(rng, 6, dtype, "bn_"))
    nodes.append(helper.make_node("BatchNormalization", [cur, "bn_s", "bn_b", "bn_m", "bn_v"],
                                  ["n0"], epsilon=eps))
    cur = "n0"
    if affine:
        c, d = spread(rng, cshape, dtype), spread(rng, dshape, dtype)
        c.flat[0], c.flat[-1] = -0.0, np.nan
        if d.size > 2:  # the channel with c = -0.0: a zero product plus -0.0
            d.flat[0], d.flat[1], d.flat[2], d.flat[-1] = -0.0, -0.0, 0.0, np.inf
        inits.update(mc=c, ad=d)
        nodes.append(helper.make_node("Mul", ["mc", cur] if swap[0] else [cur, "mc"], ["m0"]))
        nodes.append(helper.make_node("Add", ["ad", "m0"] if swap[1] else ["m0", "ad"], ["a0"]))
        cur = "a0"
    x = specials(spread(rng, (2, c_in, 7, 5), dtype), 97 if lead == "conv" else 29)
    inputs = {"x": x}
    if res is not None:
        op, first = res
        inputs["r"] = specials(spread(rng, (2, 6, 7, 5), dtype), 17)
        nodes.append(helper.make_node(op, ["r", cur] if first else [cur, "r"], ["s0"]))
        cur = "s0"
    if relu:
        nodes.append(helper.make_node("Relu", [cur], ["y"]))
        cur = "y"
    nodes.append(helper.make_node("Neg", ["x"], ["other"]))
    return make_model(nodes, inputs, inits, [cur, "other"]), inputs, cur


CONV_CASES = [  # dtype, c shape, d shape, swap (Mul's, Add's constant first), residual, relu
    (np.float32, (6, 1, 1), (6, 1, 1), (False, False), None, True),
    (np.float32, (1, 6, 1, 1), (1,), (True, False), ("Sum", True), True),
    (np.float32, (6, 1, 1), (1, 6, 1, 1), (False, True), ("Add", False), False),
    (np.float64, (1, 6, 1, 1), (6, 1, 1), (True, True), None, False),
    (np.float64, (6, 1, 1), (6, 1, 1), (False, False), ("Add", True), True),
]


@needs_native
@pytest.mark.parametrize("case", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
def test_conv_bn_mul_add_chain_is_one_c_pass_bit_for_bit(case):
    dtype, cs, ds, swap, res, relu = case
    m, inputs, out = _model_for(dtype, "conv", cs, ds, swap, res=res, relu=relu)
    planned, plain = Session(m), Session(m, plan=False)
    fused = [st for st in planned.plan().steps if isinstance(st, FusedConv)]
    assert len(fused) == 1 and fused[0].affine is not None
    assert len(fused[0].chain) == 4 + (res is not None) + relu
    assert (fused[0].add is not None) == (res is not None)  # the residual, not the affine Add
    assert same_bits(planned, plain, inputs) == 2  # the chain's output and "other"
    assert fused[0]._prep[3] is not None  # the C pass took it
    y = planned.run(inputs)[out]
    assert np.isnan(y).any() and np.isfinite(y).any()


BN_CASES = [  # dtype, affine, swap, relu, eps
    (np.float32, True, (False, False), True, 1e-5),
    (np.float32, True, (True, True), False, 0.0),
    (np.float32, False, (False, False), True, 0.0),
    (np.float64, True, (False, True), True, 1e-5),
    (np.float64, False, (False, False), True, 1e-5),
]


@needs_native
@pytest.mark.parametrize("case", BN_CASES, ids=[str(i) for i in range(len(BN_CASES))])
def test_bn_mul_add_relu_is_one_c_pass_bit_for_bit(case):
    dtype, affine, swap, relu, eps = case
    m, inputs, out = _model_for(dtype, "bn", swap=swap, affine=affine, relu=relu, eps=eps)
    planned, plain = Session(m), Session(m, plan=False)
    chains = [st for st in planned.plan().steps if isinstance(st, ChannelChain)]
    assert len(chains) == 1 and len(chains[0].chain) == 1 + 2 * affine + relu
    assert same_bits(planned, plain, inputs) == 2
    assert chains[0]._prep[3] is not None
    y = planned.run(inputs)[out]
    assert np.isnan(y).any() and np.isfinite(y).any()
    assert not (relu and (np.signbit(y) & (y == 0)).any())  # Relu made -0.0 +0.0


@needs_native
def test_a_lone_bn_is_left_to_its_kernel():
    m, inputs, _ = _model_for(np.float32, "bn", affine=False, relu=False)
    planned = Session(m)
    assert not any(isinstance(st, (ChannelChain, ChannelAffine)) for st in planned.plan().steps)


@needs_native
@pytest.mark.parametrize("lead", ["conv", "bn"])
def test_a_constant_that_is_not_per_channel_runs_the_chain_as_nodes(lead):
    # c of shape (5,) broadcasts along w: the chain falls back to its nodes, the same bits
    m, inputs, _ = _model_for(np.float32, lead, cshape=(5,))
    planned, plain = Session(m), Session(m, plan=False)
    kind = FusedConv if lead == "conv" else ChannelChain
    entry = [st for st in planned.plan().steps if isinstance(st, kind)]
    assert len(entry) == 1
    assert same_bits(planned, plain, inputs) == 2
    assert entry[0]._prep[3] is None  # refused, and remembered


@needs_native
def test_asking_for_the_bn_output_of_a_chain_runs_plainly():
    m, inputs, out = _model_for(np.float32, "bn")
    planned, plain = Session(m), Session(m, plan=False)
    assert "n0" in planned.plan().hidden
    got, want = planned.run(inputs, outputs=["n0", out]), plain.run(inputs, outputs=["n0", out])
    for k in ("n0", out):
        assert np.array_equal(got[k], want[k], equal_nan=True)


# ---- Gemm with a constant B on one or two rows -----------------------------------------------

@needs_native
@pytest.mark.parametrize("dtype,rows,alpha,bias", [(np.float32, 1, 1.0, True),
                                                   (np.float64, 2, 0.5, True),
                                                   (np.float32, 3, 1.0, False)])
def test_a_gemm_on_few_rows_reads_b_once_bit_for_bit(dtype, rows, alpha, bias):
    from onnx import helper as h

    from tapescope.core.onnx.fused import ConstArgs, gemm_few_rows

    rng = np.random.default_rng(rows)
    w = spread(rng, (37, 300), dtype)  # transB: (n, k)
    w[3, 5], w[7, 0], w[0, 0], w[9, :] = np.inf, -0.0, np.nan, -0.0  # row 9: zeros
    inits = {"w": w}
    ins = ["x", "w"]
    if bias:
        inits["b"] = spread(rng, (37,), dtype)
        ins.append("b")
    x = spread(rng, (rows, 300), dtype)  # a NaN or inf in x would reach every output
    x[0, 1], x[0, 2], x[-1, 4] = -0.0, 0.0, -0.0
    nodes = [h.make_node("Gemm", ins, ["y"], transB=1, alpha=alpha),
             h.make_node("Neg", ["x"], ["other"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", h.np_dtype_to_tensor_dtype(
        np.dtype(dtype)), x.shape)], [h.make_tensor_value_info(o, h.np_dtype_to_tensor_dtype(
            np.dtype(dtype)), ["r", "c"]) for o in ("y", "other")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    planned, plain = Session(m), Session(m, plan=False)
    ca = [st for st in planned.plan().steps if isinstance(st, ConstArgs)]
    assert len(ca) == 1 and ca[0].step.kernel is gemm_few_rows
    assert same_bits(planned, plain, {"x": x}) == 2
    y = planned.run({"x": x})["y"]
    assert np.isnan(y).any() and np.isfinite(y).any()


@needs_native
@pytest.mark.parametrize("lead", ["conv", "bn"])
def test_the_new_chains_are_refused_by_the_same_limits(lead):
    from tapescope.core.onnx import Limits, OnnxError

    m, inputs, _ = _model_for(np.float32, lead)
    assert Session(m).run(inputs)
    for plan in (True, False):
        with pytest.raises(OnnxError, match="bytes"):
            Session(m, plan=plan, limits=Limits(max_bytes=2500)).run(inputs)
