"""The device diff kernel gives exactly core.parity's summaries (special values included)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tapescope.core.parity import compare_arrays
from tapescope.gpu.diff import DeviceDiff


@pytest.fixture(scope="module")
def ddiff(host):
    return DeviceDiff(host)


def _upload(dev, a):
    b = dev.alloc(a.size, a.dtype)
    b.upload(a.reshape(-1))
    return b


def _perturbed(rng, dt, n):
    span = 300 if dt == np.float64 else 37
    ref = (rng.standard_normal(n) * 10.0 ** rng.integers(-span, span, n)).astype(dt)
    specials = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, np.finfo(dt).smallest_subnormal,
                         -np.finfo(dt).max], dtype=dt)
    ref[: len(specials)] = specials
    got = ref.copy()
    pick = rng.random(n) < 0.3
    steps = rng.integers(-3, 4, n)
    got[pick] = (got.view(np.int64 if dt == np.float64 else np.int32)[pick] + steps[pick]).astype(
        np.int64 if dt == np.float64 else np.int32).view(dt)
    got[1], got[3] = 0.0, -np.inf  # -0 vs +0, inf vs -inf
    return ref, got


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_device_summaries_equal_core(host, ddiff, dt):
    rng = np.random.default_rng(11)
    cases = [_perturbed(rng, dt, n) for n in (7, 64, 1000, 4099)]
    cases.append((np.ones(5, dt), np.ones(5, dt)))  # exact
    cases.append((np.zeros(0, dt), np.zeros(0, dt)))  # empty
    pairs = [(_upload(host, r), _upload(host, g)) for r, g in cases]
    got = ddiff.summarize(pairs)
    for (r, g), d in zip(cases, got, strict=True):
        assert d == compare_arrays(r, g)
    assert got[0].n_diff > 0 and got[0].n_signed_zero == 1 and got[-2].exact


@settings(max_examples=40, deadline=None)
@given(bits=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40),
       flips=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40))
def test_random_bit_patterns(host, ddiff, bits, flips):
    n = min(len(bits), len(flips))
    ref = np.array(bits[:n], dtype=np.uint64).view(np.float64)
    got = (np.array(bits[:n], dtype=np.uint64) ^ (np.array(flips[:n], dtype=np.uint64)
                                                  & np.uint64(0x800000000000000F))).view(np.float64)
    (d,) = ddiff.summarize([(_upload(host, ref), _upload(host, got))])
    assert d == compare_arrays(ref, got)


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_the_host_compare_skips_only_equal_bits_and_says_what_the_kernel_says(host, ddiff, dt):
    # gpu.parity.compare judges equal bits on the host (no upload, no kernel): the summary it
    # writes for them must be the kernel's for equal bits, NaNs and signed zeros included
    from tapescope.core.parity import TensorDiff
    from tapescope.gpu.parity import _same_bits

    same = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.5, np.finfo(dt).smallest_subnormal],
                    dt)
    assert _same_bits(same, _upload(host, same), host)
    (d,) = ddiff.summarize([(_upload(host, same), _upload(host, same))])
    assert d == TensorDiff(same.size, 0, 0, 0.0, 0.0, None)
    other = same.copy()
    other[0] = -0.0  # +0 vs -0: equal as numbers, not as bits
    assert not _same_bits(same, _upload(host, other), host)
    nan2 = same.copy()
    nan2.view(np.uint64 if dt == np.float64 else np.uint32)[2] ^= 1  # another NaN payload
    assert not _same_bits(same, _upload(host, nan2), host)
    assert host.host_view(_upload(host, same)).flags.writeable is False
