"""The blocked and vectorised orders of issue 44, item 1: a BLAS micro-kernel's column tiles
(fma inside, another kernel on the edge columns), W partial sums along k (with and without
fma, lanes added in sequence or as a tree) for matmul / bmm and their gradients, W-lane vector
sums for the reductions and rms_norm's sum of squares. Each is held to a plain loop that
spells its order, and, where PyTorch (MKL) is here, to the library's own bits."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

from tapescope.core.explain import (
    _mm_lanes,
    _mm_tiles,
    _sum_lanes,
    _sumsq_lanes,
    explain,
    fma,
    variants_for,
)
from tapescope.core.ops.reference import mm

Node = namedtuple("Node", "op attrs shape")
rng = np.random.default_rng(4401)


def _lanes_loop(a, b, w, use_fma, tree):
    """One output element at a time, as the lanes' order says."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), dtype=a.dtype)
    for i in range(m):
        for j in range(n):
            lanes = [a.dtype.type(0)] * w
            for kk in range(k):
                la = kk % w
                lanes[la] = (fma(a[i, kk], b[kk, j], lanes[la]).reshape(())[()] if use_fma
                             else lanes[la] + a[i, kk] * b[kk, j])
            while tree and len(lanes) > 1:
                h = len(lanes) // 2
                lanes = [lanes[x] + lanes[x + h] for x in range(h)]
            acc = lanes[0]
            for x in lanes[1:]:
                acc = acc + x
            out[i, j] = acc
    return out


@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("w", [2, 4, 8, 16, 32])
@pytest.mark.parametrize("use_fma", [False, True])
@pytest.mark.parametrize("tree", [False, True])
def test_k_lanes_are_the_order_they_name(dt, w, use_fma, tree):
    a, b = rng.standard_normal((3, 37)).astype(dt), rng.standard_normal((37, 4)).astype(dt)
    got = _mm_lanes(w, use_fma, tree)(a, b)
    want = _lanes_loop(a, b, w, use_fma, tree)
    assert got.dtype == dt and np.array_equal(got, want)


def test_column_tiles_are_fma_inside_and_the_edge_kernel_outside():
    a, b = rng.standard_normal((6, 40)), rng.standard_normal((40, 29))
    edge = _mm_lanes(2, False, False)
    got = _mm_tiles(12, edge)(a, b)
    fm = _lanes_loop(a, b, 1, True, False)
    assert np.array_equal(got[:, :24], fm[:, :24])  # two full tiles of 12: contracted
    assert np.array_equal(got[:, 24:], edge(a, b[:, 24:]))
    serial = _mm_tiles(12, mm)(a, b)
    assert np.array_equal(serial[:, 24:], mm(a, b[:, 24:]))
    assert not np.array_equal(serial, fm) and not np.array_equal(serial, mm(a, b))


@pytest.mark.parametrize("w", [2, 4, 8, 16, 32])
@pytest.mark.parametrize("tree", [False, True])
def test_vector_sums_are_the_order_they_name(w, tree):
    x = rng.standard_normal((5, 53))
    want = []
    for row in x:
        lanes = [0.0] * w
        for i, v in enumerate(row):
            lanes[i % w] = lanes[i % w] + v
        while tree and len(lanes) > 1:
            h = len(lanes) // 2
            lanes = [lanes[j] + lanes[j + h] for j in range(h)]
        acc = lanes[0]
        for v in lanes[1:]:
            acc = acc + v
        want.append(acc)
    assert np.array_equal(_sum_lanes(w, tree)(x, -1), np.array(want))
    sq = _sumsq_lanes(w, False, tree)(x, -1, keepdims=True)
    assert sq.shape == (5, 1)
    assert np.array_equal(sq[:, 0], _sum_lanes(w, tree)(x * x, -1))


def test_a_k_lane_product_is_named_with_its_lanes():
    a, b = rng.standard_normal((7, 64)), rng.standard_normal((64, 5))
    cand = _mm_lanes(8, True, True)(a, b)
    c = explain(Node("matmul", {}, (7, 5)), [a, b], cand)
    assert c.cause == "reassociation" and c.variant.startswith("8 partial sums over k with fma")


def test_an_rms_norm_with_a_4_lane_sum_of_squares_is_reassociation():
    x, g = rng.standard_normal((400, 40)), rng.uniform(0.5, 1.5, 40)
    ss = _sumsq_lanes(4, False, False)(x, -1, keepdims=True)
    r = 1.0 / np.sqrt(ss / 40.0 + 1e-6)
    cand = (x * r) * g
    c = explain(Node("rms_norm", {"eps": 1e-6}, x.shape), [x, g], cand)
    assert (c.cause, c.variant) == ("reassociation",
                                    "4-lane vector sum of squares, lanes added in sequence")


