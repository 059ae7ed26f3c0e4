"""core/explain_onednn.py: oneDNN's float32 gelu_erf, forward and backward, written out,
against PyTorch's own CPU GELU (which hands contiguous float32 to oneDNN) bit for bit: a
dense sweep, every interval's edges, and hostile values (NaN, infinities, signed zeros,
subnormals, the largest floats)."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.core import explain_onednn as D

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() != "AVX512",
    reason="the piecewise polynomial is oneDNN's AVX-512 kernel; other builds take A&S's")


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """bit for bit, any NaN equal to any NaN (the parity NaN policy)"""
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and
                np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


def _values() -> np.ndarray:
    g = np.random.default_rng(0)
    edges = []
    for b in range(0x30000000, 0x41000000, 1 << 21):  # every interval's first floats
        edges += [b - 1, b, b + 1]
    edges = np.array(edges, dtype=np.uint32).view(np.float32)
    hostile = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45, -1e-45, 1e-38,
                        -1.17e-38, 3.4e38, -3.4e38, 5.54, -5.54, 88.7, -88.7, 104.0, -104.0],
                       dtype=np.float32)
    return np.concatenate([(g.standard_normal(20000) * 4).astype(np.float32),
                           g.uniform(-12, 12, 5000).astype(np.float32),
                           edges, -edges, hostile])


def test_gelu_forward_is_torchs_bits():
    x = _values()
    want = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    assert _same(D.gelu_forward(x), want)


def test_gelu_backward_is_torchs_bits():
    x = _values()
    dy = np.random.default_rng(1).standard_normal(x.size).astype(np.float32)
    dy[:7] = [0.0, -0.0, np.inf, np.nan, 1e-45, -3e38, 1.0]
    want = torch.ops.aten.gelu_backward(torch.from_numpy(dy), torch.from_numpy(x)).numpy()
    assert _same(D.gelu_backward(dy, x), want)


def test_a_coefficient_one_ulp_off_is_seen():
    """The sweep would see a table entry off by one ulp (the test can fail)."""
    x = _values()
    want = D.gelu_forward(x)
    saved = D._GELU_POL[1].copy()
    try:
        D._GELU_POL[1][12] = np.nextafter(D._GELU_POL[1][12], np.float32(2))
        assert not _same(D.gelu_forward(x), want)
    finally:
        D._GELU_POL[1][:] = saved


def test_only_float32():
    with pytest.raises(ValueError, match="float32"):
        D.gelu_forward(np.zeros(3))
