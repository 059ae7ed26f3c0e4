"""core.refmath: the API contract and the IEEE/C99 special values, exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tapescope.core import refmath

INF, NAN = math.inf, math.nan
TINY = 5e-324  # smallest subnormal
SUB = 2.2250738585072014e-308 / 3  # a subnormal
MAXD = 1.7976931348623157e308

# (function, input, expected) -- C99 Annex F, plus the obvious limits of sigmoid/rsqrt.
CASES = [
    ("exp", 0.0, 1.0), ("exp", -0.0, 1.0), ("exp", INF, INF), ("exp", -INF, 0.0),
    ("exp", 710.0, INF), ("exp", -746.0, 0.0), ("exp", -745.1332191019411, TINY),
    ("exp", MAXD, INF), ("exp", SUB, 1.0),
    ("expm1", 0.0, 0.0), ("expm1", -0.0, -0.0), ("expm1", INF, INF), ("expm1", -INF, -1.0),
    ("expm1", -40.0, -1.0), ("expm1", SUB, SUB), ("expm1", -TINY, -TINY),
    ("expm1", 710.0, INF), ("expm1", 1e-20, 1e-20),
    ("log", 0.0, -INF), ("log", -0.0, -INF), ("log", 1.0, 0.0), ("log", -1.0, NAN),
    ("log", INF, INF), ("log", -INF, NAN), ("log", TINY, -744.4400719213812),
    ("log", MAXD, 709.782712893384), ("log", -TINY, NAN),
    ("log1p", 0.0, 0.0), ("log1p", -0.0, -0.0), ("log1p", -1.0, -INF), ("log1p", -1.5, NAN),
    ("log1p", INF, INF), ("log1p", -INF, NAN), ("log1p", SUB, SUB), ("log1p", -TINY, -TINY),
    ("tanh", 0.0, 0.0), ("tanh", -0.0, -0.0), ("tanh", INF, 1.0), ("tanh", -INF, -1.0),
    ("tanh", 30.0, 1.0), ("tanh", -30.0, -1.0), ("tanh", SUB, SUB), ("tanh", -TINY, -TINY),
    ("sigmoid", 0.0, 0.5), ("sigmoid", -0.0, 0.5), ("sigmoid", INF, 1.0),
    ("sigmoid", -INF, 0.0), ("sigmoid", 800.0, 1.0), ("sigmoid", -800.0, 0.0),
    ("sigmoid", -745.1332191019411, TINY), ("sigmoid", 40.0, 1.0),
    ("erf", 0.0, 0.0), ("erf", -0.0, -0.0), ("erf", INF, 1.0), ("erf", -INF, -1.0),
    ("erf", 7.0, 1.0), ("erf", -7.0, -1.0), ("erf", TINY, TINY),
    ("rsqrt", 0.0, INF), ("rsqrt", -0.0, -INF), ("rsqrt", INF, 0.0), ("rsqrt", -1.0, NAN),
    ("rsqrt", -INF, NAN), ("rsqrt", 4.0, 0.5), ("rsqrt", 0.25, 2.0),
]


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int64 if a.dtype == np.float64 else np.int32)


@pytest.mark.parametrize("name,x,want", CASES)
def test_special_values_float64(name: str, x: float, want: float) -> None:
    got = getattr(refmath, name)(np.array([x]))
    if math.isnan(want):
        assert _bits(got)[0] == 0x7FF8000000000000, f"{name}({x!r}) = {got[0]!r}, want NaN"
    else:  # == on bits: the sign of a zero matters
        exp = np.array([want])
        assert _bits(got)[0] == _bits(exp)[0], f"{name}({x!r}) = {got[0]!r}, want {want!r}"


def _is_float32(x: float) -> bool:
    with np.errstate(all="ignore"):
        return math.isnan(x) or float(np.float32(x)) == x


@pytest.mark.parametrize("name,x,want", [c for c in CASES if _is_float32(c[1])])
def test_special_values_float32(name: str, x: float, want: float) -> None:
    x32 = np.array([x], dtype=np.float32)
    with np.errstate(all="ignore"):
        want32 = np.array([want]).astype(np.float32)
    got = getattr(refmath, name)(x32)
    assert got.dtype == np.float32
    if math.isnan(want):
        assert _bits(got)[0] == 0x7FC00000, f"{name}({x!r}) = {got[0]!r}, want NaN"
    elif want in (TINY, SUB, -TINY):  # float32 underflow: checked against float64 below
        assert abs(float(got[0])) <= 1.5e-45
    else:
        assert _bits(got)[0] == _bits(want32)[0], f"{name}({x!r}) = {got[0]!r}, want {want!r}"


def test_every_nan_is_canonical() -> None:
    payloads = np.array([0x7FF0000000000001, 0xFFF8000000000000, 0x7FFFFFFFFFFFFFFF,
                         0xFFF0000000000ABC], dtype=np.uint64).view(np.float64)
    for name in refmath.FUNCTIONS:
        got = getattr(refmath, name)(payloads)
        assert np.all(_bits(got) == 0x7FF8000000000000), f"{name}: NaN bits {_bits(got)}"
        with np.errstate(invalid="ignore"):
            p32 = payloads.astype(np.float32)
        got32 = getattr(refmath, name)(p32)
        assert np.all(_bits(got32) == 0x7FC00000), f"{name} float32: NaN bits {_bits(got32)}"


def test_functions_tuple_matches_module() -> None:
    assert refmath.FUNCTIONS == (
        "exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf", "rsqrt")
    for name in refmath.FUNCTIONS:
        assert callable(getattr(refmath, name)), name


@pytest.mark.parametrize("name", refmath.FUNCTIONS)
def test_new_array_same_shape_and_dtype(name: str) -> None:
    fn = getattr(refmath, name)
    x = np.linspace(0.1, 3.0, 24).reshape(2, 3, 4)
    keep = x.copy()
    for arr in (x, x.astype(np.float32), x[:, ::2, 1:], np.asfortranarray(x)):
        y = fn(arr)
        assert y.dtype == arr.dtype and y.shape == arr.shape
        assert not np.shares_memory(y, arr)
        flat = fn(np.ascontiguousarray(arr).reshape(-1)).reshape(arr.shape)
        assert np.array_equal(y, flat)  # layout cannot change a bit
    assert np.array_equal(x, keep)  # the input is never written


@pytest.mark.parametrize("name", refmath.FUNCTIONS)
def test_scalars_and_empty(name: str) -> None:
    fn = getattr(refmath, name)
    y = fn(0.5)
    assert isinstance(y, np.ndarray) and y.shape == () and y.dtype == np.float64
    assert fn(np.float32(0.5)).dtype == np.float32
    assert y == fn(np.array([0.5]))[0]
    assert fn(np.zeros((0, 3))).shape == (0, 3)


def test_byte_order_and_read_only_inputs() -> None:
    x = np.linspace(-3.0, 3.0, 50)
    want = refmath.tanh(x)
    big = x.astype(">f8")
    assert np.array_equal(refmath.tanh(big), want)
    assert refmath.tanh(big).dtype == np.float64
    assert refmath.tanh(x.astype(">f4")).dtype == np.float32
    ro = x.copy()
    ro.flags.writeable = False
    assert np.array_equal(refmath.tanh(ro), want)


@pytest.mark.parametrize("bad", [np.arange(3), np.ones(2, dtype=np.int16),
                                 np.ones(2, dtype=np.complex128), "1.0", [1, 2]])
def test_bad_dtype_names_function_and_dtype(bad: object) -> None:
    with pytest.raises(TypeError, match=r"refmath\.exp: expected a float64 or float32"):
        refmath.exp(bad)


def test_float32_is_float64_rounded_once() -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(-10, 10, 10_000).astype(np.float32)
    for name in refmath.FUNCTIONS:
        fn = getattr(refmath, name)
        with np.errstate(all="ignore"):
            want = fn(x.astype(np.float64)).astype(np.float32)
        assert np.array_equal(_bits(fn(x)), _bits(want)), name


def test_block_boundaries_do_not_matter() -> None:
    x = np.random.default_rng(4).uniform(-30, 30, 3 * (1 << 14) + 17)
    for name in refmath.FUNCTIONS:
        fn = getattr(refmath, name)
        whole = fn(x)
        parts = np.concatenate([fn(x[:1000]), fn(x[1000:40000]), fn(x[40000:])])
        assert np.array_equal(_bits(whole), _bits(parts)), name


def test_no_warnings_escape(recwarn: pytest.WarningsRecorder) -> None:
    x = np.array([-INF, -1e308, -1.0, -0.0, 0.0, TINY, 1e308, INF, NAN])
    x32 = np.array([-INF, -3e38, -1.0, -0.0, 0.0, 1e-45, 3e38, INF, NAN], dtype=np.float32)
    for name in refmath.FUNCTIONS:
        getattr(refmath, name)(x)
        getattr(refmath, name)(x32)
    assert len(recwarn) == 0, [str(w.message) for w in recwarn]
