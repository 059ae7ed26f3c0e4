"""The judge's one-pass native comparison (core/native/compare.c, ``core.native.float_diff``)
gives ``_float_diff``'s numpy form's numbers bit for bit, on every path the native code has
that this CPU runs (tests/conftest.py: native_isa): hostile values (±0, ±inf, NaNs with
payloads, denormals, the largest distances), every float type the judge compares, strided,
broadcast, reversed and unaligned inputs read in place, sizes off the vector width, blocks of
one sign and mixed, and the NaN policy's hand-over to ``compare_arrays``."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import native, precision
from tapescope.core.capture import judge
from tapescope.core.capture.judge import _float_diff, _float_diff_numpy
from tapescope.core.parity import compare_arrays

# every path the native code has that this CPU runs (tests/conftest.py: native_isa)
every_path = pytest.mark.usefixtures("native_isa")

DTYPES = [np.dtype(np.float64), np.dtype(np.float32), precision.FLOAT16, precision.BFLOAT16]
_U = {8: np.uint64, 4: np.uint32, 2: np.uint16}


def _bits(dt: np.dtype, *vals: int) -> np.ndarray:
    return np.array(vals, dtype=_U[dt.itemsize]).view(dt)


def _specials(dt: np.dtype) -> np.ndarray:
    """±0, ±inf, ±largest, ±smallest denormal and normal, ±1, quiet and signalling NaNs with
    payloads and both signs: every value a pair of them is built from."""
    w = dt.itemsize * 8
    top = 1 << (w - 1)
    ebits = {64: 11, 32: 8, 16: 5}[w] if dt != precision.BFLOAT16 else 8
    mant = w - 1 - ebits
    inf = ((1 << ebits) - 1) << mant
    one = ((1 << (ebits - 1)) - 1) << mant
    pos = [0, 1, 2, (1 << mant) - 1, 1 << mant, one, inf - 1, inf]
    nans = [inf | 1, inf | (1 << (mant - 1)), inf | (1 << (mant - 1)) | 5]
    vals = pos + [p | top for p in pos] + nans + [n | top for n in nans]
    return _bits(dt, *vals)


def _has_python_h() -> bool:
    import os
    import sysconfig

    inc = sysconfig.get_paths().get("include")
    return bool(inc) and os.path.isfile(os.path.join(inc, "Python.h"))


def _same_numbers(ref: np.ndarray, rec: np.ndarray) -> None:
    """The native pass's dicts (full and short) are the numpy form's, and the native code ran
    (no silent fallback where a compiler is here): the CPython extension's entry (fdiff, where
    Python.h is here) and the ctypes one give the same numbers."""
    if native.library() is not None and ref.size:
        assert native.float_diff(ref, rec, judge._BLOCK) is not None
        if _has_python_h():
            assert native.refmath_ext() is not None  # the extension's entry is what ran
        for full in (True, False):
            got = native.float_diff(ref, rec, judge._BLOCK, full)
            assert got == native.float_diff_ctypes(ref, rec, judge._BLOCK, full), full
    for full in (True, False):
        with np.errstate(all="ignore"):  # (a signalling NaN's isnan in compare_arrays)
            want = _float_diff_numpy(ref, rec, full)
            got = _float_diff(ref, rec, full)
        assert got == want, (full, got, want)
    _same_output_numbers(ref, rec)


def _same_output_numbers(ref: np.ndarray, rec: np.ndarray) -> None:
    """The extension's ``outcmp`` (the judge's numbers of one output in one call: ``ref`` as
    the reference's output, ``rec`` the recorded one, ``t`` the chain's) gives the numpy
    form's full numbers of (ref, rec) and short ones of (t, rec), for ``t`` ref itself, rec
    itself, a copy of rec, and ref reversed; where ref is rec, none; None only where fdiff
    answers "nan" for a pair (the NaN policy: the judge's Python path)."""
    ext = native.refmath_ext() if native.library() is not None else None
    if ext is None or not ref.size:
        return
    kinds = native.float_diff_entry()[1]
    for g in (ref, rec):
        for t in (g, rec, rec.copy(), ref[::-1] if ref.ndim == 1 else ref.copy()):
            got = ext.outcmp(g, rec, t, kinds, judge._BLOCK)
            if got is None:
                assert "nan" in (native.float_diff(g, rec, judge._BLOCK),
                                 native.float_diff(t, rec, judge._BLOCK, False))
                continue
            with np.errstate(all="ignore"):
                d = _float_diff_numpy(g, rec) if g is not rec else judge._same(rec.size)
                e = _float_diff_numpy(t, rec, False) if t is not g else d
            want = (rec.size, d["n_diff"], d["first_index"], d["max_ulp"], d["max_abs"],
                    d["n_signed_zero"]) if d["n_diff"] else (rec.size, 0, None, 0, 0.0, 0)
            assert got == want + ((e["n_diff"], e["max_ulp"]) if e["n_diff"] else (0, 0)), (
                got, want, e)


@every_path
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_every_pair_of_special_values(dt, monkeypatch):
    """Each special value against each (every order, every sign mix), in blocks of one pair
    (the NaN rule per block) and in one block."""
    s = _specials(dt)
    ref, rec = np.repeat(s, s.size), np.tile(s, s.size)
    for block in (1, 7, 1 << 17):
        monkeypatch.setattr(judge, "_BLOCK", block)
        _same_numbers(ref, rec)
        with np.errstate(all="ignore"):
            fin = ~(np.isnan(ref.astype(np.float64)) | np.isnan(rec.astype(np.float64)))
        _same_numbers(ref[fin], rec[fin])  # no NaN: the native numbers themselves
        if dt.itemsize >= 4:  # (half types: compare_arrays' float16 abs overflows apart)
            d, f = compare_arrays(ref[fin], rec[fin]), _float_diff(ref[fin], rec[fin])
            assert (f["n_diff"], f["max_ulp"], f["max_abs"], f["first_index"],
                    f["n_signed_zero"]) == (d.n_diff, d.max_ulp, d.max_abs, d.first_index,
                                            d.n_signed_zero)


@every_path
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_the_largest_distances(dt):
    """+0 against -largest, +largest against -largest, +inf against -inf: the ulp distance
    near 2**bits (as uint64 for float64), the float64 |o - r| overflowing to inf."""
    big = np.finfo(np.float64).max if dt.itemsize == 8 else None
    s = _specials(dt)
    largest, inf = s[6], s[7]
    neg = lambda v: (v.view(_U[dt.itemsize]) ^ (1 << (dt.itemsize * 8 - 1))).astype(  # noqa: E731
        _U[dt.itemsize]).view(dt)
    for a, b in ((0, neg(largest)), (largest, neg(largest)), (inf, neg(inf)),
                 (neg(0 * largest), largest)):
        ref = np.array([a] * 5, dtype=dt)
        rec = np.array([b] * 5, dtype=dt)
        _same_numbers(ref, rec)
        _same_numbers(rec, ref)
    if big is not None:
        f = _float_diff(np.array([big]), np.array([-big]))
        assert f["max_abs"] == np.inf and f["max_ulp"] == 2 * 0x7FEFFFFFFFFFFFFF


@every_path
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_random_arrays_in_blocks_of_one_sign_and_mixed(dt, monkeypatch):
    """Sizes on and off every vector width, ulp steps, sign flips (the mixed path), signed
    zeros, infinities, denormals and NaNs placed in some blocks, many blocks."""
    monkeypatch.setattr(judge, "_BLOCK", 509)
    rng = np.random.default_rng(7)
    sizes = list(range(1, 70)) + [127, 128, 129, 1000, 4096, 5003]
    for trial, n in enumerate(sizes):
        a = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3])).astype(dt)
        b = a.copy()
        m = rng.random(n)
        with np.errstate(all="ignore"):
            step = np.nextafter(b.astype(np.float32), np.float32(np.inf)).astype(dt) \
                if dt.itemsize == 2 else np.nextafter(b, dt.type(np.inf))
        b[m < 0.3] = step[m < 0.3]
        if trial % 3 == 0:
            b[m > 0.9] = -b[m > 0.9]
        if trial % 4 == 0:
            a[m < 0.05], b[m < 0.05] = 0.0, -0.0
        if trial % 5 == 0:
            a[: min(3, n)] = np.inf
            b[: min(2, n)] = -np.inf
        if trial % 6 == 0:
            s = _specials(dt)
            a[m > 0.95] = s[1]  # the smallest denormal
        if trial % 7 == 0:
            b[m > 0.97] = np.nan  # NaN in some blocks (with or without a difference)
        if trial % 11 == 0:
            a[-1] = b[-1] = np.nan  # an equal NaN, alone in its block
        _same_numbers(a, b)
        _same_numbers(b, a)


