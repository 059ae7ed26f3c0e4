"""conv_small.h's short-k product (a 1x1 conv read in place, k <= 256: shufflenet's grouped
1x1 convs) gives the bits of im2col + the reference product, then each epilogue op as its own
rounding, on hostile values, on every native path."""

import numpy as np
import pytest

from tapescope.core import native
from tapescope.core.ops import nn
from tapescope.core.ops.reference import bmm_numpy
from tapescope.core.parity import same_under_nan_policy
from tests.helpers.epilogue import apply_epilogue
from tests.helpers.sanitize import child_runs_clean

# every path the native code has that this CPU runs (tests/conftest.py: native_isa)
every_path = pytest.mark.usefixtures("native_isa")

# (nb, c, h, w, m, group): 1x1 convs, stride 1, no padding, k = c / group <= 160, which
# conv_small.h's sk_when takes with AVX-512 (a plane below 64, or m/g * k < 16384; with AVX2
# those of k >= m/g, without AVX k >= 2 m/g: every path takes the planes below 64 and the
# convs of k >= 2 m/g, the others run MM_ROWS there, the same bits). Chosen for its parts:
# k = 1, 3, 6 (a few k-steps), 34, 68, 136, 160; channels per group 1, 2, 5, 17, 34, 64 (one
# whole block of AVX-512's float32), 65 (a block and one lane), 130, 200 (blocks of 1-4
# vectors, tiles of 6, 4, 2 and 1 rows); planes of 1, 3, 15 (fewer columns than a vector:
# channel tiles only), 16, 49 (7x7: three vectors and one column), 64, 81, 196 (14x14: a
# panel's tail of 4), 300 (15x20: panels, a 3-vector panel, 12 columns past them), 512;
# groups 1-4; batch 1-3
SHAPES = [
    (1, 4, 1, 1, 8, 4),
    (2, 3, 1, 3, 200, 1),
    (1, 12, 3, 5, 20, 2),
    (3, 6, 4, 4, 130, 1),
    (1, 136, 7, 7, 136, 4),
    (2, 68, 7, 7, 65, 1),
    (1, 24, 8, 8, 68, 4),
    (1, 136, 14, 14, 136, 2),
    (1, 272, 7, 7, 136, 2),
    (2, 272, 14, 14, 272, 4),
    (1, 160, 15, 20, 64, 1),
    (3, 18, 15, 20, 15, 3),
    (1, 3, 16, 32, 3, 3),
    (2, 34, 9, 9, 5, 1),
    (2, 96, 14, 14, 40, 2),
]


