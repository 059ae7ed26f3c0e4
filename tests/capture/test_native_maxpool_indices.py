"""The judge's max_pool2d_with_indices and its backward in C (core/native/refkernels.c
``ts_maxpool2d_idx``, ``ts_maxpool2d_idx_bwd``; core/capture/aten_ref_conv.py's forms call them
first): bit for bit and index for index the numpy statement of PyTorch's rule they stand in for
(the first maximum of a window's row-major taps, padding -inf, the first NaN, -0.0 and +0.0
equal; the gradient added in the outputs' order from +0.0), on every geometry of a grid (ties,
NaNs, signed zeros, padding, dilation, ceil_mode, strides past the window) and on every path
the native code has that this CPU runs; an index outside its plane (a hostile capture) leaves
the C with nothing written past the gradient and the numpy form's error; and the same calls
under AddressSanitizer and UBSan."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tapescope.core import native
from tapescope.core.capture.aten_ref import NoReference, reference

every_path = pytest.mark.usefixtures("native_isa")
FWD, BWD = "aten.max_pool2d_with_indices.default", "aten.max_pool2d_with_indices_backward.default"


def _numpy_only(monkeypatch) -> None:
    monkeypatch.setattr(native, "maxpool2d_with_indices", lambda *a, **k: None)
    monkeypatch.setattr(native, "maxpool2d_with_indices_backward", lambda *a, **k: None)


def _cases():
    """(x, the forward's args, the gradient) per geometry of the grid, drawn afresh each call
    (one seed): the same cases for the C and for numpy."""
    rng = np.random.default_rng(3)
    for dt, (h, w) in itertools.product((np.float32, np.float64), ((7, 9), (8, 8), (5, 3))):
        for k, s, p, d, cm in itertools.product(((2, 2), (3, 3), (1, 2), (3, 1)),
                                                ((1, 1), (2, 2), (3, 2)),
                                                ((0, 0), (1, 1), (1, 0)), ((1, 1), (2, 1)),
                                                (False, True)):
            if p[0] * 2 > k[0] or p[1] * 2 > k[1] or (k[0] - 1) * d[0] + 1 > h + 2 * p[0]:
                continue
            x = rng.integers(-3, 3, (2, 3, h, w)).astype(dt)  # (ties in most windows)
            x.reshape(-1)[rng.integers(0, x.size, 4)] = np.nan
            x.reshape(-1)[rng.integers(0, x.size, 6)] = -0.0
            g = rng.standard_normal((2, 3, 16, 16)).astype(dt)  # (cut to the output's shape)
            g.reshape(-1)[::5] = -0.0
            yield [x, list(k), list(s), list(p), list(d), cm], g


def _run(args: list, g: np.ndarray) -> tuple:
    y, idx = reference(FWD, args, {})
    gx = reference(BWD, [np.ascontiguousarray(g[:, :, :y.shape[2], :y.shape[3]]), *args, idx],
                   {})[0]
    return y, idx, gx


@every_path
def test_the_c_pool_is_the_numpy_rule_bit_for_bit(monkeypatch):
    if native.library() is None:
        pytest.skip("no native code (no compiler): the numpy form is the only one")
    got = [_run(args, g) for args, g in _cases()]
    assert len(got) > 300
    _numpy_only(monkeypatch)
    for (args, g), (y, idx, gx) in zip(_cases(), got, strict=True):
        y2, idx2, gx2 = _run(args, g)
        assert y.dtype == y2.dtype and y.tobytes() == y2.tobytes(), args[1:]
        assert idx.dtype == idx2.dtype == np.int64 and np.array_equal(idx, idx2), args[1:]
        assert gx.dtype == gx2.dtype and gx.tobytes() == gx2.tobytes(), args[1:]


def test_a_pool_matches_torchs_own_values_and_indices():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 4, 9, 11, generator=torch.Generator().manual_seed(0))
    x[0, 0, 0, :2] = 1.0  # a tie: the first
    for k, s, p, d, cm in (((2, 2), (2, 2), (0, 0), (1, 1), False),
                           ((3, 3), (2, 2), (1, 1), (1, 1), True),
                           ((3, 2), (1, 2), (1, 1), (2, 1), False)):
        y, idx = torch.nn.functional.max_pool2d(x, k, s, p, d, cm, return_indices=True)
        r = reference(FWD, [x.numpy(), list(k), list(s), list(p), list(d), cm], {})
        assert r[0].tobytes() == y.numpy().tobytes() and np.array_equal(r[1], idx.numpy())


def test_an_index_outside_its_plane_is_refused_with_nothing_written_past():
    """A capture's recorded indices are the file's data: one outside its plane makes the C
    decline (it never writes outside the gradient it allocated) and the numpy form raise."""
    if native.library() is None:
        pytest.skip("no native code (no compiler)")
    x = np.zeros((1, 2, 4, 4), np.float32)
    g = np.ones((1, 2, 2, 2), np.float32)
    for bad in (16, -1, 1 << 40):
        idx = np.zeros((1, 2, 2, 2), np.int64)
        idx[0, 1, 1, 1] = bad
        assert native.maxpool2d_with_indices_backward(g, idx, x.shape) is None
        with pytest.raises(NoReference, match="outside its plane"):
            reference(BWD, [g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, idx], {})
    # shapes that do not fit: declined, nothing read
    idx = np.zeros((1, 2, 2, 2), np.int64)
    assert native.maxpool2d_with_indices_backward(g, idx.astype(np.int32), x.shape) is None
    assert native.maxpool2d_with_indices_backward(g, idx[:, :1], x.shape) is None
    assert native.maxpool2d_with_indices_backward(g, idx, (1, 3, 4, 4)) is None
    assert native.maxpool2d_with_indices(x.astype(np.float16), (2, 2), (2, 2), (0, 0),
                                         (1, 1), (2, 2)) is None
    # a geometry geom_ok refuses (a 2**40 stride): declined, not run
    assert native.maxpool2d_with_indices(x, (2, 2), (1 << 40, 1), (0, 0), (1, 1),
                                         (1, 3)) is None


_ASAN_CHILD = """
import numpy as np
from tapescope.core import native
assert native.library() is not None and native.sanitize_flags()
assert "libasan" in open("/proc/self/maps").read(), "not the sanitized build"
rng = np.random.default_rng(5)
n = 0
for dt in (np.float32, np.float64):
    for (h, w), k, s, p, d, cm in (((9, 7), (3, 3), (2, 2), (1, 1), (1, 1), True),
                                   ((5, 5), (2, 3), (3, 1), (1, 1), (2, 1), True),
                                   ((4, 6), (1, 1), (1, 1), (0, 0), (1, 1), False)):
        x = rng.standard_normal((2, 3, h, w)).astype(dt)
        x = x[:, :, ::-1]  # (strided: copied aligned first)
        from tapescope.core.ops.nn import out_size
        outs = [out_size(x.shape[2 + i], k[i], s[i], d[i], p[i], p[i], int(cm)) for i in range(2)]
        y, idx = native.maxpool2d_with_indices(x, k, s, p, d, outs)
        g = rng.standard_normal(y.shape).astype(dt)
        gx = native.maxpool2d_with_indices_backward(g, idx, x.shape)
        assert gx is not None and gx.shape == x.shape
        bad = idx.copy()
        bad.reshape(-1)[-1] = h * w
        assert native.maxpool2d_with_indices_backward(g, bad, x.shape) is None
        n += 1
# a geometry whose last tap lies 2**31 elements or more past its window's origin: the
# float32 entry declines before it reads a byte (the buffer here holds 16 elements)
lib, p = native.library(), np.zeros(16, np.float32)
o, i = np.zeros(16, np.float32), np.zeros(16, np.int64)
assert lib.ts_maxpool2d_idx_f32(p.ctypes.data, o.ctypes.data, i.ctypes.data, 1, 4097, 1 << 20,
                                2, 1, 1, 1, 1, 1, 0, 0, 4096, 1) == 0
print("pooled", n)
"""


def test_the_pools_run_clean_under_asan_and_ubsan():
    from tests.helpers.sanitize import child_runs_clean

    child_runs_clean(_ASAN_CHILD, "pooled 6")