@every_path
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_counts_past_the_types_own_width_in_one_row(dt):
    """compare.c counts in the element type's own width (16 bits for the half types) a chunk at
    a time: a row of 70,000 differing elements, contiguous and strided (one segment of a
    block each), every one of them a signed zero pair or a distance, counts them all."""
    n = 70_000
    x = np.zeros(2 * n, dt)
    y = x.copy()
    y[::2] = -0.0  # every other element: a signed-zero pair (equal, bits differ)
    y[1::2] = 1.0
    for ref, rec in ((x, y), (x[::2].copy(), y[::2].copy()), (x[::2], y[::2]),
                     (x[1::2], y[1::2])):
        got = native.float_diff(ref, rec, 1 << 17)
        if native.library() is not None:  # (_same_numbers: the native code ran)
            n_diff, _, _, _, n_sz = got
            assert n_diff == ref.size and n_sz == int((np.signbit(rec) & (rec == 0)).sum())
        _same_numbers(ref, rec)


@every_path
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_inputs_are_read_in_place_whatever_their_strides(dt, monkeypatch):
    """Transposed, sliced, reversed, broadcast, permuted 3-D, a 0-d array, one row of a
    matrix, an unaligned buffer: the numbers of their C-contiguous copies (the numpy form
    copies them), the native pass reading them as they lie."""
    monkeypatch.setattr(judge, "_BLOCK", 61)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((37, 45)).astype(dt)
    y = x.copy()
    y[rng.random(x.shape) < 0.2] *= -1
    y[5, 7] = 0.0
    x[5, 7] = -0.0
    cases = [(x.T, y.T), (x[::2, 1::3], y[::2, 1::3]), (x[::-1, ::-1], y[::-1]),
             (x.T, np.ascontiguousarray(y.T)), (x[3], y[3]), (x[:, 4], y[:, 4]),
             (np.broadcast_to(x[0], (6, 45)), y[:6]), (x[2, 2:3].reshape(()), y[2, 2])]
    z = rng.standard_normal((4, 5, 6)).astype(dt)
    w = z.copy()
    w.reshape(-1)[::5] = -w.reshape(-1)[::5]
    cases.append((z.transpose(2, 0, 1), w.transpose(2, 0, 1)))
    cases.append((z.transpose(1, 2, 0)[:, ::2], w.transpose(1, 2, 0)[:, ::2]))
    buf = np.zeros(x.nbytes + 1, np.uint8)
    buf[1:] = y.view(np.uint8).reshape(-1)
    odd = np.frombuffer(buf.data, dtype=dt, count=x.size, offset=1).reshape(x.shape)
    assert not odd.flags.aligned
    cases.append((x, odd))
    for ref, rec in cases:
        ref, rec = np.asarray(ref), np.asarray(rec)
        assert ref.shape == rec.shape
        _same_numbers(ref, rec)
        _same_numbers(rec, ref)


