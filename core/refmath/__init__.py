"""refmath: transcendentals that give the same bits on numpy, the host backend and CUDA.

Every function is a fixed sequence of IEEE-exact operations (+ - * /, sqrt, comparisons and bit
manipulation) derived from fdlibm's algorithms, written once here in numpy and once in CUDA C
(``core/refmath/refmath.cuh``); no fused multiply-add anywhere. float32 inputs are computed with
the float64 routine and rounded once to float32 (``(float)ts_exp((double)x)`` in C). float16 and
bfloat16 inputs are widened to float32, computed by the float32 function and rounded to their
type (what a half tape does: compute in float32, round once to storage); that is the float64
result rounded twice, which differs from rounding it once only where the float32 result lands
exactly on a half-way point (docs/refmath.md, "Half precision", counts every such input). See
docs/refmath.md for the algorithms, the accuracy measured and the special values.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from tapescope.core.refmath import _derived, _explog, _log

#: The directory of refmath's C twin (``refmath.cuh``) and the host intrinsics it needs there
#: (``intrinsics_host.h``): read as C text by core.native and by gpu (NVRTC's headers, the host
#: backend's include path), so one source serves every backend.
C_DIR = Path(__file__).resolve().parent
C_HEADERS = ("intrinsics_host.h", "refmath.cuh")

#: The names the tape calls; each exists here and as ``ts_<name>``/``ts_<name>f`` in C.
FUNCTIONS = ("exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf", "rsqrt")

_KERNELS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": _explog.exp64,
    "expm1": _explog.expm1_64,
    "log": _log.log64,
    "log1p": _log.log1p64,
    "tanh": _derived.tanh64,
    "sigmoid": _derived.sigmoid64,
    "erf": _derived.erf64,
    "rsqrt": _derived.rsqrt64,
}

# Work in blocks of 4096 elements: the kernels make 20-60 short-lived temporaries per block, and
# at 32 KiB each glibc always recycles their memory. With bigger blocks (64-256 KiB
# temporaries) a fresh process, whose glibc trim/mmap thresholds are still at their 128 KiB
# defaults, gives freed temporaries back to the OS and page-faults on every new one (measured:
# 2-3x slower, 16 000 faults for one log of 1e6); once glibc has raised its thresholds, 16384
# would be ~30% faster. The block size cannot change a result (no reductions).
_BLOCK = 1 << 12


_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)
_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
# name -> {dtype: the C twin over an array of that dtype (any layout) into a new C-contiguous
# one}; filled on first use; {} when native code is unavailable
_NATIVE: dict[str, dict[np.dtype, Callable[[np.ndarray], np.ndarray]]] | None = None


def _native_loops() -> dict[str, dict[np.dtype, Callable[[np.ndarray], np.ndarray]]]:
    global _NATIVE
    if _NATIVE is None:
        from tapescope.core import native

        loops: dict[str, dict[np.dtype, Any]] = {}
        ext = native.refmath_ext()
        if ext is not None:  # a CPython extension: ~0.15 us a call, its result allocated in C
            loops = {n: {dt: functools.partial(ext.apply, 2 * native.REFMATH.index(n) + k)
                         for k, dt in enumerate((_F64, _F32))} for n in FUNCTIONS}
        elif native.library() is not None:  # ctypes: ~2 us a call
            loops = {n: {dt: _ctypes_loop(native.refmath_fn(n, dt)) for dt in (_F64, _F32)}
                     for n in FUNCTIONS}
        _NATIVE = loops
    return _NATIVE


def _ctypes_loop(fn: Any) -> Callable[[np.ndarray], np.ndarray]:
    from tapescope.core.native import aligned

    def run(x: np.ndarray) -> np.ndarray:
        src = aligned(x)  # (C-contiguous and aligned: the loop reads whole elements)
        y = np.empty(x.shape, x.dtype)
        fn(src.ctypes.data, y.ctypes.data, x.size)
        return y
    return run


def use_native(enabled: bool) -> None:
    """Run the C twin (``enabled``, when it can be built here) or the numpy spelling."""
    global _NATIVE
    _NATIVE = None if enabled else {}


def _apply(name: str, x: Any) -> np.ndarray:
    """Run kernel ``name`` over ``x`` (ndarray or scalar, float64/float32) into a new array.

    The C twin (``core/refmath/refmath.cuh`` built for the host by ``core.native``) runs when it
    is available: the same bits as the numpy spelling (tests/core/test_refmath_native.py), at a
    fraction of the cost; without a compiler the numpy spelling runs.
    """
    arr = x if type(x) is np.ndarray else np.asarray(x)
    dt = arr.dtype
    # NOTE: each native loop takes any layout (a strided x is copied to C order first) and
    # returns its own new array: the extension allocates it in C, cheaper than np.empty here
    if (dt is _F64 or dt is _F32) and _NATIVE:  # the tape's case, first (issue 29: per node)
        return _NATIVE[name][dt](arr)
    if dt in _HALF:
        with np.errstate(over="ignore"):
            return _apply(name, arr.astype(_F32)).astype(dt)
    if dt == _F64 or dt == _F32:  # native byte order only
        loops = _NATIVE if _NATIVE is not None else _native_loops()
        if loops:
            return loops[name][dt](arr)
    return numpy_apply(name, arr)


def numpy_apply(name: str, x: Any) -> np.ndarray:
    """Kernel ``name`` over ``x`` in its numpy spelling: the oracle of the C twin."""
    arr = np.asarray(x)
    if arr.dtype.kind != "f" or arr.dtype.itemsize not in (4, 8):
        raise TypeError(
            f"refmath.{name}: expected a float64 or float32 array, got dtype {arr.dtype}")
    dtype = np.float32 if arr.dtype.itemsize == 4 else np.float64  # results are native-endian
    kernel = _KERNELS[name]
    flat = arr.reshape(-1)  # a view when it can be; the kernels never write their input
    out = np.empty(flat.shape, dtype=dtype)
    with np.errstate(all="ignore"):
        for start in range(0, flat.size, _BLOCK):
            stop = start + _BLOCK
            # float32 widens exactly, block by block (no float64 copy of the whole input); a
            # signalling NaN only raises a flag we ignore
            block = np.ascontiguousarray(flat[start:stop], dtype=np.float64)
            # storing into a float32 `out` is the one rounding float64 -> float32 (to nearest
            # even); the canonical float64 NaN becomes the canonical float32 NaN 0x7fc00000
            out[start:stop] = kernel(block)
    return out.reshape(arr.shape)


def exp(x: Any) -> np.ndarray:
    """e**x elementwise (fdlibm e_exp.c; < 1 ulp)."""
    return _apply("exp", x)


def log(x: Any) -> np.ndarray:
    """Natural logarithm elementwise (fdlibm e_log.c; < 1 ulp)."""
    return _apply("log", x)


def expm1(x: Any) -> np.ndarray:
    """e**x - 1 elementwise, accurate near 0 (fdlibm s_expm1.c; < 1 ulp)."""
    return _apply("expm1", x)


def log1p(x: Any) -> np.ndarray:
    """log(1 + x) elementwise, accurate near 0 (fdlibm s_log1p.c; < 1 ulp)."""
    return _apply("log1p", x)


def tanh(x: Any) -> np.ndarray:
    """Hyperbolic tangent elementwise (our design on fdlibm's exp, docs/refmath.md; <= 2 ulp)."""
    return _apply("tanh", x)


def sigmoid(x: Any) -> np.ndarray:
    """Logistic 1/(1+exp(-x)) elementwise, exp as a double-double (docs/refmath.md; <= 2 ulp)."""
    return _apply("sigmoid", x)


def erf(x: Any) -> np.ndarray:
    """Error function elementwise (fdlibm s_erf.c; <= 2 ulp)."""
    return _apply("erf", x)


def rsqrt(x: Any) -> np.ndarray:
    """1/sqrt(x) elementwise: correctly rounded sqrt, then a correctly rounded division."""
    return _apply("rsqrt", x)


__all__ = ["FUNCTIONS", "erf", "exp", "expm1", "log", "log1p", "numpy_apply", "rsqrt", "sigmoid",
           "tanh", "use_native"]
