"""Every tape op has a forward and a backward kernel, and both are bit-identical to the tape."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops
from tapescope.core.ops import REGISTRY
from tapescope.gpu.library import KERNELS, LEAF
from tests.helpers.op_parity import NN_OPS, NON_LEAF, assert_exact, run_case

DTYPES = [np.float64, np.float32]
NN_NAMES = ("conv2d", "conv_transpose2d", "maxpool2d", "avgpool2d", "erf", "gather")


@pytest.fixture
def with_nn(monkeypatch):
    """REGISTRY with the nn ops, restored afterwards (no global side effect on other tests)."""
    for d in NN_OPS:
        monkeypatch.setitem(REGISTRY, d.name, d)

# broadcast cases beyond the registry's samples (leading axes, size-1 axes on both sides, 0-d)
BROADCAST = [((2, 1, 4), (3, 1)), ((1,), (2, 3)), ((), (2, 2)), ((4, 1, 3), (1, 5, 1)),
             ((1, 4), (4,))]


def test_every_op_has_kernels(with_nn):
    assert set(REGISTRY) <= set(KERNELS), (
        f"ops without kernels: {sorted(set(REGISTRY) - set(KERNELS))}")
    extra = set(KERNELS) - set(REGISTRY)
    assert extra <= set(NN_NAMES), f"kernels without ops: {sorted(extra)}"
    for op, d in REGISTRY.items():
        k = KERNELS[op]
        if d.kind == "leaf":
            assert k.fwd == LEAF and k.bwd == LEAF
        else:
            assert callable(k.fwd) and callable(k.bwd), op


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("op", NON_LEAF)
def test_op_forward_backward_bit_identical(host, with_nn, op, dtype):
    cases = REGISTRY[op].sample(np.random.default_rng(7), np.dtype(dtype))
    assert cases, op
    for i, (xs, attrs) in enumerate(cases):
        tape, prog, rep = run_case(host, op, xs, attrs, dtype, seed=i)
        assert_exact(rep, f"{op} case {i} shapes {[np.shape(x) for x in xs]} {attrs}")
        # the check is not vacuous: the op's node and its inputs' gradients were compared
        node = rep.nodes[len(xs)]
        assert node.op == op and node.value.n == tape.node(len(xs)).size
        assert any(n.grad is not None for n in rep.nodes[: len(xs)])


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_broadcast_binaries(host, op, dtype):
    rng = np.random.default_rng(3)
    for sa, sb in BROADCAST:
        for a_shape, b_shape in ((sa, sb), (sb, sa)):
            a = rng.uniform(-2, 2, a_shape).astype(dtype)
            b = (rng.uniform(0.5, 2, b_shape) * rng.choice([-1, 1], b_shape)).astype(dtype)
            _, _, rep = run_case(host, op, [a, b], {}, dtype)
            assert_exact(rep, f"{op} {a_shape} with {b_shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_reductions_over_axis_sets(host, dtype):
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3, 4, 5)).astype(dtype)
    for op in ("sum", "mean"):
        for axis, keep in ((None, False), ((0, 2), False), ((1, 3), True), (-2, False), (0, True)):
            _, _, rep = run_case(host, op, [x], {"axis": axis, "keepdims": keep}, dtype)
            assert_exact(rep, f"{op} axis={axis} keepdims={keep}")
    _, _, rep = run_case(host, "sum", [np.array(1.5, dtype)], {"axis": None, "keepdims": False},
                         dtype)
    assert_exact(rep, "sum of a 0-d value")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_fan_out_and_special_values(host, dtype):
    tape = Tape(dtype)
    x = tape.param(np.array([-0.0, 0.0, np.nan, -1.5, 2.0, np.inf, -np.inf, 1e-30], dtype))
    w = tape.param(np.array([0.5, -2.0, 3.0, 1.0, -0.0, 2.0, 1.0, -1.0], dtype))
    with np.errstate(all="ignore"):  # the tape leaves inf/NaN warnings to numpy; they are data
        y = ops.relu(x) * x + x * x - ops.neg(x) / w  # x reaches four nodes, twice in x * x
        loss = ops.sum(y * w)
        tape.backward(loss)
    prog = gpu.capture(host, tape, loss)
    prog.forward()
    prog.backward()
    rep = gpu.parity.compare(tape, prog)
    assert_exact(rep, "fan-out with NaN, inf and signed zeros")
    assert np.isnan(prog.read(y)).any()  # the NaN went through, on both sides


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_attention_composite(host, dtype):
    rng = np.random.default_rng(5)
    for shape, causal in (((4, 8), True), ((2, 5, 4), False)):
        tape = Tape(dtype)
        q, k, v = (tape.param(rng.standard_normal(shape).astype(dtype)) for _ in range(3))
        out = ops.attention(q, k, v, causal=causal)
        loss = ops.mean(out * out)
        tape.backward(loss)
        prog = gpu.capture(host, tape, loss)
        prog.forward()
        prog.backward()
        assert_exact(gpu.parity.compare(tape, prog), f"attention {shape} causal={causal}")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_products_around_the_host_mm_tile_edges(host, dtype):
    # the host body of mm_T: a unit of 48 rows x one 64-byte vector of columns, k in blocks
    # of 128 whose packed panel of b serves the unit's 6/4/2/1-row register tiles, and an
    # output with fewer columns than a vector and more rows run transposed: shapes one under,
    # at and over each of those, forward and both backward products (transposed strides),
    # each bit for bit
    rng = np.random.default_rng(5)
    for m, k, n in ((1, 1, 1), (5, 3, 7), (6, 64, 16), (7, 65, 17), (13, 130, 33), (2, 200, 9),
                    (47, 127, 3), (48, 128, 5), (49, 129, 2), (97, 7, 1)):
        a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
        _tape, _prog, rep = run_case(host, "matmul", [a, b], {}, dtype)
        assert_exact(rep, f"matmul {m}x{k} @ {k}x{n}")
    for bsz, m, k, n in ((3, 7, 70, 19), (2, 1, 5, 40)):
        a = rng.standard_normal((bsz, m, k)).astype(dtype)
        b = rng.standard_normal((bsz, k, n)).astype(dtype)
        _tape, _prog, rep = run_case(host, "bmm", [a, b], {}, dtype)
        assert_exact(rep, f"bmm {bsz}x{m}x{k} @ {k}x{n}")