@every_path
def test_empty_and_unsupported_inputs_take_the_numpy_form(monkeypatch):
    """An empty array, and no native code at all (no compiler): the numpy form's numbers."""
    e = np.zeros((0, 3), np.float32)
    assert native.float_diff(e, e, 64) is None
    assert _float_diff(e, e) == _float_diff_numpy(e, e)
    a = np.arange(10.0)
    b = a.copy()
    b[4] = -4.0
    want = _float_diff(a, b)
    assert want["n_diff"] == 1 and want["first_index"] == 4
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "_ext", None)  # (it is built only where the library is)
    assert native.float_diff(a, b, 64) is None
    assert _float_diff(a, b) == want == _float_diff_numpy(a, b)


@every_path
def test_the_nan_rule_is_the_numpy_forms_per_block(monkeypatch):
    """A NaN in a block with a difference hands the whole comparison to compare_arrays (its
    full numbers even for the short form); a NaN only in blocks without one does not."""
    monkeypatch.setattr(judge, "_BLOCK", 8)
    a = np.arange(32, dtype=np.float32)
    b = a.copy()
    b[3] = 100.0
    a[20] = b[20] = np.nan  # equal bits, a block without a difference
    assert native.library() is None or native.float_diff(a, b, 8) != "nan"
    _same_numbers(a, b)
    assert _float_diff(a, b, full=False)["max_abs"] is None
    b[5] = np.nan  # now in the differing block
    assert native.library() is None or native.float_diff(a, b, 8) == "nan"
    _same_numbers(a, b)
    assert _float_diff(a, b, full=False)["max_abs"] == 97.0  # compare_arrays' own


