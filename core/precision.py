"""The tape's floating-point types: float64, float32 and the half types float16 and bfloat16.

A half-precision episode *stores* every value, gradient and optimizer moment in its half type
and *computes* in float32 (docs/reference-order.md, "Half precision"): an op widens its inputs
to float32 (exact), runs the float32 reference, and rounds its result once to the storage type.
float16 is numpy's own; bfloat16 is ``ml_dtypes.bfloat16`` (numpy has none).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["BFLOAT16", "FLOAT16", "HALF", "NAMES", "ONE", "ZERO", "bits_types", "compute_dtype",
           "dtype_of", "finfo", "from_float64", "frozen", "is_float", "is_half", "widen"]

FLOAT16 = np.dtype(np.float16)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
HALF = (FLOAT16, BFLOAT16)

#: Every tape dtype by name, widest first (the CLI's ``--dtype`` choices).
NAMES = ("float64", "float32", "float16", "bfloat16")
_BY_NAME = {"float64": F64, "float32": F32, "float16": FLOAT16, "bfloat16": BFLOAT16}

# (signed, unsigned) integer types of the same width: bit views, ordered-integer ulp distance
_BITS = {F64: (np.int64, np.uint64), F32: (np.int32, np.uint32),
         FLOAT16: (np.int16, np.uint16), BFLOAT16: (np.int16, np.uint16)}


def frozen(v: float, dt: Any) -> np.ndarray:
    """``v`` rounded once to ``dt`` as a read-only 0-d array: a ufunc operand numpy does not
    convert again on every call, as it does a numpy scalar (~1-4 us of a small op, issue 29).
    The same value, dtype and loop as ``dt.type(v)``: the same bits."""
    a = np.array(v, dt)
    a.flags.writeable = False
    return a


#: +0.0 and 1.0 of float64 and float32 as such operands (the tape's elementwise constants and
#: the backward sweep's starting +0.0; the half types keep their numpy scalars)
ZERO = {F64: frozen(0.0, F64), F32: frozen(0.0, F32)}
ONE = {F64: frozen(1.0, F64), F32: frozen(1.0, F32)}


def finfo(dt: Any) -> Any:
    """Machine limits of a float dtype, the half types included: ``np.finfo`` refuses bfloat16
    before ml_dtypes 0.7 ("not inexact"); ``ml_dtypes.finfo`` answers for every float type."""
    return ml_dtypes.finfo(np.dtype(dt))


def dtype_of(x: Any) -> np.dtype:
    """The tape dtype named or given by ``x`` ("bfloat16" works without importing ml_dtypes);
    ValueError for anything else."""
    if isinstance(x, str):
        if x not in _BY_NAME:
            raise ValueError(f"dtype {x!r} is not one of {', '.join(NAMES)}")
        return _BY_NAME[x]
    dt = np.dtype(x)
    if dt not in _BITS:
        raise ValueError(f"dtype {dt} is not one of {', '.join(NAMES)}")
    return dt


def is_half(dt: Any) -> bool:
    """float16 or bfloat16."""
    return np.dtype(dt) in HALF


def is_float(dt: Any) -> bool:
    """A floating type, bfloat16 included (numpy files ml_dtypes' bfloat16 under kind "V", so
    ``dtype.kind == "f"`` alone takes a bfloat16 model's weights and inputs for something
    else)."""
    d = np.dtype(dt)
    return d.kind == "f" or d == BFLOAT16


def compute_dtype(dt: Any) -> np.dtype:
    """The type a tape of dtype ``dt`` computes and accumulates in: float32 for the half types,
    the dtype itself otherwise."""
    d = np.dtype(dt)
    return F32 if d in HALF else d


def bits_types(dt: Any) -> tuple[type, type]:
    """(signed, unsigned) integer types as wide as ``dt``; KeyError for a non-tape dtype."""
    return _BITS[np.dtype(dt)]


def widen(a: np.ndarray) -> np.ndarray:
    """A half array widened (exactly) to float32; any other array unchanged."""
    return a.astype(F32) if a.dtype in HALF else a


def from_float64(x: Any, dt: Any) -> np.ndarray:
    """float64 values rounded ONCE, to nearest even, to ``dt`` (no double rounding).

    numpy and ml_dtypes round float64 -> float16 / bfloat16 through float32 in some versions
    (two roundings: a float64 just above a half-way point can land on it in float32 and then
    round to even the wrong way). Here float64 -> float32 rounds *to odd* (truncate, then set
    the last bit when inexact), which keeps the sticky information; float32 has at least two
    more bits than either half type, so the final float32 -> half rounding to nearest even is
    the correctly rounded float64 -> half result. Used by tests as the oracle of refmath's half
    functions and of every "rounded once" in docs/reference-order.md.
    """
    d = np.dtype(dt)
    x = np.asarray(x, dtype=F64)
    if d not in HALF:
        return x.astype(d)
    with np.errstate(all="ignore"):
        r = x.astype(F32)
        back = r.astype(F64)
        finite = np.isfinite(x) & np.isfinite(r)
        # rounded away from zero: step one float32 toward zero (truncation)
        away = finite & (np.abs(back) > np.abs(x))
        r = np.where(away, np.nextafter(r, np.float32(0)), r)
        inexact = finite & (r.astype(F64) != x)
        bits = r.view(np.uint32) | inexact.astype(np.uint32)
        # float32 overflow of a finite float64 (beyond float32's max): inf is also the half
        # result, since both half types' max is far below float32's
        out = bits.view(F32)
    return out.astype(d)
