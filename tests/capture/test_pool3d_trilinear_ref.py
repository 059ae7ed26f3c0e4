"""The 3-d ops a volume network records -- ``nn.MaxPool3d``, ``nn.AvgPool3d`` and
``F.interpolate(mode="trilinear")`` -- their references (core/capture/aten_ref_conv.py) against
torch's CPU kernels.

- ``max_pool3d_with_indices`` (+ backward): ATen's ``cpu_max_pool`` (3-d): from -inf with the
  index of the window's first in-bound tap, the in-bound taps in row-major (d, h, w) order,
  ``val > max || isnan(val)`` (the first of equal maxima, the last NaN); index
  ``d H W + h W + w``. Values and indices are torch's exactly (float64, float32, float16,
  bfloat16, integers; ties, NaNs, -inf windows reaching into the padding), over strides
  unlike the kernel, padding, dilation and ceil_mode. The backward (zeros, then
  ``gx[idx] += g`` in row-major output order, in the gradient's own type) is torch's bits.
- ``avg_pool3d`` (+ backward): ATen's ``avg_pool3d_out_frame``: a serial sum of the in-bound
  taps in row-major order, then ``0 + sum / T(divisor)`` (``count_include_pad`` both ways,
  ceil_mode); the backward adds ``g / T(divisor)`` to each in-bound tap, output voxels in
  row-major order. Float64 agrees to 1e-12, float32 and int64 are torch's bits, forwards and
  backwards.
- ``upsample_trilinear3d`` (+ ``.vec``, + backward): along w, then h, then d,
  ``(a * w0) + (b * w1)`` at each step; the backward adds ``((ld * lh) * lw) * g`` to the 8
  corners per output voxel in row-major order. Float64 agrees to 1e-12 (up, down, same size,
  align_corners both ways, explicit scales); float32 is torch's bits where the weights are
  powers of two (or 0), as torch's build contracts each step to an FMA; the forms given that
  FMA (``mad=fma``, ``--explain``'s contraction) are torch's bits everywhere, float32,
  float64 and the half types alike: the order is ATen's.
- hostile arguments are a NoReference naming the op; an output size beyond the recorded
  outputs is refused before anything is allocated;
- a captured training step with ``nn.MaxPool3d``, ``nn.AvgPool3d`` and trilinear
  interpolation has every one of their ops judged (the pools' outputs torch's bits on their
  recorded inputs)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.aten_ref import reference  # noqa: E402
from tapescope.core.capture.aten_ref_conv import (  # noqa: E402
    upsample_trilinear3d,
    upsample_trilinear3d_backward,
)
from tapescope.core.capture.aten_ref_table import NoReference  # noqa: E402
from tapescope.core.explain_prims import fma  # noqa: E402
from tests.helpers.capture_files import judged_capture  # noqa: E402
from tests.helpers.ref_forms import assert_agrees_in_float64, recorded_outputs  # noqa: E402
from tests.helpers.torch_arrays import bits as _bits  # noqa: E402
from tests.helpers.torch_arrays import from_torch as _np  # noqa: E402
from tests.helpers.torch_arrays import to_torch as _torch  # noqa: E402

F = torch.nn.functional
MAX, MAX_BWD = "aten.max_pool3d_with_indices.default", \
    "aten.max_pool3d_with_indices_backward.default"
AVG, AVG_BWD = "aten.avg_pool3d.default", "aten.avg_pool3d_backward.default"
TRI, TRI_VEC = "aten.upsample_trilinear3d.default", "aten.upsample_trilinear3d.vec"
TRI_BWD = "aten.upsample_trilinear3d_backward.default"
HALF = {"float16": (np.float16, torch.float16), "bfloat16": (ml_dtypes.bfloat16, torch.bfloat16)}

# (input shape, kernel, stride, padding, ceil_mode): strides unlike the kernel, padding,
# ceil_mode's last partial window, odd sizes, unbatched (C, D, H, W) inputs
POOLS = {
    "k2-s2": ((2, 3, 6, 6, 6), [2, 2, 2], [2, 2, 2], [0, 0, 0], False),
    "k3-s1-p1-overlapping": ((2, 2, 5, 6, 7), [3, 3, 3], [1, 1, 1], [1, 1, 1], False),
    "k3-s2-p1-ceil": ((2, 2, 7, 6, 5), [3, 3, 3], [2, 2, 2], [1, 1, 1], True),
    "mixed-ceil": ((1, 2, 7, 8, 9), [3, 2, 4], [2, 1, 3], [1, 0, 2], True),
    "unbatched-odd": ((3, 5, 7, 6), [2, 3, 2], [1, 2, 2], [1, 1, 0], False),
    "stride-over-kernel-ceil": ((2, 2, 9, 8, 9), [2, 2, 2], [3, 3, 3], [0, 1, 1], True),
    "stride-default": ((2, 2, 6, 7, 5), [2, 3, 2], [], [1, 1, 0], True),
}
# dilation (max pool only): (input shape, kernel, stride, padding, dilation, ceil_mode)
DILATED = {
    "dil-2-3-1": ((1, 2, 9, 8, 7), [3, 2, 3], [1, 2, 2], [1, 1, 0], [2, 3, 1], False),
    "dil-ceil": ((2, 2, 8, 7, 9), [2, 3, 2], [2, 2, 3], [1, 1, 1], [3, 2, 2], True),
}


def _geoms() -> dict:
    """Every max-pool geometry as (shape, [kernel, stride, padding, dilation, ceil_mode])."""
    out = {n: (s, [k, st, p, [1, 1, 1], c]) for n, (s, k, st, p, c) in POOLS.items()}
    out.update({n: (s, [k, st, p, d, c]) for n, (s, k, st, p, d, c) in DILATED.items()})
    return out


MAX_GEOMS = _geoms()


def _rn(shape, dt, seed: int, spread: float = 0.0) -> np.ndarray:
    """Normal values, times 10^u (u uniform in +-spread): sums whose order shows."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(shape) * 10.0 ** rng.uniform(-spread, spread, shape)
    return v.astype(dt)