@every_path
def test_a_blocks_nan_counts_across_the_rows_of_a_strided_array(monkeypatch):
    """Rows read one by one (every other row of a matrix): an equal NaN in one row and a
    difference in another row of the same block is that block's NaN (compare_arrays' numbers,
    the full ones for the short form too); in different blocks it is not."""
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    y = x.copy()
    x[0, 3] = y[0, 3] = np.nan
    y[2, 5] = -1.0
    for block in (16, 8, 4):
        monkeypatch.setattr(judge, "_BLOCK", block)
        _same_numbers(x[::2], y[::2])
        _same_numbers(x[::2, ::-1], y[::2, ::-1])
    monkeypatch.setattr(judge, "_BLOCK", 16)
    assert _float_diff(x[::2], y[::2], full=False)["max_abs"] == 22.0


def _ext_or_skip():
    if native.library() is None or native.refmath_ext() is None:
        if _has_python_h() and native.library() is not None:
            pytest.fail("the CPython extension does not build here")
        pytest.skip("no native code or no Python.h")
    return native.refmath_ext()


@every_path
def test_the_extensions_entry_refuses_what_it_cannot_read(monkeypatch):
    """fdiff (the CPython extension's entry) takes arrays of one float dtype (its kind's,
    native byte order), one shape, non-empty, and refuses anything else with an error that
    says so, before reading a byte: a kind of a wider type (which would read past the end),
    mixed dtypes, byte-swapped data, other shapes, zero-size, a block < 1, not arrays, too
    many dimensions. float_diff answers None for each (the numpy form runs)."""
    ext = _ext_or_skip()
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = a.copy()
    b[1, 2] = 7.0
    assert ext.fdiff(a, b, 1, 8, True) == native.float_diff_ctypes(a, b, 8) == \
        (1, 5, 0x40E00000 - 0x40A00000, 2.0, 0)
    bad = [
        ((a, b, 0, 8, True), TypeError, "float dtype"),  # float64's kind on float32 data
        ((a, b, 2, 8, True), TypeError, "float dtype"),
        ((a, b, 3, 8, True), TypeError, "float dtype"),
        ((a, b, 4, 8, True), TypeError, "float dtype"),
        ((a, b, -1, 8, True), TypeError, "float dtype"),
        ((a, b.astype(np.float64), 1, 8, True), TypeError, "float dtype"),
        ((a.astype(np.float64), b, 0, 8, True), TypeError, "float dtype"),
        ((a.astype(precision.FLOAT16), b.astype(precision.BFLOAT16), 2, 8, True), TypeError,
         "float dtype"),
        ((a.astype(precision.BFLOAT16), b.astype(precision.FLOAT16), 3, 8, True), TypeError,
         "float dtype"),
        ((a.astype(">f4"), b.astype(">f4"), 1, 8, True), TypeError, "native order"),
        ((a.astype(np.int32), b.astype(np.int32), 1, 8, True), TypeError, "float dtype"),
        ((a, b.T, 1, 8, True), ValueError, "one shape"),
        ((a, b.reshape(-1), 1, 8, True), ValueError, "one shape"),
        ((a[:0], b[:0], 1, 8, True), ValueError, "empty"),
        ((a, b, 1, 0, True), ValueError, "block"),
        ((a, b, 1, -5, True), ValueError, "block"),
        ((a.tolist(), b, 1, 8, True), TypeError, "ndarrays"),
        ((a, memoryview(b), 1, 8, True), TypeError, "ndarrays"),
        ((a, b, 1, 8), TypeError, "5 arguments"),
        ((a, b, "1", 8, True), TypeError, None),
        ((a, b, 1, 2 ** 70, True), OverflowError, None),
    ]
    deep = np.zeros((1,) * 33, np.float32)
    bad.append(((deep, deep, 1, 8, True), ValueError, "32"))
    for args, err, words in bad:
        with pytest.raises(err, match=words):
            ext.fdiff(*args)
    for args, _, _ in bad[5:16] + bad[-1:]:  # (float_diff finds the kind itself)
        assert native.float_diff(*args[:2], args[3]) is None, args
    # the same dtype but a different dtype object (ml_dtypes' bfloat16, byte order stated)
    h = a.astype(precision.BFLOAT16)
    assert ext.fdiff(h, h.astype(h.dtype.newbyteorder("=")), 3, 8, True) == (0, None, 0, 0.0, 0)


