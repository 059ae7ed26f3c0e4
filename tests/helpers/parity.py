"""Parity summaries with a known answer: the NaN policy's counts (NaN against a number, NaN
payloads only), a signed zero and a two-ulp difference, in one pair and in a three-node report
(tests/core/test_parity_codec.py, tests/app/test_parity_json_pipe.py)."""

from __future__ import annotations

import numpy as np

from tapescope.core.parity import (
    NodeParity,
    ParityReport,
    compare_arrays,
)


def nan_with_payload(dtype, payload: int):
    u = np.uint64 if np.dtype(dtype) == np.float64 else np.uint32
    b = np.array([np.nan], dtype).view(u)
    b[0] |= u(payload)
    return b.view(dtype)[0]


def planted_pair(dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """ref/other with a known answer: 2 NaN-vs-number, 3 NaN-payload-only, 1 signed zero,
    1 two-ulp difference, 2 equal elements."""
    ref = np.array([1.0, np.nan, 2.0, np.nan, np.nan, np.nan, 0.0, 4.0, 5.0, 6.0], dtype)
    oth = ref.copy()
    oth[0] = np.nan  # NaN against a number, both ways
    ref[2] = np.nan
    oth[2] = 2.0
    for i, p in ((1, 0x11), (3, 0x22), (4, 0x33)):  # both NaN, other payloads
        oth[i] = nan_with_payload(dtype, p)
    oth[6] = -0.0
    oth[7] = np.nextafter(np.nextafter(ref[7], dtype(9)), dtype(9))
    return ref, oth


def nan_report() -> ParityReport:
    d = compare_arrays(*planted_pair())
    only_nan_bits = compare_arrays(np.array([np.nan]), np.array([nan_with_payload(np.float64, 5)]))
    assert only_nan_bits.n_diff == 0 and only_nan_bits.nan_bits_differ == 1
    return ParityReport.of([NodeParity(0, "param", "w", only_nan_bits, only_nan_bits),
                            NodeParity(1, "exp", None, d, d), NodeParity(2, "sum", "l", d, None)])
