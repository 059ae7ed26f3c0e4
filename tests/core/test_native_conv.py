"""The implicit-GEMM conv (native.conv2d: panels packed from the image, or the shifted conv over
phase planes) gives the bits of im2col + the reference product, epilogue included."""

import numpy as np
import pytest

from tapescope.core import native
from tapescope.core.ops import nn
from tapescope.core.ops.reference import bmm_numpy
from tapescope.core.parity import same_under_nan_policy

# every path the native code has that this CPU runs (tests/conftest.py: native_isa)
pytestmark = pytest.mark.usefixtures("native_isa")

# (nb, c, h, w, m, group, kernel, strides, dilations, pads ((top, bottom), (left, right)));
# shapes chosen for the kernel's paths: the shifted conv (m/g <= 64, wide output rows), the
# packed one (narrow rows or m/g > 64), several 256-column blocks and k-blocks (k > 128),
# column tails (n not a multiple of 16), one row, 1x1 convs read in place or strided
SHAPES = [
    (1, 3, 17, 19, 5, 1, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    (2, 4, 9, 33, 6, 2, (3, 2), (2, 1), (1, 2), ((0, 2), (2, 0))),
    (1, 2, 40, 41, 7, 1, (7, 7), (2, 2), (1, 1), ((3, 3), (3, 3))),
    (1, 3, 100, 98, 9, 1, (7, 7), (2, 2), (1, 1), ((3, 3), (3, 3))),
    (1, 8, 23, 23, 1, 1, (3, 3), (2, 2), (2, 2), ((2, 2), (2, 2))),
    (2, 6, 12, 13, 9, 3, (1, 1), (2, 2), (1, 1), ((0, 0), (0, 0))),
    (2, 6, 5, 7, 9, 3, (1, 1), (1, 1), (1, 1), ((0, 0), (0, 0))),
    (1, 20, 9, 9, 70, 1, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    (1, 3, 3, 3, 2, 1, (5, 5), (1, 1), (1, 1), ((3, 3), (3, 3))),
    (2, 16, 20, 50, 12, 4, (3, 3), (1, 2), (2, 1), ((1, 0), (0, 1))),
    (1, 16, 18, 37, 13, 1, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    (1, 60, 8, 40, 8, 1, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    # a dilated window far larger than the image (the shifted conv's planes would be too):
    # the packed conv takes it
    (1, 2, 40, 40, 4, 1, (3, 3), (1, 1), (1000, 1), ((1000, 1000), (1, 1))),
]

# small output planes (n = 1, 3, 5, 9, 15, 42, 49, 100), which take the product with its lanes over
# the output channels (conv_small.h): channels per group not a multiple of a vector, several
# channel blocks and units, a last block of 1-3 vectors, several k-blocks (k > 256), groups,
# batch 2, strides, padding, dilations, a 1x1 strided conv, a 3x3 one past one whole panel
SMALL = [
    (1, 8, 1, 1, 20, 1, (1, 1), (1, 1), (1, 1), ((0, 0), (0, 0))),
    (1, 4, 1, 5, 16, 1, (1, 3), (1, 1), (1, 1), ((0, 0), (1, 1))),
    (2, 6, 5, 5, 34, 2, (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1))),
    (1, 6, 7, 6, 48, 3, (3, 3), (1, 1), (2, 2), ((2, 2), (2, 2))),
    (2, 32, 7, 7, 150, 1, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    (1, 40, 14, 14, 64, 1, (1, 1), (2, 2), (1, 1), ((0, 0), (0, 0))),
    (1, 9, 10, 10, 70, 1, (3, 3), (1, 1), (1, 1), ((1, 1), (1, 1))),
    # a window inside the image (no padding copy), asymmetric padding, and a dilated window far
    # larger than the image (the rows built by cv_line)
    (1, 4, 9, 9, 20, 1, (3, 3), (1, 1), (1, 1), ((0, 0), (0, 0))),
    (2, 4, 6, 5, 32, 2, (3, 2), (2, 1), (1, 2), ((0, 2), (2, 0))),
    (1, 2, 2, 3, 16, 1, (3, 3), (1, 1), (1000, 1), ((1000, 1000), (1, 1))),
]


def _old(x, w, st, dil, padw, group, prod=bmm_numpy):
    """im2col, then the batched product (numpy's spelling of the reference order, or the
    native bmm the conv path replaced)."""
    nb, m = x.shape[0], w.shape[0]
    outs = [nn.out_size(x.shape[2 + i], w.shape[2 + i], st[i], dil[i], *padw[i])
            for i in range(2)]
    cols, _ = nn.im2col(x, w.shape[2:], st, dil, padw, group)
    wg = np.broadcast_to(w.reshape(1, group, m // group, -1), (nb, group, m // group,
                                                              cols.shape[2]))
    y = prod(np.ascontiguousarray(wg.reshape(nb * group, m // group, -1)),
                  np.ascontiguousarray(cols.reshape(nb * group, cols.shape[2], -1)))
    return y.reshape((nb, m) + tuple(outs)), outs


def _same_nan_equal(got, want):
    """The product's own rule (core.parity.same_under_nan_policy): the same bits where not
    NaN, NaN in the same places (numpy and C, or two gcc tunings, may give a NaN other sign
    bits)."""
    assert same_under_nan_policy(got, want)


def _spread(rng, shape, dtype):
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-12, 12, shape))
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_equals_im2col_and_the_reference_product(dtype):
    if native.library() is None:
        pytest.skip("no C compiler here: the numpy reference runs instead")
    rng = np.random.default_rng(31)
    before = native.threads()
    try:
        for nb, c, h, wd, m, g, k, st, dil, pad in SHAPES:
            x = _spread(rng, (nb, c, h, wd), dtype)
            w = _spread(rng, (m, c // g) + k, dtype)
            x.flat[rng.integers(0, x.size, 5)] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
            w.flat[0], w.flat[-1] = -0.0, np.inf  # -0.0 * padding's +0.0 is -0.0: kept
            want, outs = _old(x, w, st, dil, pad, g)
            # the im2col matrix + native product it replaces: every bit, NaN for NaN (which
            # NaN an add of two keeps is gcc's operand order: its Intel tuning kept the other
            # one here, issue 49; docs/reference-order.md's NaN policy)
            old = _old(x, w, st, dil, pad, g, native.bmm)[0]
            for t in (1, 2):
                native.set_threads(t)
                got = native.conv2d(x, w, st, dil, pad, outs, g)
                assert got.shape == want.shape and got.dtype == dtype
                assert same_under_nan_policy(got, old), (nb, c, h, wd, m, g, k, st, t)
                _same_nan_equal(got, want)
    finally:
        native.set_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_plane_conv_equals_im2col_and_the_reference_product(dtype):
    """The small-plane product, its weights packed once (the ONNX plan) or per call (the
    tape): the bits of im2col + the native product, NaN for NaN (which NaN an add of two keeps
    is gcc's choice of operand order, docs/reference-order.md's NaN policy); the lanes past a
    group's channels and the columns past the plane (0 * inf there) never stored."""
    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(34)
    before = native.threads()
    try:
        for nb, c, h, wd, m, g, k, st, dil, pad in SMALL:
            x = _spread(rng, (nb, c, h, wd), dtype)
            w = _spread(rng, (m, c // g) + k, dtype)
            x.flat[rng.integers(0, x.size, 5)] = [np.nan, np.inf, -np.inf, -0.0, np.inf]
            w.flat[0], w.flat[-1] = -0.0, np.inf
            want, outs = _old(x, w, st, dil, pad, g)
            old = _old(x, w, st, dil, pad, g, native.bmm)[0]
            wp = native.conv2d_pack(w, g, outs)
            assert wp is not None, (nb, c, h, wd, m, g, k)  # the shape reaches the new path
            for t in (1, 2):
                native.set_threads(t)
                for pack in (wp, None):
                    got = native.conv2d(x, w, st, dil, pad, outs, g, wpack=pack)
                    assert got.shape == want.shape and got.dtype == dtype
                    _same_nan_equal(got, old)
                _same_nan_equal(got, want)
        with pytest.raises(ValueError):  # a pack of another geometry
            native.conv2d(x, w, st, dil, pad, outs, g, wpack=wp[1:])
    finally:
        native.set_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_epilogue_equals_the_separate_ops(dtype):
    """bias, BatchNormalization, a residual (either order) and relu per finished block of
    columns, on the shifted and the packed conv: the bits of the product then each op."""
    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(32)
    for nb, c, h, wd, m, g, k, st, dil, pad in (SHAPES[3], SHAPES[7], SHAPES[9], SHAPES[11],
                                                SMALL[2], SMALL[4]):
        x = _spread(rng, (nb, c, h, wd), dtype)
        w = _spread(rng, (m, c // g) + k, dtype)
        prod, outs = _old(x, w, st, dil, pad, g)
        bias, mean, scale, beta = (_spread(rng, (m,), dtype) for _ in range(4))
        den = np.sqrt(np.abs(_spread(rng, (m,), dtype)))
        res = _spread(rng, prod.shape, dtype)
        res.flat[::13] = np.nan
        ch = (None, slice(None), None, None)
        for res_first in (True, False):
            with np.errstate(all="ignore"):
                want = ((prod + bias[ch] - mean[ch]) / den[ch]) * scale[ch] + beta[ch]
                want = res + want if res_first else want + res
                want = np.where(want <= 0, dtype(0), want)
            ep, keep = native.epilogue(dtype, m, bias=bias, bn=(mean, den, scale, beta),
                                       res=res, res_first=res_first, relu=True)
            got = native.conv2d(x, w, st, dil, pad, outs, g, ep,
                                native.conv2d_pack(w, g, outs))
            _same_nan_equal(got, want)


def test_conv_nd_takes_the_native_conv_with_the_same_bits(monkeypatch):
    """The tape's conv (reference matmul) runs native.conv2d and returns its result."""
    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(33)
    x = _spread(rng, (2, 4, 11, 40), np.float32)
    w = _spread(rng, (6, 2, 3, 3), np.float32)
    pad = ((1, 1), (1, 1))
    want, _ = _old(x, w, (1, 1), (1, 1), pad, 2)
    calls = []
    real = native.conv2d
    monkeypatch.setattr(native, "conv2d", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = nn.conv_nd(x, w, (1, 1), pad, (1, 1), 2)
    assert calls and got.tobytes() == want.tobytes()


def test_conv2d_declines_what_it_does_not_take():
    if native.library() is None:
        pytest.skip("no C compiler here")
    x = np.zeros((1, 4, 5, 5), np.float32)
    w = np.zeros((2, 4, 3, 3), np.float32)
    outs = (3, 3)
    pads = ((0, 0), (0, 0))
    assert native.conv2d(x, w.astype(np.float64), (1, 1), (1, 1), pads, outs, 1) is None
    assert native.conv2d(x, w, (0, 1), (1, 1), pads, outs, 1) is None  # stride 0
    assert native.conv2d(x, w[:, :2], (1, 1), (1, 1), pads, outs, 3) is None  # groups
    assert native.conv2d(x.astype(np.float16), w.astype(np.float16), (1, 1), (1, 1), pads,
                         outs, 1) is None
    assert native.conv2d(x, w, (1, 1), (1, 1), pads, outs, 1).shape == (1, 2, 3, 3)
