"""Bit-level helpers shared by the refmath kernels (float64 arrays viewed as int64 words).

fdlibm reasons about a double through its 32-bit high word (sign, exponent, top 20 fraction
bits); these helpers give numpy the same view. Every result is exact: no rounding happens here.
"""

from __future__ import annotations

import numpy as np

#: The one NaN every refmath function returns (positive quiet NaN). Platforms disagree on the
#: NaN an invalid operation makes (x86: 0xfff8..., CUDA: 0x7fff...), so we never let one leak.
NAN_BITS64 = 0x7FF8000000000000
NAN_BITS32 = 0x7FC00000
NAN = float(np.array(NAN_BITS64, dtype=np.int64).view(np.float64))
INF = float("inf")

_LOW_MASK = 0xFFFFFFFF


def hi_word(x: np.ndarray) -> np.ndarray:
    """Signed high 32-bit word of each float64 (fdlibm's __HI), as int64."""
    return x.view(np.int64) >> 32


def with_hi_word(x: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``x`` with its high word replaced by ``hi`` (low word kept), as float64."""
    bits = (x.view(np.int64) & _LOW_MASK) | (np.asarray(hi, dtype=np.int64) << 32)
    return bits.view(np.float64)


def from_hi_word(hi: np.ndarray) -> np.ndarray:
    """The double whose high word is ``hi`` and low word is 0."""
    return (np.asarray(hi, dtype=np.int64) << 32).view(np.float64)


def low_cleared(x: np.ndarray) -> np.ndarray:
    """``x`` with its low 32 bits cleared (fdlibm's SET_LOW_WORD(z, 0))."""
    return (x.view(np.int64) & ~np.int64(_LOW_MASK)).view(np.float64)


def add_exponent(y: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``y * 2**k`` by adding ``k`` to the exponent field; exact while the result stays normal."""
    return (y.view(np.int64) + (np.asarray(k, dtype=np.int64) << 52)).view(np.float64)
