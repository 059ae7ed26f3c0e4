"""The native fma step (core/native/refkernels.c ``ts_fma4_f32`` and ``_f64``,
``core.native.fma_into``): ``acc = fma(a, b, acc)`` in place, what --explain's written-out
convolution gradients run a step of their chains with, and what ``core.explain_prims.fma``
runs. Bit for bit numpy's exact emulation (``core.explain_prims.fma_emulated``; in float64
C's fma where the emulation misses: a subnormal result, an overflowing product added to an
infinity) on every path the native code has that this CPU runs, on hostile values (NaN,
infinities, subnormals, products that overflow or round to zero, signed zeros) and layouts
(broadcast, reversed, strided, ranks 1-4, empty); what it declines (nothing written); and the
same calls under AddressSanitizer and UBSan. The whole chain product (``ts_fma_chain_f32``,
``core.native.fma_chain``: --explain's MKL lanes in one call) is the steps' loop bit for bit."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from tapescope.core import native
from tapescope.core.explain_prims import fma_emulated as fma  # (fma() itself runs native)

every_path = pytest.mark.usefixtures("native_isa")
F32 = np.float32


def _hostile(rng: np.random.Generator, shape: tuple[int, ...], dt=F32) -> np.ndarray:
    lo, hi = (-140, 127) if dt == F32 else (-1070, 1023)
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(lo, hi, shape))).astype(dt)
    flat = x.reshape(-1)
    if flat.size >= 8:
        tiny, big = (1e-45, 3.4e38) if dt == F32 else (5e-324, 1.7e308)
        flat[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, big]
    rng.shuffle(flat)
    return x


def _exact64(x: float, y: float, z: float) -> float:
    """fma(x, y, z) in float64 by exact arithmetic, for the two cases numpy's emulation gets
    wrong (measured: 2 of 5,000 hostile triples): a subnormal result (the emulation rounds
    twice) and a finite product past float64's range added to an infinity (the emulation's
    plain x * y + z is inf - inf, NaN; the exact product is finite, the sum the infinity)."""
    if np.isfinite(x) and np.isfinite(y) and np.isinf(z):
        return z
    assert np.isfinite(x) and np.isfinite(y) and np.isfinite(z), (x, y, z)
    exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
    try:
        out = float(exact)  # (Fraction rounds once, correctly, subnormals included)
    except OverflowError:
        return np.copysign(np.inf, float(exact.numerator))
    assert abs(out) < np.finfo(np.float64).tiny, (x, y, z)  # (the emulation's only miss)
    return out


@every_path
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_the_step_is_numpys_exact_fma_bit_for_bit(dt):
    """(float64: C's fma, what core.explain_prims.fma runs on float64 arrays)"""
    if native.library() is None:
        pytest.skip("no native code (no compiler): numpy's emulation is the only one")
    rng = np.random.default_rng(9)
    bits = np.uint32 if dt == F32 else np.uint64
    n = 0
    for shape in ((17,), (3, 33), (2, 3, 19), (2, 3, 4, 21), (0, 5)):
        acc = _hostile(rng, shape, dt)
        for a, b in ((_hostile(rng, shape, dt), _hostile(rng, shape, dt)),
                     (_hostile(rng, shape[-1:], dt), _hostile(rng, shape, dt)[..., ::-1]),
                     (_hostile(rng, (1,) * len(shape), dt),
                      _hostile(rng, shape + (2,), dt)[..., 0])):
            want = fma(a, b, acc)
            got = acc.copy()
            assert native.fma_into(got, a, b)
            same = (got.view(bits) == want.view(bits)) | (np.isnan(got) & np.isnan(want))
            if dt == np.float64:  # where the emulation is not C's fma, C's is the right one
                for i in np.flatnonzero(~same.reshape(-1)):
                    x, y, z = (np.broadcast_to(v, acc.shape).reshape(-1)[i]
                               for v in (a, b, acc))
                    same.reshape(-1)[i] = got.reshape(-1)[i] == _exact64(x, y, z)
            assert same.all(), (shape, got[~same][:4], want[~same][:4])
            n += 1
    assert n == 15


def _declined(fn, out: int, cases) -> None:
    """Each case's ``fn(*case)`` declines (False) and leaves its output ``case[out]`` as it was."""
    for case in cases:
        before = case[out].copy()
        assert not fn(*case)
        assert np.array_equal(case[out], before)


def test_what_it_declines_is_left_as_it_was():
    if native.library() is None:
        pytest.skip("no native code (no compiler)")
    acc = np.ones((4, 5), F32)
    a = np.ones(5, F32)
    _declined(native.fma_into, 0, ((acc.astype(np.float64), a, a), (acc.T, a, a),
                                    (np.ones((2, 2, 2, 2, 2), F32), a[:2], a[:2]),
                                    (np.ones((), F32), a[:1], a[:1])))
    ro = acc.copy()
    ro.setflags(write=False)
    assert not native.fma_into(ro, a, a)
    assert not native.fma_into(acc, a.astype(np.float64), a)  # (another dtype: numpy's)
    assert not native.fma_into(acc.astype(np.float64), a, a)  # (float64 acc, float32 a, b)
    assert not native.fma_into(acc.astype(np.float16), a.astype(np.float16),
                               a.astype(np.float16))
    assert not native.fma_into(acc, np.ones(3, F32), a)  # (not broadcastable)
    assert np.array_equal(acc, np.ones((4, 5), F32))


def _steps(a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """The chain a k at a time by numpy's exact fma (what the loop of steps gives)."""
    for k in range(a.shape[-1]):
        acc = fma(a[..., k:k + 1], b[..., k:k + 1, :], acc)
    return acc


@every_path
def test_the_chain_product_is_the_steps_one_k_at_a_time():
    if native.library() is None:
        pytest.skip("no native code (no compiler)")
    rng = np.random.default_rng(21)
    for lead, blead, m, k, n in (((), (), 5, 9, 7), ((3,), (3,), 4, 17, 6),
                                 ((2, 3), (), 3, 5, 2), ((2,), (2,), 1, 33, 1),
                                 ((), (), 3, 0, 4), ((2,), (2,), 0, 3, 3)):
        a, b = _hostile(rng, lead + (m, k)), _hostile(rng, blead + (k, n))
        start = _hostile(rng, lead + (m, n))  # (a start of its own: acc += a @ b)
        want = _steps(a, b, start.copy())
        got = start.copy()
        assert native.fma_chain(a, b, got)
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), (lead, m, k, n, got[~same][:4], want[~same][:4])


def test_what_the_chain_product_declines_is_left_as_it_was():
    if native.library() is None:
        pytest.skip("no native code (no compiler)")
    a, b = np.ones((2, 3, 4), F32), np.ones((2, 4, 5), F32)
    acc = np.zeros((2, 3, 5), F32)
    wide = np.ones((2, 8, 5), F32)[:, ::2]  # (not contiguous)
    _declined(native.fma_chain, 2, ((a.astype(np.float64), b, acc),
                                     (a, b[:1], acc),  # (b's axes broadcast)
                                     (a, b, acc[:1]), (a, b[:, :3], acc), (a, wide, acc),
                                     (a[0], b[0], acc), (a, b, np.zeros((2, 3, 5), np.float64))))
    ro = acc.copy()
    ro.setflags(write=False)
    assert not native.fma_chain(a, b, ro)
    assert native.fma_chain(a, b, acc) and (acc == 4).all()


_ASAN_CHILD = """
import numpy as np
from tapescope.core import native
assert native.library() is not None and native.sanitize_flags()
assert "libasan" in open("/proc/self/maps").read(), "not the sanitized build"
rng = np.random.default_rng(3)
n = 0
for shape in ((5,), (3, 7), (2, 3, 9), (2, 2, 3, 11), (0, 4)):
    acc = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape + (3,)).astype(np.float32)[..., ::-2][..., 0]
    assert native.fma_into(acc, rng.standard_normal(shape[-1:]).astype(np.float32), b)
    n += 1
acc = rng.standard_normal((3, 5))
assert native.fma_into(acc, rng.standard_normal(5), rng.standard_normal((3, 5)))  # (float64)
n += 1
for lead, bl in (((), ()), ((2, 3), (2, 3)), ((4,), ())):
    a = rng.standard_normal(lead + (5, 7)).astype(np.float32)
    b = rng.standard_normal(bl + (7, 3)).astype(np.float32)
    acc = np.zeros(lead + (5, 3), np.float32)
    assert native.fma_chain(a, b, acc)
    n += 1
print("stepped", n)
"""


def test_the_step_runs_clean_under_asan_and_ubsan():
    from tests.helpers.sanitize import child_runs_clean

    child_runs_clean(_ASAN_CHILD, "stepped 9")