def test_every_new_variant_is_tried_once_per_node():
    labels = [v.label for v in variants_for("matmul")]
    assert len(labels) == len(set(labels))
    assert sum("column tiles" in lab for lab in labels) == 8
    assert sum("partial sums over k" in lab for lab in labels) == 20
    assert sum("vector sum of squares" in v.label for v in variants_for("rms_norm")) == 20


# ---- the library's own bits, where it is here --------------------------------------------------
def _mkl_avx512() -> bool:
    torch = pytest.importorskip("torch")
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512f" in flags and "Math Kernel Library Version 2024.2" in \
        torch.__config__.show()


def _vendor() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("vendor_id"):
            return line.split(":")[1].strip()
    return ""


@pytest.mark.parametrize("shape", [(32, 16, 16), (32, 16, 32), (32, 32, 16), (16, 16, 8)])
def test_pytorch_mkl_dgemm_is_the_12_column_tiling(shape):
    """torch.matmul float64 (MKL 2024.2, AVX-512 here): on an AMD EPYC fma on full 12-column
    tiles, the edge columns serial for a row-major B and in 2 k-lanes for a transposed one
    (autograd's g @ b.T, attention's q @ k.T); on an Intel Xeon one fma chain an element."""
    if not _mkl_avx512():
        pytest.skip("measured on MKL 2024.2 with AVX-512; another BLAS or CPU blocks otherwise")
    import torch

    torch.set_num_threads(2)
    m, k, n = shape
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    node = Node("matmul", {}, (m, n))
    got = torch.matmul(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    c = explain(node, [a, b], got)
    assert c.cause in ("fma", "reassociation") and c.cause != "unknown", c
    bt = torch.from_numpy(np.ascontiguousarray(b.T)).t()  # B stored transposed
    got_t = torch.matmul(torch.from_numpy(a), bt).numpy()
    ct = explain(node, [a, b], got_t)
    assert ct.cause != "unknown", ct
    # (a cause other than unknown: the named variant gives torch's bits, every one). Which
    # kernel MKL picks is the CPU's: on the AMD EPYC (Zen 4) 12-column tiles; on an Intel
    # Xeon with AVX-512 (session 20) each element one fma chain over k, either layout of B
    if _vendor() == "GenuineIntel":
        assert (c.variant, ct.variant) == ("acc = fma(a, b, acc)",) * 2, (c, ct)
    elif n % 12:  # an edge: the tiling names it
        assert "12-column tiles, edge columns serial" in c.variant
        assert "12-column tiles, edge columns in 2 k-lanes" in ct.variant


def test_pytorch_rms_norm_sums_squares_in_lanes():
    if not _mkl_avx512():
        pytest.skip("measured with PyTorch 2.13's AVX-512 CPU kernels")
    import torch
    import torch.nn.functional as F

    for dt, w in ((np.float64, 4), (np.float32, 8)):
        x = rng.standard_normal((32, 16)).astype(dt)
        g = rng.uniform(0.5, 1.5, 16).astype(dt)
        got = F.rms_norm(torch.from_numpy(x), (16,), torch.from_numpy(g), 1e-6).numpy()
        c = explain(Node("rms_norm", {"eps": 1e-6}, x.shape), [x, g], got)
        assert c.variant == f"{w}-lane vector sum of squares, lanes added in sequence", c


# ---- conv2d: im2col + product, and the direct convolution's tap order --------------------------
def _direct_loop(x, w, pad, block):
    """Per output element: taps in (kh, kw, channel) order, contracted, per channel block."""
    from tapescope.core.explain import fma as f

    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, m, ho, wo), dtype=x.dtype)
    b = block or c
    for i in range(n):
        for o in range(m):
            for r in range(ho):
                for q in range(wo):
                    total = None
                    for c0 in range(0, c, b):
                        acc = x.dtype.type(0)
                        for u in range(kh):
                            for v in range(kw):
                                for ch in range(c0, min(c0 + b, c)):
                                    acc = f(w[o, ch, u, v], xp[i, ch, r + u, q + v],
                                            acc).reshape(())[()]
                        total = acc if total is None else total + acc
                    out[i, o, r, q] = total
    return out


@pytest.mark.parametrize("block", [16, 0, 8])
def test_the_direct_conv_order_is_the_loop_it_names(block):
    from tapescope.core.explain import _conv_direct

    x = rng.standard_normal((1, 20, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 20, 3, 3)).astype(np.float32)
    got = _conv_direct(block)([x, w], {"pads": (1, 1, 1, 1)})
    assert np.array_equal(got, _direct_loop(x, w, 1, block))