@every_path
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_the_extensions_entry_reads_hostile_layouts_in_place(dt):
    """Non-contiguous, negative strides, broadcast (stride 0), unaligned (both arrays), a
    single element in many dimensions, a size of 1 inside a strided array, and an array held
    only by a view: the ctypes entry's numbers, and compare_arrays' n_diff."""
    ext = _ext_or_skip()
    rng = np.random.default_rng(11)
    x = rng.standard_normal((9, 1, 14)).astype(dt)
    y = x.copy()
    y[rng.random(x.shape) < 0.3] *= -1

    def odd(v: np.ndarray) -> np.ndarray:
        buf = np.zeros(v.nbytes + 3, np.uint8)
        buf[3:] = np.ascontiguousarray(v).view(np.uint8).reshape(-1)
        return np.frombuffer(buf.data, dtype=v.dtype, count=v.size, offset=3).reshape(v.shape)

    cases = [(x[:, :, ::3], y[:, :, ::3]), (x[::-2], y[::-2]), (x[::-1, :, ::-1], y),
             (np.broadcast_to(x[:1], x.shape), y), (odd(x), odd(y)), (odd(x)[::2], y[::2]),
             (x[2:3, :, 4:5].reshape((1,) * 6), y[2:3, :, 4:5].reshape((1,) * 6)),
             (x[4:5, 0, 7].reshape(()), y[4:5, 0, 7].reshape(())), (x.transpose(2, 1, 0), y.T)]
    kind = native._FD_KIND[dt]
    for ref, rec in cases:
        for block in (1, 5, 1 << 17):
            for full in (True, False):
                got = ext.fdiff(ref, rec, kind, block, full)
                assert got == native.float_diff_ctypes(ref, rec, block, full), (block, full)
        assert got[0] == compare_arrays(np.ascontiguousarray(ref),
                                        np.ascontiguousarray(rec)).n_diff


_ASAN_CHILD = """
import numpy as np
from tapescope.core import native, precision
assert native.library() is not None and native.sanitize_flags()
assert "libasan" in open("/proc/self/maps").read(), "not the sanitized build"
rng = np.random.default_rng(1)
n = 0
for dt in (np.float64, np.float32, precision.FLOAT16, precision.BFLOAT16):
    x = rng.standard_normal((13, 17)).astype(dt)
    y = x.copy()
    y[::3, ::2] = -y[::3, ::2]
    x[1, 1] = np.nan
    buf = np.zeros(y.nbytes + 1, np.uint8)
    buf[1:] = y.view(np.uint8).reshape(-1)
    odd = np.frombuffer(buf.data, dtype=dt, count=y.size, offset=1).reshape(y.shape)
    for a, b in ((x, y), (x.T, y.T), (x[::-1, ::-2], y[::-1, ::-2]), (x[5], y[5]),
                 (np.broadcast_to(x[0], (4, 17)), y[:4]), (x, odd), (x[:1, :1], y[:1, :1])):
        for block in (1, 5, 1 << 17):
            for full in (True, False):
                got = native.float_diff(a, b, block, full)
                assert got is not None and got == native.float_diff_ctypes(a, b, block, full)
                n += 1
import os, sysconfig
e = native.refmath_ext()
inc = sysconfig.get_paths().get("include") or ""
assert e is not None or not os.path.isfile(os.path.join(inc, "Python.h")), "no extension"
for args in ((x, x, 0, 8, True), (x, x[:1], 1, 8, True), (x[:0], y[:0], 1, 8, True)):
    if e is None:
        break
    try:
        e.fdiff(*args)
    except (TypeError, ValueError):
        pass
    else:
        raise AssertionError(args)
print("compared", n)
"""


def test_the_comparison_runs_clean_under_asan_and_ubsan():
    """compare.c's reads (strided, reversed, broadcast, unaligned, one element; blocks of
    one) under AddressSanitizer and UBSan (tests/core/test_native_sanitize.py's build),
    through the CPython extension's entry and ctypes', and the extension's refusals."""
    from tests.helpers.sanitize import child_runs_clean

    child_runs_clean(_ASAN_CHILD, "compared 168")