def _hostile(rng, shape, dtype):
    """Values over 2**-24..2**24, with NaN, +-inf, -0.0 and subnormals sprinkled in."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-24, 24, shape))
    x = x.astype(dtype)
    tiny = np.finfo(dtype).smallest_subnormal
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, tiny, -tiny * 3,
                        np.finfo(dtype).tiny / 2], dtype=dtype)
    idx = rng.integers(0, x.size, max(8, x.size // 40))
    x.flat[idx] = special[rng.integers(0, special.size, idx.size)]
    return x


def _product(x, w, group):
    """im2col, then numpy's spelling of the reference product (acc = 0; acc = acc + w*x over
    k in order): the oracle."""
    nb, m = x.shape[0], w.shape[0]
    cols, _ = nn.im2col(x, (1, 1), (1, 1), (1, 1), ((0, 0), (0, 0)), group)
    wg = np.broadcast_to(w.reshape(1, group, m // group, -1),
                         (nb, group, m // group, cols.shape[2]))
    y = bmm_numpy(np.ascontiguousarray(wg.reshape(nb * group, m // group, -1)),
                  np.ascontiguousarray(cols.reshape(nb * group, cols.shape[2], -1)))
    return y.reshape((nb, m) + x.shape[2:])


# (bias, bn, res: None / "first" / "second", relu, dst): each part alone, then all of them
EPILOGUES = [
    (False, False, None, False, False),
    (True, False, None, False, False),
    (False, True, None, False, False),
    (False, False, "first", False, False),
    (False, False, "second", False, False),
    (False, False, None, True, False),
    (False, False, None, False, True),
    (True, True, "second", True, False),
    (True, True, None, True, True),
]


def _check(x, w, group, ep_parts, rng, wpack):
    """native.conv2d with that epilogue (and, with dst, the channel shuffle's copy) against
    the oracle, every bit but a NaN's sign and payload (core.parity's NaN policy)."""
    dtype, m = x.dtype.type, w.shape[0]
    bias_on, bn_on, res_kind, relu, dst_on = ep_parts
    prod = _product(x, w, group)
    bias = _hostile(rng, (m,), dtype) if bias_on else None
    bn = tuple(_hostile(rng, (m,), dtype) for _ in range(4)) if bn_on else None
    res = _hostile(rng, prod.shape, dtype) if res_kind else None
    want = apply_epilogue(prod, bias, bn, res, res_kind == "first", relu)
    outs = x.shape[2:]
    if not any(ep_parts):
        got = native.conv2d(x, w, (1, 1), (1, 1), ((0, 0), (0, 0)), outs, group, None, wpack)
        assert got is not None
        return got, want
    ep, keep = native.epilogue(dtype, m, bias=bias, bn=bn, res=res,
                               res_first=res_kind == "first", relu=relu)
    if dst_on:
        # a channel shuffle: row (image, channel) of the product to row dst_row[...] of dst
        nb = x.shape[0]
        perm = rng.permutation(nb * m).astype(np.int64)
        dst = np.full((nb, m) + tuple(outs), np.nan, dtype)
        ep.dst = dst.ctypes.data
        ep.dst_row = perm.ctypes.data
        ep.channels = m
        keep += [dst, perm]
        native.conv2d(x, w, (1, 1), (1, 1), ((0, 0), (0, 0)), outs, group, ep, wpack)
        got = np.empty_like(dst).reshape(nb * m, -1)
        got[:] = dst.reshape(nb * m, -1)[perm]
        return got.reshape(dst.shape), want
    got = native.conv2d(x, w, (1, 1), (1, 1), ((0, 0), (0, 0)), outs, group, ep, wpack)
    return got, want


@every_path
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_k_conv_equals_the_reference_product_and_its_epilogue(dtype):
    """Each shape, each epilogue part alone and together, 1 and 2 threads, the weights packed
    once (the ONNX plan) and, on planes of 512 columns and more, per call (the tape)."""
    if native.library() is None:
        pytest.skip("no C compiler here: the numpy reference runs instead")
    rng = np.random.default_rng(49)
    before = native.threads()
    try:
        for nb, c, h, wd, m, g in SHAPES:
            x = _hostile(rng, (nb, c, h, wd), dtype)
            w = _hostile(rng, (m, c // g, 1, 1), dtype)
            wp = native.conv2d_pack(w, g, (h, wd))
            if h * wd < 64 or c // g >= 2 * (m // g):  # conv_small.h on every path
                assert wp is not None, (nb, c, h, wd, m, g)
            packs = [wp, None] if nb * h * wd >= 512 and wp is not None else [wp]
            for t in (1, 2):
                native.set_threads(t)
                for parts in EPILOGUES:
                    for pack in packs:
                        got, want = _check(x, w, g, parts, rng, pack)
                        assert got.shape == want.shape and got.dtype == dtype
                        assert same_under_nan_policy(got, want), (nb, c, h, wd, m, g, parts,
                                                                  t, pack is None)
    finally:
        native.set_threads(before)


@every_path
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_k_conv_bits_do_not_depend_on_the_values_around_it(dtype):
    """A view's neighbours (x's last rows read as whole vectors, the lanes past a group's
    channels, the columns past a plane) never reach an output: the same shape inside larger
    arrays of NaN gives the same bits."""
    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(50)
    for nb, c, h, wd, m, g in (SHAPES[4], SHAPES[7], SHAPES[9]):
        x = _hostile(rng, (nb, c, h, wd), dtype)
        w = _hostile(rng, (m, c // g, 1, 1), dtype)
        wp = native.conv2d_pack(w, g, (h, wd))
        want = native.conv2d(x, w, (1, 1), (1, 1), ((0, 0), (0, 0)), (h, wd), g, None, wp)
        big = np.full(x.size + 64, np.nan, dtype)
        xs = big[:x.size].reshape(x.shape)  # NaN right after the image's last row
        xs[...] = x
        got = native.conv2d(xs, w, (1, 1), (1, 1), ((0, 0), (0, 0)), (h, wd), g, None, wp)
        assert got.tobytes() == want.tobytes()
        assert same_under_nan_policy(want, _product(x, w, g))


@every_path
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_k_conv_declines_a_mul_add_epilogue_with_the_same_bits(dtype):
    """An epilogue with a Mul/Add pair (densenet's BN written out) is not EP_ONE_R's: the
    packed conv takes it, and the bits are still the product's then each op."""
    if native.library() is None:
        pytest.skip("no C compiler here")
    rng = np.random.default_rng(51)
    nb, c, h, wd, m, g = SHAPES[7]
    x = _hostile(rng, (nb, c, h, wd), dtype)
    w = _hostile(rng, (m, c // g, 1, 1), dtype)
    mul2, add2 = _hostile(rng, (m,), dtype), _hostile(rng, (m,), dtype)
    ep, keep = native.epilogue(dtype, m, relu=True)
    ep.mul2, ep.add2 = mul2.ctypes.data, add2.ctypes.data
    got = native.conv2d(x, w, (1, 1), (1, 1), ((0, 0), (0, 0)), (h, wd), g, ep,
                        native.conv2d_pack(w, g, (h, wd)))
    ch = (None, slice(None), None, None)
    with np.errstate(all="ignore"):
        want = _product(x, w, g) * mul2[ch] + add2[ch]
        want = np.where(want <= 0, dtype(0), want)
    assert same_under_nan_policy(got, want)


# the child: every shape of SHAPES through the short-k product, weights packed and not, with
# the whole epilogue and its copy to dst, on the sanitized build
_SANITIZED = """
import numpy as np
from tapescope.core import native
from tapescope.core.parity import same_under_nan_policy
from tests.core.test_native_conv_small import SHAPES, EPILOGUES, _check
rng = np.random.default_rng(52)
ran = 0
for dtype in (np.float32, np.float64):
    for nb, c, h, wd, m, g in SHAPES:
        x = rng.standard_normal((nb, c, h, wd)).astype(dtype)
        w = rng.standard_normal((m, c // g, 1, 1)).astype(dtype)
        for pack in (native.conv2d_pack(w, g, (h, wd)), None):
            for parts in (EPILOGUES[0], EPILOGUES[-2], EPILOGUES[-1]):
                got, want = _check(x, w, g, parts, rng, pack)
                assert same_under_nan_policy(got, want), (nb, c, h, wd, m, g, parts)
                ran += 1
print("sk convs:", ran)
"""


def test_short_k_conv_is_clean_under_the_sanitizers():
    """Every shape above under AddressSanitizer and UBSan: no read past x's rows, the
    residual's or a plane's end, no write past an output row or dst's."""
    child_runs_clean(_SANITIZED, f"sk convs: {2 * len(SHAPES) * 2 * 3}")