def test_conv2d_as_im2col_and_a_tiled_product_is_reassociation():
    from tapescope.core.explain import _mm_tiles

    x, w = rng.standard_normal((2, 3, 7, 7)), rng.standard_normal((4, 3, 3, 3))
    at = {"pads": (1, 1, 1, 1)}
    tiles = _mm_tiles(12, mm)
    from tapescope.core.ops.nn import im2col

    cols, _ = im2col(x, (3, 3), (1, 1), (1, 1), [(1, 1), (1, 1)], 1)
    cand = np.stack([tiles(w.reshape(4, -1), cols[i, 0]) for i in range(2)]).reshape(2, 4, 7, 7)
    c = explain(Node("conv2d", at, cand.shape), [x, w], cand)
    assert c.cause == "reassociation" and c.variant.startswith("fma on 12-column tiles"), c


@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [((2, 3, 8, 8), (4, 3, 3, 3), 1), ((2, 16, 10, 10),
                                                                    (16, 16, 3, 3), 0),
                                   ((2, 32, 6, 6), (16, 32, 3, 3), 1)])
def test_pytorch_conv2d_is_named(dt, shape):
    """F.conv2d on the CPU: float64 is PyTorch's slow_conv2d (im2col, one MKL gemm per image:
    the 12-column tiling); float32 is oneDNN's direct convolution (16-channel blocks)."""
    if not _mkl_avx512():
        pytest.skip("measured with PyTorch 2.13 (MKL 2024.2, oneDNN 3.12) on AVX-512")
    import torch
    import torch.nn.functional as F

    xs, ws, pad = shape
    x, w = rng.standard_normal(xs).astype(dt), rng.standard_normal(ws).astype(dt)
    got = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=pad).numpy()
    c = explain(Node("conv2d", {"pads": (pad,) * 4}, got.shape), [x, w], got)
    assert c.cause != "unknown", c
    if dt == np.float32 and xs[1] > 16:
        assert c.variant.startswith("direct conv") and "16-channel blocks" in c.variant, c


# ---- the reduction of a broadcast gradient (a bias: autograd's sum_to_size) ------------------
@pytest.mark.parametrize("op", ["add", "sub", "mul", "rms_norm"])
def test_unbroadcast_rules_with_the_serial_sum_are_the_op_table(op):
    from tapescope.core import mathlib
    from tapescope.core.explain import _unb_rule
    from tapescope.core.ops.reference import serial_sum
    from tapescope.core.optable.registry import REGISTRY

    M = mathlib.get("refmath")
    for xs, at in REGISTRY[op].sample(rng, np.dtype(np.float64)):
        y = REGISTRY[op].forward(M, xs, at)
        g = rng.standard_normal(np.shape(y))
        want = REGISTRY[op].backward(M, g, xs, y, at, [True, True])
        got = _unb_rule(op, serial_sum)(M, g, xs, y, at, [True, True])
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(np.asarray(a), np.asarray(b)), op


def test_cascade_sum_is_pytorchs_level_order():
    from tapescope.core.explain import _cascade_reduce

    x = rng.standard_normal((3, 37))
    got = _cascade_reduce(x)
    for r in range(3):  # levels of 16: (b0 + b1), then the 5 left over to level 0, then added
        b0 = 0.0
        for v in x[r, :16]:
            b0 = b0 + v
        b1 = 0.0
        for v in x[r, 16:32]:
            b1 = b1 + v
        rest = 0.0
        for v in x[r, 32:]:
            rest = rest + v
        assert got[r] == rest + (0.0 + b0 + b1)


def test_a_bias_gradient_summed_in_lanes_is_reassociation():
    """provenance end to end: y = x @ W + b; the candidate's bias gradient sums the batch in
    4 lanes (autograd's sum_to_size, vectorised): named, and a valid reordering."""
    from tapescope.core import ops
    from tapescope.core.provenance import StepState, provenance
    from tapescope.core.tape import Tape

    t = Tape(np.float64)
    x = t.const(rng.standard_normal((64, 5)))
    w = t.param(rng.standard_normal((5, 3)))
    b = t.param(rng.standard_normal(3))
    y = ops.add(ops.matmul(x, w), b)
    loss = ops.sum(ops.mul(y, t.const(rng.standard_normal((64, 3)))))
    t.backward(loss)
    grads = {n.id: t.grad(n.id) for n in t.nodes}
    grads[b.id] = _sum_lanes(4, False)(np.asarray(t.grad(y)), 0)
    assert not np.array_equal(grads[b.id], t.grad(b))
    st = StepState(1, t.nodes, loss.id, t.value, grads.get)
    (e,) = provenance(st, explain=True).introduced
    assert (e.node, e.which, e.cause.cause) == (b.id, "grad", "reassociation")
    assert e.cause.variant == "4-lane vector sum, lanes added in sequence"
    assert e.to_json()["class"] == "valid reordering"
