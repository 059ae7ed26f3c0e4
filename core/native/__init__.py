"""Optional native speed-ups for the CPU tape, in the exact reference order.

``gcc -O3 -ffp-contract=off`` builds ``refkernels.c`` once per user into the kernel cache
(``core.cache``: mode 0700, keyed by a hash of source, flags, compiler and CPU, written
atomically, verified by sha256 on every load, a corrupt entry rebuilt). Without gcc the numpy
reference runs instead: the same bits, slower. ``TAPESCOPE_NO_NATIVE=1`` forces numpy.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from core.cache import CacheError, KernelCache, cache_key

# NOTE: -march=native only widens the vectors; -ffp-contract=off keeps every product and add a
# separate rounding, so the bits are those of the numpy reference on every CPU.
FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-std=c99",
         "-march=native"]
_SRC = Path(__file__).with_name("refkernels.c")
_lib: ctypes.CDLL | None | bool = False  # False: not tried yet; None: unavailable


def _compiler_id(cc: str) -> str:
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()[0] if out.stdout else cc


@functools.lru_cache(maxsize=1)
def cpu_id() -> str:
    """The CPU model and its flags: -march=native code is cached per CPU (a shared home)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
        return "".join(lines)
    except OSError:
        import platform

        return platform.machine() + platform.processor()


def _build(cc: str) -> Path:
    """The verified cached shared object, built first when missing or corrupt."""
    key = cache_key(_SRC.read_bytes(), " ".join(FLAGS), _compiler_id(cc), cpu_id())

    def build(out: Path) -> None:
        subprocess.run([cc, *FLAGS, "-o", str(out), str(_SRC)], check=True,
                       capture_output=True, timeout=120)

    path, _ = KernelCache().get_or_build(f"refkernels-{key}", ".so", build)
    return path


def _load() -> ctypes.CDLL | None:
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if os.environ.get("TAPESCOPE_NO_NATIVE") or cc is None:
        return None
    try:
        lib = ctypes.CDLL(str(_build(cc)))
    except (OSError, CacheError, subprocess.SubprocessError):
        return None  # the numpy reference runs instead: the same bits, slower
    p = ctypes.c_void_p
    ll = ctypes.c_longlong
    for name in ("ts_mm_f64", "ts_mm_f32"):
        getattr(lib, name).argtypes = [p, p, p, ll, ll, ll]
        getattr(lib, name).restype = None
    return lib


def library() -> ctypes.CDLL | None:
    """The loaded native library, or None when it cannot be built here."""
    global _lib
    if _lib is False:
        _lib = _load()
    return _lib


def mm(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """2-D reference-order product in C, or None when native code is unavailable."""
    lib = library()
    if lib is None or a.dtype != b.dtype or a.dtype not in (np.float64, np.float32):
        return None
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    m, k = a.shape
    n = b.shape[1]
    c = np.empty((m, n), dtype=a.dtype)
    fn = lib.ts_mm_f64 if a.dtype == np.float64 else lib.ts_mm_f32
    fn(a.ctypes.data, b.ctypes.data, c.ctypes.data, m, k, n)
    return c
