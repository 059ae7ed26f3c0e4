"""Optional native speed-ups for the CPU tape, in the exact reference order.

``gcc -O3 -ffp-contract=off`` builds ``refkernels.c`` once per user into a cache directory
(mode 0700, keyed by a hash of source, flags and compiler version; written atomically; a file
that fails to load is rebuilt). Without gcc the numpy reference runs instead: the same bits,
slower. ``TAPESCOPE_NO_NATIVE=1`` forces numpy.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

# NOTE: -march=native only widens the vectors; -ffp-contract=off keeps every product and add a
# separate rounding, so the bits are those of the numpy reference on every CPU.
FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-std=c99",
         "-march=native"]
_SRC = Path(__file__).with_name("refkernels.c")
_lib: ctypes.CDLL | None | bool = False  # False: not tried yet; None: unavailable


def cache_root() -> Path:
    """Per-user cache directory for compiled native code."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tapescope" / "native"


def _compiler_id(cc: str) -> str:
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()[0] if out.stdout else cc


def _cpu_id() -> str:
    # -march=native code must never be loaded on another CPU model (a shared home directory)
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
        return "".join(lines)
    except OSError:
        import platform

        return platform.machine() + platform.processor()


def _build(cc: str) -> Path:
    src = _SRC.read_bytes()
    ident = " ".join(FLAGS) + _compiler_id(cc) + _cpu_id()
    key = hashlib.sha256(src + ident.encode()).hexdigest()
    root = cache_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    target = root / f"refkernels-{key[:24]}.so"
    if target.exists():
        return target
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=root)
    os.close(fd)
    try:
        subprocess.run([cc, *FLAGS, "-o", tmp, str(_SRC)], check=True, capture_output=True,
                       timeout=120)
        os.replace(tmp, target)  # atomic: a concurrent builder never sees half a file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _load() -> ctypes.CDLL | None:
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if os.environ.get("TAPESCOPE_NO_NATIVE") or cc is None:
        return None
    for attempt in range(2):
        try:
            path = _build(cc)
            lib = ctypes.CDLL(str(path))
        except OSError:
            if attempt == 0:  # a corrupt cache entry: drop it and rebuild once
                for p in cache_root().glob("refkernels-*.so"):
                    p.unlink(missing_ok=True)
                continue
            return None
        except (subprocess.SubprocessError, FileNotFoundError):
            return None
        p = ctypes.c_void_p
        ll = ctypes.c_longlong
        for name in ("ts_mm_f64", "ts_mm_f32"):
            getattr(lib, name).argtypes = [p, p, p, ll, ll, ll]
            getattr(lib, name).restype = None
        return lib
    return None


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
