"""The tape's refmath runs through the C twin (core.native); the numpy spelling is its oracle.

core.refmath calls core/refmath/refmath.cuh compiled for the host when gcc is here. These tests
hold that path to the numpy spelling (core.refmath.numpy_apply) bit for bit, NaN bits included,
on >= 1e6 inputs per function and dtype spanning the domain (special values, subnormals, branch
boundaries, random bit patterns), on every memory layout the tape hands it, and check that a
machine without a compiler runs the numpy spelling.
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import native, refmath
from tapescope.core.refmath._domain import domain_sample

# every path the native code has that this CPU runs (tests/conftest.py: native_isa)
pytestmark = pytest.mark.usefixtures("native_isa")

N = 1_000_000


def _itype(dtype):
    return np.int64 if np.dtype(dtype) == np.float64 else np.int32


@pytest.fixture
def need_native():
    if native.library() is None:
        pytest.skip("no C compiler here: refmath runs its numpy spelling (tested elsewhere)")


def _report(x, got, want):
    it = _itype(x.dtype)
    bad = np.flatnonzero(got.view(it) != want.view(it))
    rows = [f"x={x[i]!r} C={got[i]!r} numpy={want[i]!r}" for i in bad[:5]]
    return f"{bad.size} of {x.size} differ; first: " + "; ".join(rows)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", refmath.FUNCTIONS)
def test_c_path_equals_numpy_oracle(need_native, name, dtype):
    x = domain_sample(name, dtype, N, seed=100 + refmath.FUNCTIONS.index(name))
    assert x.size >= N
    got = getattr(refmath, name)(x)  # the C twin (dispatch)
    want = refmath.numpy_apply(name, x)  # the numpy spelling
    assert got.dtype == want.dtype == x.dtype and got.shape == x.shape
    it = _itype(dtype)
    assert np.array_equal(got.view(it), want.view(it)), _report(x, got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_layouts_scalars_and_read_only_inputs(need_native, dtype):
    rng = np.random.default_rng(3)
    base = rng.uniform(-30, 30, (6, 8)).astype(dtype)
    base.flags.writeable = False
    keep = base.copy()
    for x in (base, base.T, base[:, ::3], base[::2], base.reshape(-1)[5:6].reshape(()),
              np.empty((0, 3), dtype)):
        for name in refmath.FUNCTIONS:
            got = getattr(refmath, name)(x)
            want = refmath.numpy_apply(name, x)
            assert got.shape == x.shape and got.dtype == x.dtype
            assert got.tobytes() == want.tobytes(), (name, x.shape, x.strides)
            assert got.flags.c_contiguous and got.flags.writeable
    assert base.tobytes() == keep.tobytes()  # the input is never written
    assert refmath.exp(dtype(1.0)).shape == ()


def test_other_dtypes_still_raise_and_byte_swapped_input_works():
    with pytest.raises(TypeError, match="refmath.exp: expected a float64 or float32"):
        refmath.exp(np.arange(3))
    x = np.linspace(-3, 3, 7).astype(">f8")
    assert refmath.tanh(x).tobytes() == refmath.numpy_apply("tanh", x.astype("<f8")).tobytes()


def test_without_a_compiler_the_numpy_spelling_runs(monkeypatch):
    x = domain_sample("tanh", np.float64, 2000, seed=5)
    want = refmath.numpy_apply("tanh", x)
    monkeypatch.setattr(native, "_lib", None)  # as on a machine without gcc
    monkeypatch.setattr(native, "_ext", None)
    refmath.use_native(True)  # re-probe: finds no library
    try:
        assert refmath._native_loops() == {}
        assert refmath.tanh(x).tobytes() == want.tobytes()
    finally:
        monkeypatch.undo()
        refmath.use_native(True)


def test_the_ctypes_path_equals_the_extension_path(need_native, monkeypatch):
    """Where Python.h is missing refmath calls the same C loops through ctypes."""
    xs = [domain_sample(n, dt, 20_000, seed=9) for n in refmath.FUNCTIONS
          for dt in (np.float64, np.float32)]
    names = [n for n in refmath.FUNCTIONS for _ in (0, 1)]
    monkeypatch.setattr(native, "_ext", None)  # no CPython extension
    refmath.use_native(True)
    try:
        for name, x in zip(names, xs, strict=True):
            got = getattr(refmath, name)(x)
            assert got.tobytes() == refmath.numpy_apply(name, x).tobytes(), (name, x.dtype)
    finally:
        monkeypatch.undo()
        refmath.use_native(True)
    assert refmath._native_loops()  # back on the extension (or ctypes) path


def test_the_tape_runs_refmath_ops_through_either_path_with_the_same_bits():
    from tapescope.core import Tape, ops

    def run():
        t = Tape()
        x = t.param(np.linspace(-4, 4, 33))
        y = ops.sum(ops.tanh(ops.sigmoid(x) * ops.exp(x * 0.5) + ops.log(ops.exp(x))))
        t.backward(y)
        return t.value(y).tobytes(), t.grad(x).tobytes()

    fast = run()
    refmath.use_native(False)
    try:
        slow = run()
    finally:
        refmath.use_native(True)
    assert fast == slow


def test_sigmoid_double_rare_lanes_at_block_edges(need_native):
    """The double sigmoid loop leaves |x| > 708 and NaN to ts_sigmoid, block by block (512)."""
    rng = np.random.default_rng(17)
    edge = np.array([708.0, -708.0, 745.2, -745.2, 1e308, -1e308, np.inf, -np.inf, np.nan,
                     5e-324, -5e-324, 0.0, -0.0])
    with np.errstate(over="ignore"):
        near = np.concatenate([edge] + [np.nextafter(edge, d) for d in (np.inf, -np.inf)])
    for n in (1, 511, 512, 513, 1025, 3000):
        x = rng.uniform(-40, 40, n)
        for i in {0, 510, 511, 512, 513, 1024, n - 1}:
            if i < n:
                x[i] = near[rng.integers(near.size)]
        got, want = refmath.sigmoid(x), refmath.numpy_apply("sigmoid", x)
        assert got.tobytes() == want.tobytes(), _report(x, got, want)
    x = np.concatenate([near, rng.uniform(-800, 800, 100_000)])
    got, want = refmath.sigmoid(x), refmath.numpy_apply("sigmoid", x)
    assert got.tobytes() == want.tobytes(), _report(x, got, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_expm1_and_log1p_branch_cases(need_native, dtype):
    """The branch-free twins select among every case ts_expm1 and ts_log1p branch on: x near
    k ln2 for each k (expm1), and 1 + x near each power of two, f ~ 0 (log1p)."""
    rng = np.random.default_rng(23)
    k = np.arange(-60, 1030, dtype=np.float64)
    near_k = (k[:, None] * np.log(2.0) + rng.uniform(-0.5, 0.5, (k.size, 40))).ravel()
    p = np.exp2(np.arange(-3, 70, dtype=np.float64))
    tiny = np.concatenate([np.zeros(1), np.exp2(-np.arange(20.0, 60.0))])
    near_p = (p[:, None] * (1 + np.concatenate([tiny, -tiny, rng.uniform(-1e-5, 1e-5, 200)]))
              - 1).ravel()
    with np.errstate(over="ignore"):
        for name, x in (("expm1", near_k), ("log1p", near_p)):
            x = x.astype(dtype)
            x = np.concatenate([x, np.nextafter(x, np.inf), np.nextafter(x, -np.inf)])
            got, want = getattr(refmath, name)(x), refmath.numpy_apply(name, x)
            assert got.tobytes() == want.tobytes(), (name, _report(x, got, want))
