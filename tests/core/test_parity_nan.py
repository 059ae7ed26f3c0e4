"""The NaN policy: two NaNs are equal whatever their sign and payload (IEEE 754 leaves both to
the implementation; x86 and CUDA make different ones), counted apart as `nan_bits_differ`; a NaN
against a number (inf included) still differs, and so do +0 and -0. core.parity and the device
diff kernel (both dtypes) agree on every case."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core.parity import compare_arrays

F64 = {  # bit patterns
    "qnan": 0x7FF8000000000000, "-qnan": 0xFFF8000000000000,
    "qnan_payload": 0x7FF8000000000ABC, "-qnan_payload": 0xFFF80000DEADBEEF,
    "snan": 0x7FF0000000000001, "-snan": 0xFFF0000000000001, "snan_payload": 0x7FF4000000000123,
    "inf": 0x7FF0000000000000, "-inf": 0xFFF0000000000000,
    "+0": 0x0, "-0": 0x8000000000000000, "one": 0x3FF0000000000000,
    "max": 0x7FEFFFFFFFFFFFFF,
}
F32 = {
    "qnan": 0x7FC00000, "-qnan": 0xFFC00000, "qnan_payload": 0x7FC00ABC,
    "-qnan_payload": 0xFFC0BEEF, "snan": 0x7F800001, "-snan": 0xFF800001,
    "snan_payload": 0x7FA00123, "inf": 0x7F800000, "-inf": 0xFF800000, "+0": 0x0,
    "-0": 0x80000000, "one": 0x3F800000, "max": 0x7F7FFFFF,
}
NANS = ["qnan", "-qnan", "qnan_payload", "-qnan_payload", "snan", "-snan", "snan_payload"]

# (reference, other, counted as): "equal" bits, "nan_bits" (both NaN), "nan" (NaN vs number),
# "zero" (+0 vs -0), "num" (other numeric difference)
PAIRS = ([(a, b, "equal" if a == b else "nan_bits") for a in NANS for b in NANS]
         + [(a, b, "nan") for a in ("qnan", "-snan", "qnan_payload") for b in
            ("inf", "-inf", "+0", "one", "max")]
         + [(b, a, "nan") for a in ("-qnan", "snan") for b in ("inf", "-0", "one")]
         + [("+0", "-0", "zero"), ("-0", "+0", "zero"), ("inf", "-inf", "num"),
            ("one", "max", "num"), ("+0", "+0", "equal"), ("inf", "inf", "equal")])


def _arrays(dt, pairs):
    table, itype = (F64, np.uint64) if dt == np.float64 else (F32, np.uint32)
    ref = np.array([table[a] for a, _, _ in pairs], dtype=itype).view(dt)
    oth = np.array([table[b] for _, b, _ in pairs], dtype=itype).view(dt)
    return ref, oth


@pytest.fixture(scope="module")
def ddiff():
    from tapescope.gpu.diff import DeviceDiff
    from tapescope.gpu.host import HostDevice

    try:
        return DeviceDiff(HostDevice("test"))
    except Exception as e:  # no compiler: core.parity is still checked
        pytest.skip(f"host backend unavailable: {e}")


def _device(ddiff, ref, oth):
    dev = ddiff.device
    bufs = []
    for a in (ref, oth):
        b = dev.alloc(a.size, a.dtype)
        b.upload(a)
        bufs.append(b)
    (d,) = ddiff.summarize([tuple(bufs)])
    return d


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_patterns_are_what_they_say(dt):
    ref, _ = _arrays(dt, [(n, n, "") for n in NANS])
    assert np.isnan(ref).all()
    _, oth = _arrays(dt, [("one", n, "") for n in ("inf", "-inf", "+0", "-0", "max")])
    assert not np.isnan(oth).any()


@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("i", range(len(PAIRS)))
def test_each_pair_alone(ddiff, dt, i):
    a, b, kind = PAIRS[i]
    ref, oth = _arrays(dt, [PAIRS[i]])
    d = compare_arrays(ref, oth)
    assert d.nan_bits_differ == (kind == "nan_bits"), (a, b)
    assert d.n_diff == (kind in ("nan", "zero", "num")), (a, b)
    assert d.n_nan == (kind == "nan") and d.n_signed_zero == (kind == "zero"), (a, b)
    assert d.exact == (kind in ("equal", "nan_bits")), (a, b)
    if kind == "nan":
        assert d.max_ulp == 0 and d.first_index == 0
    assert _device(ddiff, ref, oth) == d, (a, b)


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_all_pairs_in_one_tensor(ddiff, dt):
    """Many threads' partials combined: the counts add up, first_index skips NaN-NaN pairs."""
    pairs = PAIRS * 3
    ref, oth = _arrays(dt, pairs)
    d = compare_arrays(ref, oth)
    kinds = [k for _, _, k in pairs]
    assert d.nan_bits_differ == kinds.count("nan_bits")
    assert d.n_diff == sum(kinds.count(k) for k in ("nan", "zero", "num"))
    assert d.n_nan == kinds.count("nan") and d.n_signed_zero == kinds.count("zero")
    first = next(j for j, k in enumerate(kinds) if k in ("nan", "zero", "num"))
    assert d.first_index == first
    assert _device(ddiff, ref, oth) == d


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_a_tensor_that_differs_only_in_nan_bits_is_exact(ddiff, dt):
    """The fused host kernels' sign-flipped NaN: no longer "DIFFERS, ulp 0"."""
    ref = np.array([1.0, np.nan, -2.0, np.nan], dtype=dt)
    oth = ref.copy()
    oth[1] = -oth[1]  # the sign of a NaN
    itype = np.int64 if dt == np.float64 else np.int32
    oth.view(itype)[3] |= 1  # a payload bit
    d = compare_arrays(ref, oth)
    assert d.exact and d.n_diff == 0 and d.first_index is None and d.nan_bits_differ == 2
    assert d.to_json()["nan_bits_differ"] == 2
    assert _device(ddiff, ref, oth) == d
