"""``same_bytes(a, b)``: are two float arrays the same bits? One ``memcmp`` where it can be.

The bit-equal checks of a parity step (``gpu.parity``'s host-side compare, ``core.provenance``'s
update skip and judge) read ~10 passes of a model's parameters a step (45 MB each on resnet18);
``np.array_equal`` writes a boolean array and reduces it, ``memcmp`` only reads (measured ~25 %
quicker on 45 MB, docs/benchmarks.md). Bit for bit means bytes: a NaN's payload and a zero's
sign count (the NaN policy of ``core.parity`` is not this function's: its callers fall back to
``compare_arrays`` where the bits differ).
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

from tapescope.core import precision

__all__ = ["same_bytes"]


def _float(dt: np.dtype) -> bool:
    """A dtype whose bytes are its bits (no pointers, no padding): numpy's floats, the halves."""
    return dt.kind in "fc" or dt in precision.HALF


def _libc_memcmp() -> object | None:
    try:
        lib = ctypes.cdll.msvcrt if sys.platform == "win32" else ctypes.CDLL(None)
        f = lib.memcmp
    except (OSError, AttributeError):  # no C library to ask: numpy's compare instead
        return None
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    f.restype = ctypes.c_int
    return f


_MEMCMP = _libc_memcmp()


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """True when ``a`` and ``b`` (float arrays, the half types too) have the same dtype, the
    same number of elements and the same bytes in row-major order (shape aside: the caller
    checks it where it matters). Another dtype raises TypeError (an object array's bytes are
    pointers)."""
    a, b = np.asarray(a), np.asarray(b)
    if not (_float(a.dtype) and _float(b.dtype)):
        raise TypeError(f"same_bytes compares float arrays, not {a.dtype} and {b.dtype}")
    if a is b:  # one array (a pair's store hands out the reference's copy for both sides)
        return True
    if a.dtype != b.dtype or a.size != b.size:
        return False
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if _MEMCMP is not None:
        return _MEMCMP(a.ctypes.data, b.ctypes.data, a.nbytes) == 0
    return bool(np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))
