"""The half tape's conv2d on every native path this CPU runs (tests/conftest.py: native_isa).

A float16 / bfloat16 tape widens x and w to float32 and runs the float32 reference, whose
forward is native C (core/native: the shifted conv, the packed one, the small-plane product,
the depthwise direct loop) and whose backward packs im2col columns natively; each result is
rounded once to the half type (docs/reference-order-nn.md, "Half precision"). Held here to a
numpy spelling of the same chains (im2col, numpy's serial product, a serial batch sum, col2im),
rounded once, bit for bit, for each path.
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import Tape, native, ops
from tapescope.core.ops import nn
from tapescope.core.ops.reference import bmm_numpy

pytestmark = pytest.mark.usefixtures("native_isa")

# (nb, c, h, w, m, group, kernel, strides, dilations, pads (t, l, b, r)): the shifted conv
# (wide rows), the packed one (m/g > 64), the small-plane product (a 3x3 output), depthwise
SHAPES = [
    (1, 3, 11, 19, 5, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (1, 20, 6, 7, 70, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (2, 6, 5, 5, 34, 2, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (2, 4, 7, 6, 4, 4, (3, 2), (1, 2), (2, 1), (2, 0, 1, 1)),
]


def _products(a, b):
    """a [B, M, K] @ b [B, K, N] in the serial order (numpy's spelling), any batch dims."""
    lead = a.shape[:-2]
    y = bmm_numpy(np.ascontiguousarray(a.reshape((-1,) + a.shape[-2:])),
                  np.ascontiguousarray(b.reshape((-1,) + b.shape[-2:])))
    return y.reshape(lead + y.shape[-2:])


def _numpy_conv(x, w, g_out, st, dil, padw, grp):
    """(y, gx, gw) in float32 by the written order, without the native conv."""
    n, c = x.shape[:2]
    m = w.shape[0]
    cols, outs = nn.im2col(x, w.shape[2:], st, dil, padw, grp)  # [N, G, Cg*k, P]
    wg = w.reshape(grp, m // grp, -1)
    y = _products(np.broadcast_to(wg[None], (n,) + wg.shape), cols)
    gg = g_out.reshape(n, grp, m // grp, -1)
    per_n = _products(gg, np.swapaxes(cols, -1, -2))  # [N, G, M/G, Cg*k]
    gw = np.float32(0) + per_n[0]
    for i in range(1, n):
        gw = gw + per_n[i]
    gcols = _products(np.broadcast_to(np.swapaxes(wg, -1, -2)[None], (n, grp) + (
        wg.shape[2], wg.shape[1])), gg)
    gx = nn.col2im(gcols, x.shape, w.shape[2:], st, dil, padw)
    return y.reshape((n, m) + tuple(outs)), gx, gw.reshape(w.shape)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_conv2d_on_this_native_path(dtype):
    if native.library() is None:
        pytest.skip("no C compiler here: the numpy reference runs instead")
    rng = np.random.default_rng(45)
    for nb, c, h, wd, m, grp, k, st, dil, pads in SHAPES:
        tape = Tape(dtype)
        x = tape.param(rng.uniform(-2, 2, (nb, c, h, wd)))
        w = tape.param(rng.uniform(-1, 1, (m, c // grp) + k))
        at = {"strides": st, "dilations": dil, "pads": pads, "group": grp}
        y = tape.record("conv2d", [x, w], at)
        assert tape.ok, tape.error
        r = tape.const(rng.standard_normal(y.shape))
        tape.backward(ops.sum(ops.mul(y, r)))
        # the cotangent conv2d received: mul's contribution, rounded once (half)
        g = tape.grad(y).astype(np.float32)
        padw = [(pads[0], pads[2]), (pads[1], pads[3])]
        want = _numpy_conv(tape.value(x).astype(np.float32), tape.value(w).astype(np.float32),
                           g, st, dil, padw, grp)
        for got, ref, what in ((tape.value(y), want[0], "y"), (tape.grad(x), want[1], "gx"),
                               (tape.grad(w), want[2], "gw")):
            ref = ref.astype(tape.dtype)
            assert got.shape == ref.shape, what
            assert np.array_equal(got.view(np.uint16), ref.view(np.uint16)), (
                dtype, (nb, c, h, wd, m, grp, k), what)
