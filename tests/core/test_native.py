"""The native reference-order matmul gives the numpy reference's bits, and degrades cleanly."""

import numpy as np
import pytest

from core import native
from core.ops.reference import mm, mm_numpy


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_mm_is_bit_identical_to_numpy_reference(dtype):
    if native.library() is None:
        pytest.skip("no C compiler here: the numpy reference runs instead (covered elsewhere)")
    rng = np.random.default_rng(11)
    for m, k, n in [(1, 1, 1), (4, 3, 5), (7, 9, 13), (64, 100, 33), (5, 0, 3), (0, 4, 2)]:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        # values spanning many binades make every rounding visible
        a *= np.exp2(rng.integers(-20, 20, a.shape)).astype(dtype)
        got = native.mm(a, b)
        assert got.dtype == dtype
        assert got.tobytes() == mm_numpy(a, b).tobytes(), (m, k, n)


def test_special_values_follow_ieee():
    a = np.array([[np.inf, 1.0], [np.nan, -0.0], [-0.0, -0.0]])
    b = np.array([[0.0, 1.0], [1.0, -0.0]])
    assert mm(a, b).tobytes() == mm_numpy(a, b).tobytes()


def test_without_native_the_numpy_path_runs(monkeypatch):
    monkeypatch.setattr(native, "_lib", None)
    a = np.arange(6.0).reshape(2, 3)
    assert native.mm(a, a.T) is None
    assert np.array_equal(mm(a, np.ascontiguousarray(a.T)), mm_numpy(a, np.ascontiguousarray(a.T)))


def test_a_corrupt_cached_library_is_rebuilt_not_trusted(monkeypatch, tmp_path):
    if native.library() is None:
        pytest.skip("no C compiler here")
    monkeypatch.setenv("TAPESCOPE_CACHE_DIR", str(tmp_path))
    first = native._build("gcc")
    first.write_bytes(b"\x7fELF garbage")  # what a crash half-way through a copy leaves
    second = native._build("gcc")
    assert second == first and second.read_bytes()[:4] == b"\x7fELF"
    assert len(second.read_bytes()) > 1000
