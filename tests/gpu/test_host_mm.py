"""The host body of mm_T (gpu/kernels/ops_rows.cu) at its own edges, bit for bit with the tape.

It owns 48 rows x one 64-byte vector of columns a unit, packs b 128 k-steps at a time, runs
row tiles of 6, 4, 2 and 1, and computes a product with fewer columns than a vector and more
rows transposed (y^T = b^T a^T). Each shape below sits under, at or over one of those edges, in
the forward product and both backward ones (transposed strides), float64 (8 columns a vector),
float32 (16) and float16 (stored in 2 bytes, computed in float: the pack is the conversion).
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope import gpu
from tapescope.core import Tape, ops

# (m, k, n): 49 rows (a row block and one more), 47 and 5 (tiles of 6, 4, 2, 1), k 1, 127..129
# and 300 (k-blocks), n 7 and 1 with m > n (transposed), 9 with m < n (not), 16/17 (one
# vector, and a column more; float64's vector is 8)
SHAPES = ((1, 1, 1), (49, 127, 17), (47, 129, 7), (5, 128, 16), (2, 300, 9), (50, 2, 1))


def _matmul(host, dtype, m, k, n, seed):
    rng = np.random.default_rng(seed)
    tape = Tape(dtype)
    a = tape.param(rng.standard_normal((m, k)).astype(tape.dtype))
    b = tape.param(rng.standard_normal((k, n)).astype(tape.dtype))
    y = ops.matmul(a, b)
    loss = ops.sum(ops.mul(y, tape.const(rng.standard_normal((m, n)).astype(tape.dtype))))
    tape.backward(loss)
    prog = gpu.capture(host, tape, loss)
    prog.forward()
    prog.backward()
    return tape, prog, y


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_products_at_the_host_bodys_edges_are_the_tapes_bits(host, dtype):
    for i, (m, k, n) in enumerate(SHAPES):
        tape, prog, y = _matmul(host, dtype, m, k, n, i)
        rep = gpu.parity.compare(tape, prog)
        bad = [(d.id, d.op) for d in rep.nodes if not d.exact]
        assert rep.exact, f"matmul {m}x{k} @ {k}x{n}: differing nodes {bad}"
        # not vacuous: the product and both operands' gradients were compared
        assert np.array_equal(prog.read(y), tape.value(y))
        assert all(d.grad is not None for d in rep.nodes[:2])


def test_a_half_product_transposed_and_not_is_the_tapes_bits(host):
    for i, (m, k, n) in enumerate(((47, 129, 7), (5, 128, 17), (3, 5, 40))):
        tape, prog, y = _matmul(host, "float16", m, k, n, 20 + i)
        rep = gpu.parity.compare(tape, prog)
        assert rep.exact, f"float16 matmul {m}x{k} @ {k}x{n}"
        assert prog.read(y).view(np.uint16).tolist() == tape.value(y).view(np.uint16).tolist()