# ---- max pooling ------------------------------------------------------------------------------
def _max_pair(x: np.ndarray, geo: list, dt, tdt=None, g_seed: int = 2) -> tuple:
    """(reference (y, idx), torch (y, idx), reference gx, torch gx): the backward of each
    side's own indices, the same gradient."""
    tx = _torch(x, tdt)
    r = reference(MAX, [x, *geo], {})
    t = torch.ops.aten.max_pool3d_with_indices(tx, *geo)
    g = _rn(r[0].shape, dt, g_seed, spread=3)
    rg = reference(MAX_BWD, [g, x, *geo, r[1]], {})[0]
    tg = torch.ops.aten.max_pool3d_with_indices_backward(_torch(g, tdt), tx, *geo, t[1])
    return r, (_np(t[0], dt), t[1].numpy()), rg, _np(tg, dt)


@pytest.mark.parametrize("name", list(MAX_GEOMS))
def test_max_pool3d_agrees_with_torch_in_float64_indices_exactly(name):
    shape, geo = MAX_GEOMS[name]
    r, t, rg, tg = _max_pair(_rn(shape, np.float64, 1), geo, np.float64)
    assert r[0].shape == t[0].shape and r[0].dtype == np.float64 and r[1].dtype == np.int64
    np.testing.assert_allclose(r[0], t[0], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(r[1], t[1])
    assert rg.shape == tg.shape == shape
    np.testing.assert_allclose(rg, tg, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(MAX_GEOMS))
def test_max_pool3d_in_float32_is_torchs_bits_forwards_and_backwards(name):
    shape, geo = MAX_GEOMS[name]
    r, t, rg, tg = _max_pair(_rn(shape, np.float32, 3), geo, np.float32)
    assert _bits(r[0]) == _bits(t[0])
    np.testing.assert_array_equal(r[1], t[1])
    assert _bits(rg) == _bits(tg)


@pytest.mark.parametrize("name", ["k2-s2", "k3-s1-p1-overlapping", "mixed-ceil", "dil-ceil"])
def test_ties_and_nans_pick_torchs_tap_first_equal_maximum_last_nan(name):
    """Small integers (many equal maxima), signed zeros and NaNs with their own payloads:
    ATen keeps the first of equal maxima (``val > max``) and takes every NaN it meets (the
    last one's index and bits)."""
    shape, geo = MAX_GEOMS[name]
    rng = np.random.default_rng(4)
    x = rng.integers(-2, 3, shape).astype(np.float32)
    x.reshape(-1)[rng.integers(0, x.size, x.size // 8)] = -0.0
    bits = x.reshape(-1).view(np.uint32)
    nans = rng.integers(0, x.size, x.size // 10)
    bits[nans] = np.uint32(0x7FC00000) + np.arange(1, nans.size + 1, dtype=np.uint32)
    r, t, rg, tg = _max_pair(x, geo, np.float32)
    assert _bits(r[0]) == _bits(t[0])
    np.testing.assert_array_equal(r[1], t[1])
    assert _bits(rg) == _bits(tg)


def test_two_nans_in_a_window_the_last_one_wins():
    x = np.zeros((1, 1, 2, 2, 2), np.float32)
    x.view(np.uint32)[0, 0, 0, 0, 1] = 0x7FC00001
    x.view(np.uint32)[0, 0, 1, 1, 0] = 0x7FC00002
    y, idx = reference(MAX, [x, [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False], {})
    assert idx.reshape(-1).tolist() == [6]  # (d 1, h 1, w 0): 1 * 4 + 1 * 2 + 0
    assert y.view(np.uint32).reshape(-1).tolist() == [0x7FC00002]
    t = torch.ops.aten.max_pool3d_with_indices(torch.from_numpy(x), [2, 2, 2], [2, 2, 2])
    assert t[1].reshape(-1).tolist() == [6]


@pytest.mark.parametrize("geo", [
    [[3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], False],
    [[2, 2, 2], [2, 2, 2], [1, 1, 1], [1, 1, 1], True],
    [[2, 2, 2], [1, 1, 1], [1, 1, 1], [3, 3, 3], False],
])
def test_an_all_minus_inf_window_keeps_the_index_of_its_first_in_bound_tap(geo):
    """No tap beats the starting -inf: the index stays ATen's start, the window's first tap
    inside the input (not a padded one)."""
    x = np.full((1, 2, 3, 3, 3), -np.inf, np.float32)
    r, t, rg, tg = _max_pair(x, geo, np.float32)
    np.testing.assert_array_equal(r[1], t[1])
    assert _bits(r[0]) == _bits(t[0]) and _bits(rg) == _bits(tg)


@pytest.mark.parametrize("shape, geo", [
    ((1, 2, 2, 3, 2), [[40, 40, 40], [1, 1, 1], [20, 20, 20], [1, 1, 1], False]),
    ((1, 2, 3, 3, 4), [[9, 8, 9], [2, 3, 2], [4, 4, 4], [1, 1, 1], True]),
    ((1, 1, 1, 2, 1), [[2**20] * 3, [1, 1, 1], [2**19] * 3, [1, 1, 1], True]),
], ids=["k40-p20", "k9-p4-ceil", "k2^20-p2^19"])
def test_a_kernel_far_larger_than_the_input_takes_only_its_in_bound_taps(shape, geo):
    """A padded input past twice the input's size (a kernel of 2^20 reaching 2^19 into the
    padding) is never made: each window's in-bound taps only, as ATen's loop; torch's
    values and indices."""
    x = _rn(shape, np.float32, 15)
    r, t, rg, tg = _max_pair(x, geo, np.float32)
    assert _bits(r[0]) == _bits(t[0]) and _bits(rg) == _bits(tg)
    np.testing.assert_array_equal(r[1], t[1])


@pytest.mark.parametrize("half", list(HALF))
@pytest.mark.parametrize("name", ["k3-s1-p1-overlapping", "mixed-ceil", "dil-2-3-1"])
def test_max_pool3d_of_the_half_types_is_torchs_bits(name, half):
    """The backward in the half type itself (ATen's kernel has no float buffer: each
    addition rounded to it)."""
    shape, geo = MAX_GEOMS[name]
    dt, tdt = HALF[half]
    r, t, rg, tg = _max_pair(_rn(shape, dt, 5), geo, dt, tdt)
    assert r[0].dtype == rg.dtype == np.dtype(dt)
    assert _bits(r[0]) == _bits(t[0])
    np.testing.assert_array_equal(r[1], t[1])
    assert _bits(rg) == _bits(tg)


@pytest.mark.parametrize("dt", [np.int64, np.int32, np.uint8])
def test_max_pool3d_of_integers_is_torchs(dt):
    shape, geo = MAX_GEOMS["mixed-ceil"]
    x = np.random.default_rng(6).integers(0, 40, shape).astype(dt)
    r = reference(MAX, [x, *geo], {})
    t = torch.ops.aten.max_pool3d_with_indices(torch.from_numpy(x), *geo)
    assert r[0].dtype == np.dtype(dt)
    np.testing.assert_array_equal(r[0], t[0].numpy())
    np.testing.assert_array_equal(r[1], t[1].numpy())


def test_the_max_pool_backward_adds_in_row_major_output_order():
    """One large value is the maximum of all 27 windows around it (3 x 3 x 3, stride 1,
    padding 1): its gradient is the 27 outputs' g added one by one in row-major output order
    (float32, magnitudes far apart: another order rounds otherwise)."""
    x = np.zeros((1, 1, 3, 3, 3), np.float32)
    x[0, 0, 1, 1, 1] = 9.0
    geo = [[3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], False]
    g = _rn((1, 1, 3, 3, 3), np.float32, 7, spread=4)
    y, idx = reference(MAX, [x, *geo], {})
    assert (idx == 13).all()
    want = np.float32(0)
    for v in g.reshape(-1):
        want = np.float32(want + v)
    got = reference(MAX_BWD, [g, x, *geo, idx], {})[0]
    assert got[0, 0, 1, 1, 1] == want
    tg = torch.ops.aten.max_pool3d_with_indices_backward(
        torch.from_numpy(g), torch.from_numpy(x), *geo, torch.from_numpy(idx))
    assert _bits(got) == _bits(tg.numpy())


# ---- average pooling --------------------------------------------------------------------------
def _avg_pair(name: str, dt, include: bool) -> tuple:
    shape, k, st, p, ceil = POOLS[name]
    geo = [k, st, p, ceil, include, None]
    x = _rn(shape, dt, 8, spread=2) if dt != np.int64 \
        else np.random.default_rng(8).integers(-1000, 1000, shape)
    r = reference(AVG, [x, *geo], {})[0]
    t = torch.ops.aten.avg_pool3d(torch.from_numpy(x), *geo).numpy()
    g = _rn(r.shape, dt, 9, spread=3) if dt != np.int64 \
        else np.random.default_rng(9).integers(-1000, 1000, r.shape)
    rg = reference(AVG_BWD, [g, x, *geo], {})[0]
    tg = torch.ops.aten.avg_pool3d_backward(torch.from_numpy(g), torch.from_numpy(x),
                                            *geo).numpy()
    return r, t, rg, tg


@pytest.mark.parametrize("include", [True, False], ids=["count_include_pad", "no_pad_count"])
@pytest.mark.parametrize("name", list(POOLS))
def test_avg_pool3d_agrees_with_torch_in_float64(name, include):
    r, t, rg, tg = _avg_pair(name, np.float64, include)
    assert r.shape == t.shape and r.dtype == rg.dtype == np.float64
    np.testing.assert_allclose(r, t, rtol=0, atol=1e-12)
    assert rg.shape == tg.shape == POOLS[name][0]
    np.testing.assert_allclose(rg, tg, rtol=0, atol=1e-12)


@pytest.mark.parametrize("include", [True, False], ids=["count_include_pad", "no_pad_count"])
@pytest.mark.parametrize("name", list(POOLS))
def test_avg_pool3d_in_float32_and_int64_is_torchs_bits_forwards_and_backwards(name, include):
    """int64: ATen's integer sum and C++'s truncating division."""
    for dt in (np.float32, np.int64):
        r, t, rg, tg = _avg_pair(name, dt, include)
        assert r.dtype == rg.dtype == np.dtype(dt)
        assert _bits(r) == _bits(t)
        assert _bits(rg) == _bits(tg)


def test_the_avg_pool_backward_adds_in_row_major_output_order():
    """3 x 3 x 3 windows, stride 1, padding 1 (count_include_pad): the centre voxel is in all
    27 windows; its gradient is ``(((0 + g0 / 27) + g1 / 27) + ...)`` in row-major output
    order, as ATen's loop."""
    x = np.zeros((1, 1, 3, 3, 3), np.float32)
    geo = [[3, 3, 3], [1, 1, 1], [1, 1, 1], False, True, None]
    g = _rn((1, 1, 3, 3, 3), np.float32, 10, spread=4)
    want = np.float32(0)
    for v in g.reshape(-1):
        want = np.float32(want + np.float32(v / np.float32(27)))
    got = reference(AVG_BWD, [g, x, *geo], {})[0]
    assert got[0, 0, 1, 1, 1] == want
    tg = torch.ops.aten.avg_pool3d_backward(torch.from_numpy(g), torch.from_numpy(x), *geo)
    assert _bits(got) == _bits(tg.numpy())


# ---- trilinear upsampling ---------------------------------------------------------------------
# (input (D, H, W), output (D, H, W), align_corners, scales)
TRILINEAR = {
    "up-3x4x5->6x8x10": ((3, 4, 5), (6, 8, 10), False, None),
    "up-3x4x5->7x9x11-align": ((3, 4, 5), (7, 9, 11), True, None),
    "down-6x7x8->3x4x5": ((6, 7, 8), (3, 4, 5), False, None),
    "down-6x7x8->4x3x5-align": ((6, 7, 8), (4, 3, 5), True, None),
    "mixed-4x6x4->7x3x5": ((4, 6, 4), (7, 3, 5), False, None),
    "up-4x4x4->8x8x8-scale-2": ((4, 4, 4), (8, 8, 8), False, [2.0, 2.0, 2.0]),
    "up-4x5x6->9x11x13-scales": ((4, 5, 6), (9, 11, 13), False, [2.3, 2.2, 2.2]),
    "down-9x8x9->4x4x4-scale-0.5": ((9, 8, 9), (4, 4, 4), False, [0.5, 0.5, 0.5]),
    "same-5x5x5": ((5, 5, 5), (5, 5, 5), False, None),
    "same-5x5x5-align": ((5, 5, 5), (5, 5, 5), True, None),
    "up-3x5x4->5x9x7-align": ((3, 5, 4), (5, 9, 7), True, None),
    "ones-1x4x3->4x1x6-align": ((1, 4, 3), (4, 1, 6), True, None),
    "down-4x6x4->2x3x2": ((4, 6, 4), (2, 3, 2), False, None),
}
# float32 bits of the plain forms: every weight a power of two or 0 (the FMA then rounds as
# the separate product and sum)
F32_BITS = ["down-9x8x9->4x4x4-scale-0.5", "same-5x5x5", "same-5x5x5-align",
            "up-3x5x4->5x9x7-align", "down-4x6x4->2x3x2"]


def _tri_args(name: str) -> tuple:
    n_in, n_out, align, sc = TRILINEAR[name]
    return list(n_in), list(n_out), align, list(sc) if sc else [None, None, None]


def _tri_torch(x, g, name: str, tdt=None) -> tuple:
    n_in, n_out, align, sc = _tri_args(name)
    y = torch.ops.aten.upsample_trilinear3d(_torch(x, tdt), n_out, align, *sc)
    gx = torch.ops.aten.upsample_trilinear3d_backward(_torch(g, tdt), n_out, [2, 3, *n_in],
                                                      align, *sc)
    return _np(y, x.dtype), _np(gx, x.dtype)


def _tri_pair(name: str, dt, tdt=None, mad=None) -> tuple:
    n_in, n_out, align, sc = _tri_args(name)
    x, g = _rn((2, 3, *n_in), dt, 11), _rn((2, 3, *n_out), dt, 12, spread=2)
    if mad is None:
        r = reference(TRI, [x, n_out, align, *sc], {})[0]
        rg = reference(TRI_BWD, [g, n_out, [2, 3, *n_in], align, *sc], {})[0]
    else:
        r = upsample_trilinear3d([x, n_out, align, *sc], {}, mad=mad)[0]
        rg = upsample_trilinear3d_backward([g, n_out, [2, 3, *n_in], align, *sc], {},
                                           mad=mad)[0]
    return (r, rg, *_tri_torch(x, g, name, tdt))


@pytest.mark.parametrize("name", list(TRILINEAR))
def test_trilinear_upsampling_agrees_with_torch_in_float64(name):
    r, rg, t, tg = _tri_pair(name, np.float64)
    assert_agrees_in_float64(r, t, rg, tg)


@pytest.mark.parametrize("name", list(TRILINEAR))
def test_trilinear_upsampling_in_float32_is_torchs_bits_where_its_fma_rounds_alike(name):
    """Elsewhere torch's ``a * w0 + b * w1`` steps (and ``acc += w * g``, and the source
    index's ``s * (i + 0.5) - 0.5``) run as FMAs: a last-bit difference."""
    r, rg, t, tg = _tri_pair(name, np.float32)
    assert r.dtype == rg.dtype == np.float32
    np.testing.assert_allclose(r, t, rtol=0, atol=4e-6)
    np.testing.assert_allclose(rg, tg, rtol=0, atol=1e-4)
    if name in F32_BITS:
        assert _bits(r) == _bits(t)
        assert _bits(rg) == _bits(tg)


@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("name", list(TRILINEAR))
def test_trilinear_with_torchs_fma_contractions_is_torchs_bits(name, dt):
    """The forms with ``mad=fma`` (each ``a * w0 + b * w1`` as ``fma(a, w0, b * w1)``, each
    ``acc += w * g`` as ``fma(w, g, acc)``): torch's bits everywhere, so the order (w, then
    h, then d; the corners in row-major order; ``(ld * lh) * lw``) is ATen's."""
    ndt, tdt = HALF.get(dt, (np.dtype(dt), None))
    r, rg, t, tg = _tri_pair(name, ndt, tdt, mad=fma)
    assert r.dtype == rg.dtype == np.dtype(ndt)
    assert _bits(r) == _bits(t)
    assert _bits(rg) == _bits(tg)


def test_the_trilinear_backward_adds_the_8_corners_per_voxel_in_order():
    """2 x 3 x 2 -> 5 x 4 x 6 (float32), the backward written out as ATen's ``loop3d`` without
    its FMA: per output voxel in row-major order, corners (d0 h0 w0), (d0 h0 w1), ...,
    (d1 h1 w1), each ``((ld * lh) * lw) * g`` added."""
    n_in, n_out = (2, 3, 2), (5, 4, 6)
    g = _rn((1, 1, *n_out), np.float32, 13, spread=4)
    f = np.float32

    def axis(n_i, n_o):  # align_corners=False, no scale: s = in / out
        s, out = f(n_i / n_o), []
        for o in range(n_o):
            src = max(f(f(s * f(f(o) + f(0.5))) - f(0.5)), f(0))
            i0 = min(int(math.floor(src)), n_i - 1)
            l1 = min(max(f(src - f(i0)), f(0)), f(1))
            out.append(((i0, f(f(1) - l1)), (i0 + (i0 < n_i - 1), l1)))
        return out

    ad, ah, aw = (axis(n_in[i], n_out[i]) for i in range(3))
    want = np.zeros(n_in, np.float32)
    for od, oh, ow in np.ndindex(*n_out):
        for a in (0, 1):
            for b in (0, 1):
                for c in (0, 1):
                    (d, ld), (h, lh), (w, lw) = ad[od][a], ah[oh][b], aw[ow][c]
                    want[d, h, w] = f(want[d, h, w] + f(f(f(ld * lh) * lw) * g[0, 0, od, oh,
                                                                               ow]))
    got = reference(TRI_BWD, [g, list(n_out), [1, 1, *n_in], False, None, None, None], {})[0]
    assert _bits(got[0, 0]) == _bits(want)


@pytest.mark.parametrize("factors", [[2.0, 2.0, 2.0], [0.5, 0.5, 0.5], [2.3, 1.7, 1.5]])
@pytest.mark.parametrize("align", [False, True])
def test_the_vec_overload_takes_its_size_and_scales_from_scale_factors(factors, align):
    x = _rn((2, 3, 4, 6, 5), np.float64, 14)
    want = torch.ops.aten.upsample_trilinear3d.vec(torch.from_numpy(x), None, align, factors)
    got = reference(TRI_VEC, [x, None, align, factors], {})[0]
    assert got.shape == tuple(want.shape) == (2, 3, *(int(n * f) for n, f in
                                                      zip((4, 6, 5), factors, strict=True)))
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-12)
    # as F.interpolate names it (keywords), and .vec with an output size
    got_kw = reference(TRI_VEC, [x], {"output_size": None, "align_corners": align,
                                      "scale_factors": factors})[0]
    assert _bits(got_kw) == _bits(got)
    sized = reference(TRI_VEC, [x, [7, 3, 9], align, None], {})[0]
    want = torch.ops.aten.upsample_trilinear3d.vec(torch.from_numpy(x), [7, 3, 9], align, None)
    np.testing.assert_allclose(sized, want.numpy(), rtol=0, atol=1e-12)


def test_an_empty_batch_is_empty_outputs_of_torchs_shapes():
    x = np.zeros((0, 2, 4, 4, 4), np.float32)
    tx = torch.from_numpy(x)
    y, idx = reference(MAX, [x, [2, 2, 2]], {})
    assert y.shape == idx.shape == tuple(torch.ops.aten.max_pool3d_with_indices(tx, [2, 2, 2])[
        0].shape)
    assert reference(MAX_BWD, [y, x, [2, 2, 2], [], [0], [1], False, idx], {})[0].shape \
        == x.shape
    a = reference(AVG, [x, [2, 2, 2]], {})[0]
    assert a.shape == tuple(torch.ops.aten.avg_pool3d(tx, [2, 2, 2]).shape)
    assert reference(AVG_BWD, [a, x, [2, 2, 2], [], [0], False, True, None], {})[0].shape \
        == x.shape
    u = reference(TRI, [x, [5, 5, 5], False], {})[0]
    assert u.shape == (0, 2, 5, 5, 5)
    back = [u, [5, 5, 5], [0, 2, 4, 4, 4], False]
    assert reference(TRI_BWD, back, {})[0].shape == x.shape
    assert upsample_trilinear3d_backward(back, {}, mad=fma)[0].shape == x.shape


# ---- hostile arguments ------------------------------------------------------------------------
_X = np.zeros((1, 2, 5, 5, 5), np.float32)
_G = np.zeros((1, 2, 2, 2, 2), np.float32)
_I = np.zeros((1, 2, 2, 2, 2), np.int64)


@pytest.mark.parametrize("op, args", [
    (MAX, [np.zeros((2, 5, 5), np.float32), [2, 2, 2]]),                       # 3-d input
    (MAX, [np.zeros((1, 0, 5, 5, 5), np.float32), [2, 2, 2]]),                 # no channels
    (MAX, [_X, [2, 2, 2], [0, 2, 2]]),                                         # zero stride
    (MAX, [_X, [2, 2, 2], [2, 2, 2], [0, -1, 0]]),                             # negative pad
    (MAX, [_X, [2, 2, 2], [2, 2, 2], [2, 0, 0]]),                              # pad > k / 2
    (MAX, [_X, [8, 2, 2], [1, 1, 1], [1, 1, 1]]),                    # kernel over the input
    (MAX, [_X, [3, 3, 3], [1, 1, 1], [1, 1, 1], [4, 1, 1]]),      # dilated kernel over it
    (MAX, [_X, [2, 2], [2, 2, 2]]),                                            # 2 ints
    (MAX, [_X, [2.5, 2, 2]]),                                                  # not integers
    (MAX, [_X, [2, 2, 2], [2**40, 1, 1]]),                                     # past C's int
    (MAX, [np.zeros((1, 2, 5, 5, 5), np.bool_), [2, 2, 2]]),                   # bool input
    (MAX_BWD, [np.zeros((1, 2, 3, 2, 2), np.float32), _X, [2, 2, 2], [2, 2, 2], [0, 0, 0],
               [1, 1, 1], False, _I]),                                         # gradient shape
    (MAX_BWD, [_G, _X, [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False,
               np.full((1, 2, 2, 2, 2), 125)]),                                # index outside
    (MAX_BWD, [_G, _X, [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False,
               np.full((1, 2, 2, 2, 2), -3)]),                                 # negative index
    (MAX_BWD, [_G.astype(np.float64), _X, [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False,
               _I]),                                                           # dtypes differ
    (AVG, [_X, [2, 2, 2], [2, 2, 2], [0, 0, 0], False, True, 3]),          # divisor_override
    (AVG, [_X.astype(np.float16), [2, 2, 2]]),                   # not in torch's CPU kernel
    (AVG, [np.zeros((1, 2, 1, 5, 5), np.float32), [2, 2, 2], [1, 1, 1], [1, 1, 1]]),  # small
    (AVG, [_X, [0, 2, 2]]),                                                    # zero kernel
    (AVG, [_X, [3, 3, 3], [1, 1, 1], [1, 2, 1]]),                              # pad > k / 2
    (AVG_BWD, [np.zeros((1, 2, 3, 3, 3), np.float32), _X, [2, 2, 2], [2, 2, 2], [0, 0, 0],
               False, True, None]),                                            # gradient shape
    (TRI, [np.zeros((2, 3, 4, 5), np.float32), [8, 8, 8], False]),             # 4-d input
    (TRI, [_X, [8, 0, 8], False]),                                             # output size 0
    (TRI, [_X, [8, -2, 8], False]),                                            # negative
    (TRI, [_X, [8, 8], False]),                                                # two sizes
    (TRI, [_X.astype(np.int64), [8, 8, 8], False]),                            # integers
    (TRI, [_X, [8, 8, 8], False, math.inf, None, None]),                       # infinite scale
    (TRI, [np.zeros((1, 2, 0, 5, 5), np.float32), [8, 8, 8], False]),          # empty depth
    (TRI_VEC, [_X, [8, 8, 8], False, [2.0, 2.0, 2.0]]),                        # size and scale
    (TRI_VEC, [_X, None, False, [2.0, -2.0, 2.0]]),                            # negative
    (TRI_VEC, [_X, None, False, [2.0, 2.0]]),                                  # two factors
    (TRI_VEC, [_X, None, False, None]),                                        # neither
    (TRI_BWD, [np.zeros((1, 2, 8, 8, 8), np.float32), [8, 8, 8], [1, 2, 5, 5], False]),
    (TRI_BWD, [np.zeros((1, 2, 8, 8, 8), np.float32), [8, 8, 9], [1, 2, 5, 5, 5], False]),
    (TRI_BWD, [np.zeros((1, 3, 8, 8, 8), np.float32), [8, 8, 8], [1, 2, 5, 5, 5], False]),
    (TRI_BWD, [np.zeros((1, 2, 8, 8, 8), np.float32), [8, 8, 8], [1, 2, 5, "x", 5], False]),
    (TRI_BWD, [np.zeros((1, 2, 8, 8, 8), np.float32), [8, 8, 8], [1, 2, 0, 5, 5], False]),
])
def test_hostile_arguments_are_no_reference_naming_the_op(op, args):
    name = op.split(".")[1]
    with pytest.raises(NoReference, match=rf"\.(default|vec): {name}\b"):  # (the form's words)
        reference(op, args, {})


@pytest.mark.parametrize("op, args", [
    (TRI, [_X, [10**5, 10**5, 10**5], False]),
    (TRI_VEC, [_X, None, False, [1e4, 1e4, 1e4]]),
    (TRI_BWD, [np.zeros((1, 2, 8, 8, 8), np.float32), [8, 8, 8], [1, 2, 10**6, 10**6, 10**6],
               False]),
    (MAX, [np.zeros((1, 2, 20, 20, 20), np.float32), [1, 1, 1]]),
    (AVG, [np.zeros((1, 2, 20, 20, 20), np.float32), [1, 1, 1]]),
])
def test_a_size_the_recorded_outputs_cannot_hold_is_refused_before_allocating(op, args):
    """An output of 10^15 elements (or just more than the recorded outputs hold): refused
    against the recorded outputs' size (as the judge holds them) before anything is
    allocated."""
    with recorded_outputs([np.zeros((1, 2, 8, 8, 8), np.float32)]):
        with pytest.raises(NoReference, match="elements"):
            reference(op, args, {})


# ---- a captured training step -----------------------------------------------------------------
def _volume_step():
    torch.manual_seed(0)
    conv = torch.nn.Conv3d(2, 3, 3, padding=1)
    max_pool = torch.nn.MaxPool3d(3, stride=2, padding=1, ceil_mode=True)
    avg_pool = torch.nn.AvgPool3d(2, stride=2, padding=1, count_include_pad=False)
    head = torch.nn.Linear(3 * (4 * 5 * 6 + 4 * 4 * 4), 3)
    opt = torch.optim.SGD([*conv.parameters(), *head.parameters()], lr=0.1)
    g = torch.Generator().manual_seed(1)

    def step() -> float:
        x = torch.randn(4, 2, 6, 6, 6, generator=g)
        h = torch.tanh(conv(x))                                                 # (4, 3, 6, 6, 6)
        m = max_pool(h)                                                         # (4, 3, 4, 4, 4)
        u = F.interpolate(m, size=(4, 5, 6), mode="trilinear", align_corners=False)
        a = avg_pool(h)                                                         # (4, 3, 4, 4, 4)
        z = torch.cat([u.flatten(1), a.flatten(1)], 1)
        loss = F.cross_entropy(head(z), torch.tensor([0, 1, 2, 0]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def test_a_captured_volume_step_has_every_pool3d_and_trilinear_op_judged(tmp_path):
    # (judged_capture asserts the captured losses are an uncaptured run's bits)
    rep = judged_capture(tmp_path / "vol.capture", _volume_step)
    names = ("max_pool3d", "avg_pool3d", "upsample_trilinear3d")
    assert not any(k in n["op"] for n in rep["no_reference"] for k in names), \
        rep["no_reference"]
    ops = {e["op"] for e in rep["ops"] if any(k in e["op"] for k in names)}
    assert {MAX, MAX_BWD, AVG, AVG_BWD, TRI_BWD} <= ops
    assert TRI in ops or TRI_VEC in ops
    # the pools on their recorded inputs are torch's bits (the trilinear steps are not: FMA)
    pools = [o for e in rep["ops"] if "pool3d" in e["op"] for o in e["outputs"]]
    assert pools and all(o["n_diff"] == 0 for o in pools), pools
