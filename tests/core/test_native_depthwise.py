"""The depthwise conv (native.conv2d_one_per_group: one output channel per group; refkernels'
conv_dw.h with its lanes over channels, CONV_MG1_FAST with its lanes over positions) gives the
bits of im2col + the reference product, each output its own chain over (c, kh, kw), on hostile
values and odd geometry, with and without each part of the epilogue; the 2-D pools with their
lanes over planes (conv_dw.h's POOL_DW) give pool_nd's."""

import numpy as np
import pytest

from tapescope.core import native
from tapescope.core.ops import nn
from tapescope.core.ops.reference import bmm_numpy
from tapescope.core.parity import same_under_nan_policy
from tests.helpers.epilogue import apply_epilogue

# every path the native code has that this CPU runs (tests/conftest.py: native_isa)
pytestmark = pytest.mark.usefixtures("native_isa")

# (nb, groups, channels per group, h, w, kernel, strides, dilations, pads ((top, bottom),
# (left, right))): planes 1x1 to 57x57, 1 to 67 groups (a last block of channels not a whole
# vector), strides 1-3, pads 0-2, dilation 2, two input channels per group, batch 2, a window
# region that leaves image rows and columns out (no padding at the end, strides past the
# image), wide stride-1 rows (lanes over positions) and narrow ones (lanes over channels)
GEOMS = [
    (1, 1, 1, 1, 1, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    (2, 67, 1, 14, 14, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    (1, 33, 1, 7, 7, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    (1, 17, 1, 28, 28, (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1))),
    (1, 3, 1, 57, 57, (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1))),
    (1, 2, 1, 57, 57, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    (2, 19, 2, 9, 13, (3, 3), (1, 1), (2, 2), ((2, 2), (2, 2))),
    (1, 20, 1, 8, 8, (3, 3), (2, 2), (1, 1), ((0, 0), (0, 0))),
    (1, 9, 1, 11, 10, (3, 2), (3, 1), (1, 2), ((0, 2), (2, 0))),
    (2, 5, 1, 23, 31, (5, 5), (3, 3), (1, 1), ((2, 2), (2, 2))),
    (1, 16, 1, 5, 40, (1, 3), (1, 1), (1, 1), ((0, 0), (1, 1))),
    (1, 31, 3, 4, 3, (2, 2), (1, 2), (1, 1), ((0, 1), (1, 0))),
]

# the epilogue parts: (bias, BatchNorm, residual: None / first / second, Relu)
EPS = [None, (True, False, None, False), (False, True, None, False),
       (False, False, True, False), (False, False, False, True), (True, True, False, True)]


def _hostile(rng, shape, dtype):
    """Magnitudes over 2**-12..2**12, with NaN, +-inf, -0.0 and subnormals among them."""
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-12, 12, shape))).astype(dtype)
    flat = x.reshape(-1)
    tiny = np.finfo(dtype).tiny
    for k, v in enumerate([np.nan, np.inf, -np.inf, -0.0, tiny / 4, -tiny / 8, tiny * 3]):
        flat[rng.integers(0, flat.size, max(1, flat.size // 97))] = v if k else np.nan
    return x


def _reference(x, w, st, dil, padw, group):
    """im2col, then numpy's spelling of the reference product, one group a batch entry."""
    nb, m = x.shape[0], w.shape[0]
    outs = [nn.out_size(x.shape[2 + i], w.shape[2 + i], st[i], dil[i], *padw[i])
            for i in range(2)]
    cols, _ = nn.im2col(x, w.shape[2:], st, dil, padw, group)
    wg = np.broadcast_to(w.reshape(1, group, 1, -1), (nb, group, 1, cols.shape[2]))
    y = bmm_numpy(np.ascontiguousarray(wg.reshape(nb * group, 1, -1)),
                  np.ascontiguousarray(cols.reshape(nb * group, cols.shape[2], -1)))
    return y.reshape((nb, m) + tuple(outs))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_depthwise_conv_equals_im2col_and_the_reference_product(dtype):
    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(49)
    for nb, g, cg, h, w, k, st, dil, padw in GEOMS:
        x = _hostile(rng, (nb, g * cg, h, w), dtype)
        wt = _hostile(rng, (g, cg) + k, dtype)
        wt.reshape(-1)[1::7] = -0.0  # -0.0 * +0.0 (padding) = -0.0: still added
        with np.errstate(all="ignore"):
            plain = _reference(x, wt, st, dil, padw, g)
        for ep_parts in EPS:
            if ep_parts is None:
                got = native.conv2d_one_per_group(x, wt, st, dil, padw, plain.shape[2:])
                assert got is not None
                assert same_under_nan_policy(got, plain), (nb, g, cg, h, w, k, st, dil, padw)
                continue
            use_bias, use_bn, res_first, relu = ep_parts
            bias, mean, scale, beta = (_hostile(rng, (g,), dtype) for _ in range(4))
            den = np.abs(_hostile(rng, (g,), dtype))
            res = _hostile(rng, plain.shape, dtype)
            want = apply_epilogue(plain, bias if use_bias else None,
                                  (mean, den, scale, beta) if use_bn else None,
                                  res if res_first is not None else None, bool(res_first), relu)
            ep, keep = native.epilogue(
                dtype, g, bias=bias if use_bias else None,
                bn=(mean, den, scale, beta) if use_bn else None,
                res=res if res_first is not None else None, res_first=bool(res_first),
                relu=relu)
            got = native.conv2d_one_per_group(x, wt, st, dil, padw, plain.shape[2:], ep)
            assert same_under_nan_policy(got, want), (ep_parts, nb, g, cg, h, w, k, st, padw)



@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_depthwise_conv_epilogue_writes_the_shuffled_rows(dtype):
    """With the shuffle's dst (fused.py's channel shuffle after a conv), each finished row goes
    to its dst row: after BatchNorm + Relu (done in the lanes), and after a Mul/Add pair (the
    rows' pass), the same bits as the separate ops."""
    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(50)
    for nb, g, h, w, st in [(2, 37, 14, 14, (1, 1)), (1, 20, 9, 11, (2, 2)), (1, 5, 3, 3, (1, 1))]:
        x = _hostile(rng, (nb, g, h, w), dtype)
        wt = _hostile(rng, (g, 1, 3, 3), dtype)
        padw = ((1, 1), (1, 1))
        with np.errstate(all="ignore"):
            plain = _reference(x, wt, st, (1, 1), padw, g)
        mean, scale, beta, mul2, add2 = (_hostile(rng, (g,), dtype) for _ in range(5))
        den = np.abs(_hostile(rng, (g,), dtype))
        ch = (None, slice(None), None, None)
        rows = rng.permutation(nb * g).astype(np.int64)  # image i, channel c -> dst row
        for affine in (False, True):
            with np.errstate(all="ignore"):
                want = (plain - mean[ch]) / den[ch] * scale[ch] + beta[ch]
                if affine:
                    want = mul2[ch] * want + add2[ch]
                want = np.where(want <= 0, dtype(0), want)
            ep, keep = native.epilogue(dtype, g, bn=(mean, den, scale, beta), relu=True)
            if affine:
                ep.mul2, ep.add2, ep.aff_first = mul2.ctypes.data, add2.ctypes.data, 1
            dst = np.full((nb * g,) + plain.shape[2:], np.nan, dtype)
            ep.dst, ep.dst_row, ep.channels = dst.ctypes.data, rows.ctypes.data, g
            got = native.conv2d_one_per_group(x, wt, st, (1, 1), padw, plain.shape[2:], ep)
            assert got is not None
            assert same_under_nan_policy(dst[rows].reshape(want.shape), want), (affine, g, h)



# (planes as (nb, c), h, w, kernel, strides, dilations, pads, ceil_mode, count_include_pad):
# 16 to 67 planes (the lanes over planes take L or more; a last block not whole), output rows
# up to 32 wide, strides 1-3, pads 0-2, dilation 2, windows past the image's end (ceil mode,
# no end padding), rows narrower than a vector, a plane whose whole image the windows miss
POOLS = [
    ((1, 24), 56, 56, (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1)), 0, 0),
    ((2, 34), 14, 14, (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1)), 0, 1),
    ((1, 67), 9, 11, (2, 3), (1, 2), (1, 1), ((0, 1), (1, 0)), 1, 0),
    ((1, 17), 12, 13, (3, 2), (3, 1), (2, 2), ((2, 0), (1, 2)), 0, 0),
    ((1, 40), 7, 7, (5, 5), (1, 1), (1, 1), ((1, 1), (1, 1)), 0, 1),
    ((1, 16), 20, 19, (3, 3), (3, 3), (1, 1), ((0, 0), (0, 0)), 1, 0),
    ((1, 33), 3, 4, (2, 2), (2, 2), (1, 1), ((0, 0), (0, 0)), 1, 0),
    ((2, 8), 27, 27, (3, 3), (2, 2), (1, 1), ((0, 0), (0, 0)), 0, 0),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pools_over_planes_equal_pool_nd(dtype):
    """MaxPool's np.maximum choices (the first NaN, the second of +0.0 and -0.0, -inf) and
    AveragePool's serial sums and divisors, padding, ceil windows: pool_nd's bits (a NaN's
    sign and payload aside: inf + -inf against a NaN input, which one an add keeps is the
    instruction's operand order, core.parity.same_under_nan_policy)."""
    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(51)
    for (nb, c), h, w, k, st, dil, padw, ceil, cip in POOLS:
        x = _hostile(rng, (nb, c, h, w), dtype)
        x[0, 1] = -0.0
        x[0, 2, ::2] = 0.0
        outs = [nn.out_size(x.shape[2 + i], k[i], st[i], dil[i], *padw[i], ceil)
                for i in range(2)]
        for kind in ("max", "avg"):
            cnt = np.ascontiguousarray(nn.pool_counts(x, k, st, padw, dil, ceil, cip),
                                       dtype=dtype) if kind == "avg" else None
            got = native.pool2d(kind, x, cnt, k, st, dil, padw, outs)
            with np.errstate(all="ignore"):
                want = nn.pool_nd(x, kind, k, st, padw, dil, ceil, cip)
            assert got is not None and same_under_nan_policy(got, want), (kind, c, h, w, k, st)


# the geometries above (and the hostile ones: strides, pads and dilations past the image) and
# the pools in the sanitized build: no read or write outside the image, the weights, the
# output and the buffers (the transposed copies' last, overlapping vectors; lanes past the
# last group)
SANITIZED = """
import numpy as np
from tapescope.core import native
from tests.core.test_native_depthwise import GEOMS, POOLS, _hostile, _reference
from tapescope.core.ops import nn
from tapescope.core.parity import same_under_nan_policy
rng = np.random.default_rng(7)
done = 0
for dt in (np.float32, np.float64):
    for nb, g, cg, h, w, k, st, dil, padw in GEOMS + [
            (1, 3, 1, 8, 8, (3, 3), (9, 1), (1, 3), ((0, 0), (5, 0))),
            (1, 2, 1, 6, 5, (2, 2), (1, 1), (40, 1), ((40, 40), (0, 0)))]:
        x = _hostile(rng, (nb, g * cg, h, w), dt)
        wt = _hostile(rng, (g, cg) + k, dt)
        with np.errstate(all="ignore"):
            want = _reference(x, wt, st, dil, padw, g)
            res = _hostile(rng, want.shape, dt)
            ep, keep = native.epilogue(dt, g, res=res, relu=True)
            got = native.conv2d_one_per_group(x, wt, st, dil, padw, want.shape[2:], ep)
            want = np.where(want + res <= 0, dt(0), want + res)
        assert same_under_nan_policy(got, want), (nb, g, cg, h, w, k, st, dil, padw)
        done += 1
    for (nb, c), h, w, k, st, dil, padw, ceil, cip in POOLS:
        x = _hostile(rng, (nb, c, h, w), dt)
        outs = [nn.out_size(x.shape[2 + i], k[i], st[i], dil[i], *padw[i], ceil)
                for i in range(2)]
        cnt = np.ascontiguousarray(nn.pool_counts(x, k, st, padw, dil, ceil, cip), dtype=dt)
        for kind in ("max", "avg"):
            got = native.pool2d(kind, x, cnt if kind == "avg" else None, k, st, dil, padw, outs)
            with np.errstate(all="ignore"):
                want = nn.pool_nd(x, kind, k, st, padw, dil, ceil, cip)
            assert same_under_nan_policy(got, want), (kind, c, h, w, k, st)
        done += 1
print("depthwise", done)
"""


def test_depthwise_conv_runs_clean_under_asan_and_ubsan():
    from tests.helpers.sanitize import child_runs_clean

    child_runs_clean(SANITIZED, f"depthwise {2 * (len(GEOMS) + 2 + len(POOLS))}")
