"""Optional native speed-ups for the CPU tape, in the exact reference order.

gcc builds, once per user, into the kernel cache (``core.cache``: mode 0700, keyed by a hash of
sources, headers, flags, compiler and CPU, written atomically, verified by sha256 on every load,
a corrupt entry rebuilt):

* ``refkernels.c`` (ctypes): the reference-order matmul (register tiles, threads over blocks of
  whole output rows), its batched form, im2col, the conv product without the im2col matrix
  (``conv2d``: panels packed from the image, or read from its padded phase planes), a direct
  conv for one-output-channel groups,
  serial column sums (``serial_sum``) and Adam's update -- each the same roundings in the same
  order as its numpy spelling in core, which the tests hold it to bit for bit;
* ``compare.c`` (ctypes): the capture judge's comparison of two float arrays in one pass
  (``float_diff``), the numbers of its numpy form in ``core.capture.judge``;
* ``refmath_host.c`` (ctypes) and ``refmath_py.c`` (a CPython extension, where ``Python.h`` is
  installed): refmath's C twin ``core/refmath/refmath.cuh`` itself, as the host backend compiles
  it, with the branch-free loops of ``refmath_simd.h``.

Without gcc the numpy reference runs instead: the same bits, slower. ``TAPESCOPE_NO_NATIVE=1``
forces numpy; ``TAPESCOPE_THREADS=N`` (or :func:`set_threads`) sets how many threads a product
may use (the bits never depend on it).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tapescope.core import precision
from tapescope.core.cache import CacheError, KernelCache, cache_key
from tapescope.core.native import isa
from tapescope.core.progress import progress

# NOTE: -march=native only widens the vectors; -ffp-contract=off keeps every product and add a
# separate rounding, so the bits are those of the numpy reference on every CPU. The machine code
# is audited for FMA instructions in tests/core/test_native.py (gcc's vectorizer once formed one
# from a mul/add pair despite -ffp-contract=off, see gpu/host_compiler.py).
# -fno-trapping-math and -fno-math-errno change no value (they let gcc evaluate the unselected
# candidates of refmath_simd.h's selects, and inline sqrt without an errno branch), so the
# branch-free refmath loops vectorise.
FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-trapping-math", "-fno-math-errno",
         "-fPIC", "-shared", "-std=c99", "-march=native", "-pthread"]
_HERE = Path(__file__).resolve().parent
# a hang guard, not a budget: the build is seconds of one core, but the suite builds every path
# this CPU runs at once on 3 workers of 2 cores, and 120 s was passed there (a path that timed
# out ran numpy instead, silently)
BUILD_TIMEOUT_S = 600
_SRCS = [_HERE / "refkernels.c", _HERE / "refmath_host.c", _HERE / "compare.c"]
# the C twin of core.refmath lives next to its numpy (core/refmath/): one source for every
# backend, which gpu reads from there too
REFMATH_C = _HERE.parent / "refmath"
_HEADERS = [REFMATH_C / "intrinsics_host.h", REFMATH_C / "refmath.cuh", _HERE / "refmath_simd.h",
            _HERE / "conv_small.h", _HERE / "conv_dw.h", _HERE / "serial_sums.h"]
_lib: ctypes.CDLL | None | bool = False  # False: not tried yet; None: unavailable
# what each forced path built: {isa: (library, extension)}; use_isa() swaps them in and out
_by_isa: dict[tuple[str, str], tuple] = {}
_threads: int | None = None

REFMATH = ("exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf", "rsqrt")


def flags() -> list[str]:
    """FLAGS with the path $TAPESCOPE_ISA forces (core.native.isa), and the sanitizers
    $TAPESCOPE_NATIVE_SANITIZE asks for: part of every cache key."""
    return FLAGS + list(isa.extra_flags()) + sanitize_flags()


#: $TAPESCOPE_NATIVE_SANITIZE=1: AddressSanitizer and UBSan, stopping at the first report, at
#: -O0 (a fourth of -O1's build time; -ffp-contract=off still keeps every rounding). A separate
#: cache entry (the flags are in its key); a process loads it only with libasan preloaded
#: (LD_PRELOAD=$(gcc -print-file-name=libasan.so), ASAN_OPTIONS=detect_leaks=0):
#: tests/core/test_native_sanitize.py runs hostile and normal geometry through it
SANITIZE = ["-O0", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all"]


def _asan_preloaded() -> bool:
    """Whether libasan is loaded in this process already (the sanitized build needs it)."""
    try:
        with open("/proc/self/maps") as f:
            return "libasan" in f.read()
    except OSError:
        return False


def sanitize_flags() -> list[str]:
    """SANITIZE when $TAPESCOPE_NATIVE_SANITIZE is set (not "" or "0"), else nothing."""
    return list(SANITIZE) if os.environ.get("TAPESCOPE_NATIVE_SANITIZE", "0") not in ("", "0") \
        else []


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


def _build(cc: str, missing: bool = True) -> Path | None:
    """The verified cached shared object, built first when missing or corrupt; ``missing``
    False: None then (nothing is compiled)."""
    fl = flags()
    key = cache_key(*(p.read_bytes() for p in _SRCS + _HEADERS), " ".join(fl),
                    _compiler_id(cc), cpu_id())
    if not missing:
        return KernelCache().lookup(f"refkernels-{key}", ".so")

    def build(out: Path) -> None:
        # a cold cache: seconds of gcc a terminal (and the GUI's dialog) should see
        with progress(f"compiling refmath's C kernels with {Path(cc).name} (cached after)"):
            subprocess.run([cc, *fl, f"-I{REFMATH_C}", f"-I{_HERE}", "-o", str(out),
                            *map(str, _SRCS)],
                           check=True, capture_output=True, timeout=BUILD_TIMEOUT_S)

    path, _ = KernelCache().get_or_build(f"refkernels-{key}", ".so", build)
    return path


class Epilogue(ctypes.Structure):
    """refkernels.c's ep_t: the ops applied to a convolution's output rows as they are done
    (bias; BatchNormalization's four roundings; a same-shape residual add; relu), NULL = skip;
    then, with ``dst``, each row written to row ``dst_row[image * channels + channel]`` of dst
    (the product's own output then holds no defined values: the caller keeps dst only)."""

    _fields_ = [("bias", ctypes.c_void_p), ("mean", ctypes.c_void_p), ("den", ctypes.c_void_p),
                ("scale", ctypes.c_void_p), ("beta", ctypes.c_void_p), ("res", ctypes.c_void_p),
                ("groups", ctypes.c_longlong), ("res_first", ctypes.c_int),
                ("relu", ctypes.c_int), ("dst", ctypes.c_void_p), ("dst_row", ctypes.c_void_p),
                ("channels", ctypes.c_longlong),
                # after BN: a per-channel Mul then Add (bit 0/1 of aff_first: constant first)
                ("mul2", ctypes.c_void_p), ("add2", ctypes.c_void_p),
                ("aff_first", ctypes.c_int)]


class ConvCall(ctypes.Structure):
    """refkernels.c's conv_call_t: one convolution prepared once per shape (:func:`conv_call`),
    run through one pointer (:func:`run_conv`); ``ep`` is its Epilogue, by value."""

    _fields_ = [("x", ctypes.c_void_p), ("w", ctypes.c_void_p), ("wpack", ctypes.c_void_p),
                ("out", ctypes.c_void_p)] + \
        [(f, ctypes.c_longlong) for f in ("nb", "c", "h", "wd", "g", "m", "kh", "kw", "oh",
                                          "ow", "sh", "sw", "ph", "pw", "dh", "dw")] + \
        [("threads", ctypes.c_int), ("f32", ctypes.c_int), ("one_per_group", ctypes.c_int),
         ("ep", Epilogue)]


def _load(missing: bool = True) -> ctypes.CDLL | None:
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if os.environ.get("TAPESCOPE_NO_NATIVE") or cc is None:
        return None
    if not all(h.is_file() for h in _HEADERS):
        return None  # an install without the kernel sources: numpy it is
    if sanitize_flags() and not _asan_preloaded():
        return None  # loading it would abort the process: the numpy reference runs instead
    try:
        path = _build(cc) if missing else _build(cc, missing=False)
        if path is None:
            return None  # not built yet, and not to be built here
        lib = ctypes.CDLL(str(path))
    except (OSError, CacheError, subprocess.SubprocessError):
        return None  # the numpy reference runs instead: the same bits, slower
    p = ctypes.c_void_p
    ll = ctypes.c_longlong
    for name in ("ts_mm_f64", "ts_mm_f32"):
        getattr(lib, name).argtypes = [p, p, p, ll, ll, ll, ctypes.c_int]
        getattr(lib, name).restype = None
    for name in ("ts_mm_s_f64", "ts_mm_s_f32"):
        getattr(lib, name).argtypes = [p, p, p] + [ll] * 7 + [ctypes.c_int]
        getattr(lib, name).restype = None
    for name in ("ts_bmm_f64", "ts_bmm_f32"):
        getattr(lib, name).argtypes = [p, p, p, ll, ll, ll, ll, ll, ll, ctypes.c_int]
        getattr(lib, name).restype = None
    lib.ts_adam_f64.argtypes = [p] * 5 + [ll] + [ctypes.c_double] * 6 + [ctypes.c_int]
    lib.ts_adam_f32.argtypes = [p] * 5 + [ll] + [ctypes.c_float] * 6 + [ctypes.c_int]
    lib.ts_pool_shutdown.argtypes = lib.ts_pool_size.argtypes = []
    lib.ts_pool_shutdown.restype = lib.ts_pool_size.restype = ctypes.c_int
    lib.ts_adam_f64.restype = lib.ts_adam_f32.restype = None
    for name in ("ts_chnorm_f64", "ts_chnorm_f32"):
        getattr(lib, name).argtypes = [p] * 6 + [ll] * 3
        getattr(lib, name).restype = None
    for name in ("ts_ep_apply_f64", "ts_ep_apply_f32"):
        getattr(lib, name).argtypes = [p, p, ll, ll, ll, ctypes.POINTER(Epilogue)]
        getattr(lib, name).restype = None
    for name in ("ts_gemv_f64", "ts_gemv_f32"):
        getattr(lib, name).argtypes = [p, p, p, ll, ll, ll]
        getattr(lib, name).restype = None
    for name in ("ts_colsum_f64", "ts_colsum_f32"):
        getattr(lib, name).argtypes = [p, p, ll, ll]
        getattr(lib, name).restype = None
    for name in ("ts_chansum_f64", "ts_chansum_f32"):
        getattr(lib, name).argtypes = [p, p, ll, ll, ll]
        getattr(lib, name).restype = None
    for name in ("ts_im2col_f64", "ts_im2col_f32"):
        getattr(lib, name).argtypes = [p, p] + [ll] * 14
        getattr(lib, name).restype = None
    for name in ("ts_conv_mg1_f64", "ts_conv_mg1_f32"):
        getattr(lib, name).argtypes = [p, p, p] + [ll] * 15
        getattr(lib, name).restype = None
    for name in ("ts_avgpool2d_f64", "ts_avgpool2d_f32", "ts_maxpool2d_f64", "ts_maxpool2d_f32"):
        getattr(lib, name).argtypes = [p, p, p] + [ll] * 13
        getattr(lib, name).restype = ctypes.c_int
    for name in ("ts_maxpool2d_idx_f64", "ts_maxpool2d_idx_f32"):
        getattr(lib, name).argtypes = [p, p, p] + [ll] * 13
        getattr(lib, name).restype = ctypes.c_int
    for name in ("ts_maxpool2d_idx_bwd_f64", "ts_maxpool2d_idx_bwd_f32"):
        getattr(lib, name).argtypes = [p, p, p, ll, ll, ll]
        getattr(lib, name).restype = ctypes.c_int
    for name in ("ts_fma4_f32", "ts_fma4_f64"):
        getattr(lib, name).argtypes = [p, p, p, p, p, p, p]
        getattr(lib, name).restype = None
    lib.ts_fma_chain_f32.argtypes = [p, p, p] + [ll] * 6 + [p]
    lib.ts_fma_chain_f32.restype = None
    for name in ("ts_conv_mg1_ep_f64", "ts_conv_mg1_ep_f32"):
        getattr(lib, name).argtypes = [p, p, p] + [ll] * 15 + [ctypes.POINTER(Epilogue)]
        getattr(lib, name).restype = None
    for name in ("ts_bmm_ep_f64", "ts_bmm_ep_f32"):
        getattr(lib, name).argtypes = [p, p, p, ll, ll, ll, ll, ll, ll, ctypes.c_int,
                                       ctypes.POINTER(Epilogue)]
        getattr(lib, name).restype = None
    lib.ts_conv_call.argtypes = [ctypes.POINTER(ConvCall)]
    lib.ts_conv_call.restype = None
    for name in ("ts_conv_ep_f64", "ts_conv_ep_f32"):
        getattr(lib, name).argtypes = [p, p, p, p] + [ll] * 16 + [ctypes.c_int,
                                                                  ctypes.POINTER(Epilogue)]
        getattr(lib, name).restype = None
    lib.ts_conv_cm_wsize.argtypes = [ll] * 5 + [ctypes.c_int]
    lib.ts_conv_cm_wsize.restype = ll
    lib.ts_conv_cm_pack.argtypes = [p, p, ll, ll, ll, ctypes.c_int, ctypes.c_int]
    lib.ts_conv_cm_pack.restype = None
    lib.ts_fdiff.argtypes = [p, p, ctypes.c_int, ctypes.c_int, p, p, p, ll, ctypes.c_int, p, p,
                             p]
    lib.ts_fdiff.restype = ctypes.c_int
    for name in REFMATH:
        for sfx in ("", "f"):
            fn = getattr(lib, f"tsv_{name}{sfx}")
            fn.argtypes = [p, p, ll]
            fn.restype = None
    return lib


def library(build: bool = True) -> ctypes.CDLL | None:
    """The loaded native library, or None when it cannot be built here. ``build`` False: only
    a library already in the cache is loaded, never compiled (a guest in the user's process:
    the capture's recorder); None then leaves a later call free to build it."""
    global _lib
    if _lib is False:
        lib = _load(build)
        if lib is None and not build:
            return None
        _lib = lib
        if _lib is not None:
            import atexit

            atexit.register(_lib.ts_pool_shutdown)
    return _lib


def threads() -> int:
    """Threads a product may use: set_threads(), else $TAPESCOPE_THREADS, else the CPUs we have."""
    global _threads
    if _threads is None:
        env = os.environ.get("TAPESCOPE_THREADS", "")
        if env.isdigit() and int(env) > 0:
            _threads = int(env)
        else:
            try:
                _threads = len(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                _threads = os.cpu_count() or 1
            _threads = max(1, min(_threads, 8))
    return _threads


def set_threads(n: int) -> None:
    """Use up to ``n`` threads per product (1: serial). Never changes a bit of any result."""
    global _threads
    _threads = max(1, int(n))


def pool_size() -> int:
    """Worker threads the native pool holds now in this process (0: none started yet, or a
    forked child that has not used it yet). They are created on the first threaded product and
    kept: a product hands them their shares instead of starting threads of its own."""
    lib = library()
    return lib.ts_pool_size() if lib is not None else 0


def shutdown_pool() -> int:
    """Stop and join the pool's workers (at interpreter exit, and for tests); how many were
    joined, -1 when a product owns the pool right now. The next threaded product starts a new
    pool."""
    lib = library()
    return lib.ts_pool_shutdown() if lib is not None else 0


_DT = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32"}


def aligned(a: np.ndarray) -> np.ndarray:
    """``a`` as a C-contiguous array whose first element is aligned to its type (numpy's
    ``aligned`` flag): ``a`` itself where it is one, else a copy. What every array handed to C
    here must be: the kernels read whole elements (and gcc's vectorised loops, its vector
    types, assume element alignment), so an element at an odd address is undefined behaviour,
    whatever x86 tolerates (UBSan's "misaligned address"); an ndarray over a byte buffer at an
    odd offset (``np.frombuffer(raw, offset=1)``: an ONNX tensor's raw bytes, a file's array)
    is one. ~0.35 us where ``a`` is one (np.ascontiguousarray's ~0.3)."""
    f = a.flags
    if f.c_contiguous and f.aligned:
        return a
    a = np.ascontiguousarray(a)  # (a strided array: numpy's copy is aligned)
    return a if a.flags.aligned else a.copy()


def _ctypes_address(a: np.ndarray) -> int:
    return a.ctypes.data


def addresser():
    """A function of an ndarray giving ``a.ctypes.data`` (its first element's address): the
    extension's ``addr`` (~0.1 us) where it is built, else ctypes' own (~1.4 us). For callers
    that hold the library already (the extension is built only where it is)."""
    ext = _ext if _ext else refmath_ext()
    return ext.addr if ext is not None else _ctypes_address


def mm(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """2-D reference-order product in C, or None when native code is unavailable."""
    lib = library()
    if lib is None or a.dtype != b.dtype or a.dtype not in _DT:
        return None
    m, k = a.shape
    n = b.shape[1]
    sa, sb = _strides(a), _strides(b)
    if sa is None or sb is None or (sa == (k, 1) and sb == (n, 1)):
        # (C-contiguous and aligned where its strides are C's: ``_strides``)
        if sa != (k, 1):
            a = aligned(a)
        if sb != (n, 1):
            b = aligned(b)
        c = np.empty((m, n), dtype=a.dtype)
        fn = lib.ts_mm_f64 if a.dtype == np.float64 else lib.ts_mm_f32
        ad = addresser()
        fn(ad(a), ad(b), ad(c), m, k, n, threads())
        return c
    # a transposed operand (the backward's g @ b.T and a.T @ g) read in place: the kernel
    # packs b's panels anyway, so reading them across rows costs no extra pass
    c = np.empty((m, n), dtype=a.dtype)
    fn = lib.ts_mm_s_f64 if a.dtype == np.float64 else lib.ts_mm_s_f32
    ad = addresser()
    fn(ad(a), ad(b), ad(c), m, k, n, *sa, *sb, threads())
    return c


def _strides(x: np.ndarray) -> tuple[int, int] | None:
    """(row, column) strides of a 2-D array in elements when it is C- or F-contiguous (a
    transposed contiguous array) and aligned (``aligned``), else None (it is copied)."""
    if x.ndim != 2:
        return None
    f = x.flags
    if not f.aligned:
        return None
    if f.c_contiguous:
        return (x.shape[1], 1)
    if f.f_contiguous:
        return (1, x.shape[0])
    return None


def _batch(x: np.ndarray, bsz: int) -> tuple[np.ndarray, int]:
    """(array whose batch entries are contiguous, element stride between entries; 0: shared)."""
    if x.shape[0] == 1 or x.strides[0] == 0:
        return aligned(x[0]), 0
    x = aligned(x)
    return x, x.shape[1] * x.shape[2]


def _bmm_dims(lib, a: np.ndarray, b: np.ndarray) -> tuple[int, int, int, int] | None:
    """(batch, M, K, N) of a native batched product of ``a`` and ``b``, or None when there is no
    native code or it does not take them (dtypes, ranks, batch sizes, inner dimensions)."""
    if lib is None or a.dtype != b.dtype or a.dtype not in _DT or a.ndim != 3 or b.ndim != 3:
        return None
    bsz = max(a.shape[0], b.shape[0])
    if a.shape[0] not in (1, bsz) or b.shape[0] not in (1, bsz) or a.shape[2] != b.shape[1]:
        return None
    return bsz, a.shape[1], a.shape[2], b.shape[2]


def bmm(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``[B|1, M, K] @ [B|1, K, N]`` in the reference order of ``mm`` per batch entry, or None.

    A batch entry of size 1 (or a broadcast view with stride 0) is shared by every entry, not
    copied.
    """
    lib = library()
    dims = _bmm_dims(lib, a, b)
    if dims is None:
        return None
    bsz, m, k, n = dims
    a, sa = _batch(a, bsz)
    b, sb = _batch(b, bsz)
    c = np.empty((bsz, m, n), dtype=a.dtype)
    fn = lib.ts_bmm_f64 if a.dtype == np.float64 else lib.ts_bmm_f32
    ad = addresser()
    fn(ad(a), ad(b), ad(c), bsz, m, k, n, sa, sb, threads())
    return c


def adam(w: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
         k: dict) -> np.ndarray | None:
    """core.optim.Adam's update in C (m, v in place; the new weights returned), or None.

    ``k``: the step scalars, already rounded to the dtype (b1, omb1, b2, omb2, eps, lr_t).
    """
    lib = library()
    dt = w.dtype
    if lib is None or dt not in _DT or any(
            a.dtype != dt or a.shape != w.shape or not a.flags.c_contiguous for a in (g, m, v)):
        return None
    if not (m.flags.writeable and v.flags.writeable and m.flags.aligned and v.flags.aligned):
        return None  # (m, v are updated in place: no aligned copy of them would be)
    shape = w.shape  # NOTE: np.ascontiguousarray makes a 0-d array 1-d: keep the shape apart
    w = aligned(w)
    g = aligned(g)
    out = np.empty(shape, dtype=dt)
    fn = lib.ts_adam_f64 if dt == np.float64 else lib.ts_adam_f32
    fn(w.ctypes.data, g.ctypes.data, m.ctypes.data, v.ctypes.data, out.ctypes.data, w.size,
       k["b1"], k["omb1"], k["b2"], k["omb2"], k["eps"], k["lr_t"], threads())
    return out


def channel_norm(x: np.ndarray, mean: np.ndarray, den: np.ndarray, scale: np.ndarray,
                 bias: np.ndarray) -> np.ndarray | None:
    """``((x - mean) / den) * scale + bias`` per channel (axis 1), one rounding per operation
    in that order (BatchNormalization's inference formula), or None. The per-channel arrays
    have C elements, all of x's dtype."""
    lib = library()
    dt = x.dtype
    if lib is None or dt not in _DT or x.ndim < 2:
        return None
    c = x.shape[1]
    chans = [aligned(v).reshape(-1) for v in (mean, den, scale, bias)]
    if any(v.dtype != dt or v.size != c for v in chans):
        return None
    x = aligned(x)
    y = np.empty(x.shape, dtype=dt)
    plane = int(np.prod(x.shape[2:], dtype=np.int64))
    fn = lib.ts_chnorm_f64 if dt == np.float64 else lib.ts_chnorm_f32
    fn(x.ctypes.data, *(v.ctypes.data for v in chans), y.ctypes.data, x.shape[0], c, plane)
    return y


def ep_apply(x: np.ndarray, ep) -> np.ndarray | None:
    """The epilogue ``ep`` (from :func:`epilogue`, its ``channels`` the size of x's axis 1)
    applied to a copy of ``x`` (N, C, ...) in one pass: the ops after a node other than a
    Conv, each its own rounding as after a Conv (the copy is exact). ``ep``'s residual, if any,
    has x's shape. None when native code is unavailable or x is not float32/float64."""
    lib = library()
    if lib is None or x.dtype not in _DT or x.ndim < 2 or ep.dst:
        return None
    x = aligned(x)
    y = np.empty(x.shape, dtype=x.dtype)
    fn = lib.ts_ep_apply_f64 if x.dtype == np.float64 else lib.ts_ep_apply_f32
    fn(address(x), address(y), x.shape[0], x.shape[1], math.prod(x.shape[2:]), ctypes.byref(ep))
    return y


def mm_few_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """:func:`mm`'s bits for a product of few rows (``a`` m x k, ``b`` k x n, contiguous, the
    same dtype) with ``b`` read once in memory order (a Gemm on one image; single-threaded),
    or None (no native code, another dtype or layout)."""
    lib = library()
    if lib is None or a.dtype != b.dtype or a.dtype not in _DT or a.ndim != 2 or b.ndim != 2 \
            or a.shape[1] != b.shape[0] or not b.flags.c_contiguous:
        return None
    a, b = aligned(a), aligned(b)
    m, k = a.shape
    c = np.empty((m, b.shape[1]), dtype=a.dtype)
    fn = lib.ts_gemv_f64 if a.dtype == np.float64 else lib.ts_gemv_f32
    fn(a.ctypes.data, b.ctypes.data, c.ctypes.data, m, k, b.shape[1])
    return c


def colsum(x: np.ndarray) -> np.ndarray | None:
    """Serial sums of the rows of 2-D ``x`` (``acc = +0.0; acc = acc + row`` in row order), or
    None when native code is unavailable or ``x`` is not float32/float64."""
    lib = library()  # (first: where a caller turned native code off, the extension is off too)
    if lib is None:
        return None
    ext = _ext if _ext else refmath_ext()
    if ext is not None:  # (one call: ~0.4 us against ctypes' ~4 on a small array)
        try:
            return ext.colsum(x)
        except (TypeError, ValueError):  # another dtype or rank: not taken
            pass
    if x.dtype not in _DT or x.ndim != 2:
        return None
    x = aligned(x)
    out = np.empty(x.shape[1], dtype=x.dtype)
    fn = lib.ts_colsum_f64 if x.dtype == np.float64 else lib.ts_colsum_f32
    fn(x.ctypes.data, out.ctypes.data, x.shape[0], x.shape[1])
    return out


def chansum(x: np.ndarray) -> np.ndarray | None:
    """Serial sums over every axis of 3-D ``x`` (b, n, l) but the second, in ``colsum``'s
    order on ``x`` moved to ((b, l), n) (``acc = +0.0``, then b outer, l inner), without that
    transposed copy; or None when native code is unavailable or ``x`` is not float32/64."""
    lib = library()  # (first: where a caller turned native code off, the extension is off too)
    if lib is None:
        return None
    ext = _ext if _ext else refmath_ext()
    if ext is not None:  # (as colsum's)
        try:
            return ext.chansum(x)
        except (TypeError, ValueError):
            pass
    if x.dtype not in _DT or x.ndim != 3:
        return None
    x = aligned(x)
    out = np.empty(x.shape[1], dtype=x.dtype)
    fn = lib.ts_chansum_f64 if x.dtype == np.float64 else lib.ts_chansum_f32
    fn(x.ctypes.data, out.ctypes.data, *x.shape)
    return out


def im2col2d(x: np.ndarray, kernel, strides, dilations, padw, outs) -> np.ndarray | None:
    """(N, C * kh * kw, oh * ow) columns of a 2-D convolution's input, or None (no native code).

    Rows in (c, kh, kw) row-major order, zero padding ``padw`` = ((top, bottom), (left, right))
    as in ``core.ops.nn.im2col``; ``outs`` = (oh, ow). A copy, so exact.
    """
    lib = library()
    if lib is None or x.dtype not in _DT or x.ndim != 4 or len(kernel) != 2:
        return None
    x = aligned(x)
    nb, c, h, w = x.shape
    (kh, kw), (oh, ow) = kernel, outs
    cols = np.empty((nb, c * kh * kw, oh * ow), dtype=x.dtype)
    fn = lib.ts_im2col_f64 if x.dtype == np.float64 else lib.ts_im2col_f32
    fn(x.ctypes.data, cols.ctypes.data, nb, c, h, w, kh, kw, oh, ow, strides[0], strides[1],
       padw[0][0], padw[1][0], dilations[0], dilations[1])
    return cols


def conv2d_one_per_group(x: np.ndarray, w: np.ndarray, strides, dilations, padw,
                         outs, ep=None) -> np.ndarray | None:
    """A 2-D convolution with ONE output channel per group (depthwise...), direct, or None.

    ``w`` is (G, C/G, kh, kw); the result (N, G, oh, ow) has the bits of im2col + the reference
    matmul (each output one serial chain over (c, kh, kw), padding taps included). ``ep`` (from
    :func:`epilogue`): the ops to apply to each output plane as it is done.
    """
    lib = library()
    if lib is None or x.dtype not in _DT or w.dtype != x.dtype or x.ndim != 4 or w.ndim != 4:
        return None
    x = aligned(x)
    w = aligned(w)
    nb, c, h, wd = x.shape
    g = w.shape[0]
    if g == 0 or c % g or w.shape[1] * g != c:
        return None
    (kh, kw), (oh, ow) = w.shape[2:], outs
    out = np.empty((nb, g, oh, ow), dtype=x.dtype)
    if ep is None:
        fn = lib.ts_conv_mg1_f64 if x.dtype == np.float64 else lib.ts_conv_mg1_f32
        fn(x.ctypes.data, w.ctypes.data, out.ctypes.data, nb, c, h, wd, g, kh, kw, oh, ow,
           strides[0], strides[1], padw[0][0], padw[1][0], dilations[0], dilations[1])
        return out
    fn = lib.ts_conv_mg1_ep_f64 if x.dtype == np.float64 else lib.ts_conv_mg1_ep_f32
    fn(x.ctypes.data, w.ctypes.data, out.ctypes.data, nb, c, h, wd, g, kh, kw, oh, ow,
       strides[0], strides[1], padw[0][0], padw[1][0], dilations[0], dilations[1],
       ctypes.byref(ep))
    return out


def epilogue(dtype, channels: int, bias=None, bn=None, res=None, res_first: bool = False,
             relu: bool = False):
    """(Epilogue, the arrays it points into) for a convolution with ``channels`` outputs, or
    None when an operand does not fit (then run the ops separately).

    ``bias``: C values; ``bn``: (mean, den, scale, beta), each C values, den = sqrt(var + eps)
    as the caller computed it; ``res``: a C-contiguous tensor of the output's shape (the other
    operand of a Sum; ``res_first``: it is Sum's first input); ``relu``: then Relu. All of
    ``dtype``. Keep the returned arrays alive for as long as the Epilogue is used."""
    dt = np.dtype(dtype)
    keep = []

    def vec(v):
        v = aligned(v).reshape(-1)
        if v.dtype != dt or v.size != channels:
            raise ValueError
        keep.append(v)
        return v.ctypes.data

    try:
        e = Epilogue()
        if bias is not None:
            e.bias = vec(bias)
        if bn is not None:
            e.mean, e.den, e.scale, e.beta = (vec(v) for v in bn)
    except ValueError:
        return None
    if res is not None:
        if res.dtype != dt or not res.flags.c_contiguous:
            return None
        res = aligned(res)  # (read only: a copy, kept with the rest)
        keep.append(res)
        e.res = res.ctypes.data
        e.res_first = int(bool(res_first))
    e.relu = int(bool(relu))
    return e, keep


def bmm_ep(a: np.ndarray, b: np.ndarray, groups: int, ep) -> np.ndarray | None:
    """``bmm(a, b)`` with the epilogue ``ep`` (from :func:`epilogue`) applied to each block of
    rows as it is done: the bits of the product followed by each op of the epilogue as its own
    rounding. Batch entry q holds output channels ``(q % groups) * M + i``; ``ep``'s residual
    has the (batch, M, N) layout of the result. None when native code is unavailable."""
    lib = library()
    dims = _bmm_dims(lib, a, b)
    if dims is None:
        return None
    bsz, m, k, n = dims
    if ep is not None and ep.res and bsz * m * n == 0:
        return None
    a, sa = _batch(a, bsz)
    b, sb = _batch(b, bsz)
    c = np.empty((bsz, m, n), dtype=a.dtype)
    e = ep if ep is not None else Epilogue(groups=1)
    e.groups = groups
    fn = lib.ts_bmm_ep_f64 if a.dtype == np.float64 else lib.ts_bmm_ep_f32
    fn(a.ctypes.data, b.ctypes.data, c.ctypes.data, bsz, m, k, n, sa, sb, threads(),
       ctypes.byref(e))
    return c


def conv2d_pack(w: np.ndarray, group: int, outs) -> np.ndarray | None:
    """``w`` (M, C/G, kh, kw) transposed for :func:`conv2d`'s small-plane product (lanes over
    output channels; refkernels' conv_small.h), when a conv onto an ``outs`` = (oh, ow) plane
    takes it; else None. A copy (exact) to keep and pass to every :func:`conv2d` of that
    weight: packing it per call costs a pass over the weight."""
    lib = library()
    if lib is None or w.dtype not in _DT or w.ndim != 4 or group < 1 or w.shape[0] % group:
        return None
    size = _cm_wsize(lib, w, group, outs)
    if size <= 0:
        return None
    wp = np.empty(size, dtype=w.dtype)
    w = aligned(w)
    lib.ts_conv_cm_pack(w.ctypes.data, wp.ctypes.data, group, w.shape[0] // group, w[0].size,
                        int(w.dtype == np.float32), threads())
    return wp


def _cm_wsize(lib, w: np.ndarray, group: int, outs) -> int:
    """conv2d_pack's size for ``w`` (0: that conv does not take the small-plane product)."""
    return lib.ts_conv_cm_wsize(group, w.shape[0] // group, w[0].size,
                                w.shape[2] * w.shape[3], int(outs[0]) * int(outs[1]),
                                int(w.dtype == np.float32))


def _wpack_address(lib, who: str, wpack: np.ndarray | None, w: np.ndarray, group: int,
                   outs) -> int | None:
    """The address of ``wpack`` (None: the kernel packs ``w`` itself), checked to be
    :func:`conv2d_pack` of ``w``, ``group`` and ``outs``: the kernel reads its whole size."""
    if wpack is None:
        return None
    if wpack.dtype != w.dtype or not wpack.flags.c_contiguous or not wpack.flags.aligned \
            or wpack.size != _cm_wsize(lib, w, group, outs):
        raise ValueError(f"{who}: wpack is not conv2d_pack(w, group, outs)")
    return wpack.ctypes.data


def conv2d(x: np.ndarray, w: np.ndarray, strides, dilations, padw, outs, group: int,
           ep=None, wpack: np.ndarray | None = None) -> np.ndarray | None:
    """A 2-D convolution (no bias) with the bits of ``im2col`` + ``bmm_ep``, the im2col matrix
    never built: the product's panels are packed straight from ``x`` (implicit GEMM), or, on
    a small output plane, its lanes run over the output channels; or None (no native code, a
    dtype or geometry it does not take).

    ``w`` is (M, C/G, kh, kw); ``padw`` = ((top, bottom), (left, right)) as in
    ``core.ops.nn.im2col``, ``outs`` = (oh, ow); ``ep`` (from :func:`epilogue`) as for
    :func:`bmm_ep`; ``wpack``: :func:`conv2d_pack` of this ``w``, ``group`` and ``outs`` (else
    the small-plane product packs w itself). The result is (N, M, oh, ow)."""
    lib = library()
    if lib is None or x.dtype not in _DT or w.dtype != x.dtype or x.ndim != 4 or w.ndim != 4 \
            or len(strides) != 2 or min(strides) < 1 or min(dilations) < 1:
        return None
    nb, c, h, wd = x.shape
    m = w.shape[0]
    if group < 1 or c % group or m % group or w.shape[1] * group != c:
        return None
    (kh, kw), (oh, ow) = w.shape[2:], outs
    if ep is not None and ep.res and nb * m * oh * ow == 0:
        return None
    x = aligned(x)
    w = aligned(w)
    out = np.empty((nb, m, oh, ow), dtype=x.dtype)
    if out.size == 0:
        return out
    e = ep if ep is not None else Epilogue(groups=1)
    e.groups = group
    fn = lib.ts_conv_ep_f64 if x.dtype == np.float64 else lib.ts_conv_ep_f32
    fn(x.ctypes.data, w.ctypes.data, _wpack_address(lib, "conv2d", wpack, w, group, outs),
       out.ctypes.data, nb, c, h, wd, group, m, kh, kw, oh, ow, strides[0], strides[1],
       padw[0][0], padw[1][0], dilations[0], dilations[1], threads(), ctypes.byref(e))
    return out


def conv_call(x_shape, dtype, w: np.ndarray, strides, dilations, padw, outs, group: int,
              ep, wpack: np.ndarray | None = None) -> ConvCall | None:
    """The call :func:`conv2d` (or, with one output channel per group,
    :func:`conv2d_one_per_group`) makes for an image of ``x_shape`` and ``dtype``, with ``w``
    (C-contiguous, kept alive by the caller) and a copy of the Epilogue ``ep``, prepared once:
    :func:`run_conv` then runs it on an image (the same bits). None where those would not take
    it, or for an empty output. ``wpack``: :func:`conv2d_pack` of ``w`` (kept alive by the
    caller too), as for :func:`conv2d`."""
    lib = library()
    dt = np.dtype(dtype)
    if lib is None or dt not in _DT or w.dtype != dt or len(x_shape) != 4 or w.ndim != 4 \
            or not w.flags.c_contiguous or not w.flags.aligned or len(strides) != 2 \
            or min(strides) < 1 or min(dilations) < 1:
        return None
    nb, c, h, wd = x_shape
    m = w.shape[0]
    if group < 1 or c % group or m % group or w.shape[1] * group != c \
            or min(nb, m, *outs) < 1:
        return None
    call = ConvCall(w=w.ctypes.data, nb=nb, c=c, h=h, wd=wd, g=group, m=m, kh=w.shape[2],
                    kw=w.shape[3], oh=outs[0], ow=outs[1], sh=strides[0], sw=strides[1],
                    ph=padw[0][0], pw=padw[1][0], dh=dilations[0], dw=dilations[1],
                    f32=int(dt == np.float32), one_per_group=int(m == group))
    if m != group:
        call.wpack = _wpack_address(lib, "conv_call", wpack, w, group, outs)
    call.ep = ep
    return call


def address(a: np.ndarray) -> int:
    """The address of a C-contiguous array's data: the extension's ``addr`` where it is loaded
    (~0.02 us), else through ctypes' view of a writeable buffer (~0.3 us), else
    ``a.ctypes.data`` (~0.9 us; a plan run asks a few times per node)."""
    if _ext:
        return _ext.addr(a)
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


def run_conv(call: ConvCall, x: np.ndarray, out: np.ndarray) -> None:
    """Run a prepared :func:`conv_call` (this run's own copy: its Epilogue's residual and
    destination set by the caller) on ``x`` into ``out``, both C-contiguous, of its shapes and
    dtype (the caller checks)."""
    f = x.flags
    if not (f.c_contiguous and f.aligned):
        x = aligned(x)
    if not out.flags.aligned:
        raise ValueError("run_conv: out is not aligned")
    call.x, call.out, call.threads = address(x), address(out), threads()
    _lib.ts_conv_call(ctypes.byref(call))


def pool2d(kind: str, x: np.ndarray, counts: np.ndarray | None, kernel, strides, dilations,
           padw, outs, empty=np.empty) -> np.ndarray | None:
    """A 2-D pool in ``core.ops.nn.pool_nd``'s order, or None (no native code, a dtype or a
    geometry it does not take). ``kind`` "avg": every tap added to +0.0 in row-major order,
    padding taps as +0.0, then divided by ``counts`` (the (oh, ow) divisors pool_nd computes);
    "max": ``np.maximum`` of the taps in row-major order, padding as -inf. ``empty(shape,
    dtype)`` makes the output (every element of it written here)."""
    lib = library()
    if lib is None or x.dtype not in _DT or x.ndim != 4 or min(strides) < 1 \
            or min(dilations) < 1 or min(padw[0][0], padw[1][0]) < 0:
        return None
    (oh, ow) = outs
    if kind == "avg":
        if counts is None or counts.dtype != x.dtype:
            return None
        cnt = aligned(counts).reshape(-1)
        if cnt.size != oh * ow:
            return None
    else:
        cnt = x  # unused
    x = aligned(x)
    nb, c, h, w = x.shape
    y = empty((nb, c, oh, ow), x.dtype)
    if not (y.flags.c_contiguous and y.flags.aligned):
        y = np.empty((nb, c, oh, ow), x.dtype)
    f32 = x.dtype == np.float32
    if kind == "avg":
        fn = lib.ts_avgpool2d_f32 if f32 else lib.ts_avgpool2d_f64
    else:
        fn = lib.ts_maxpool2d_f32 if f32 else lib.ts_maxpool2d_f64
    ok = fn(address(x), address(cnt), address(y), nb * c, h, w, kernel[0], kernel[1],
            oh, ow, strides[0], strides[1], padw[0][0], padw[1][0], dilations[0], dilations[1])
    return y if ok else None


def maxpool2d_with_indices(x: np.ndarray, kernel, strides, pads, dilations, outs
                           ) -> tuple[np.ndarray, np.ndarray] | None:
    """PyTorch's ``max_pool2d_with_indices`` of an (N, C, H, W) float array in the capture
    judge's statement of it (the first maximum of each window's row-major taps, padding
    -inf, the first NaN; its flat index in the plane): ``(values, int64 indices)`` of shape
    (N, C, *outs), or None (no native code, another dtype or rank, a geometry the C refuses)."""
    lib = library()
    if lib is None or x.dtype not in _DT or x.ndim != 4:
        return None
    x = aligned(x)
    nb, c, h, w = x.shape
    y = np.empty((nb, c, *outs), x.dtype)
    idx = np.empty((nb, c, *outs), np.int64)
    fn = lib.ts_maxpool2d_idx_f32 if x.dtype == np.float32 else lib.ts_maxpool2d_idx_f64
    ok = fn(address(x), address(y), address(idx), nb * c, h, w, kernel[0], kernel[1],
            outs[0], outs[1], strides[0], strides[1], pads[0], pads[1], dilations[0],
            dilations[1])
    return (y, idx) if ok else None


def maxpool2d_with_indices_backward(g: np.ndarray, idx: np.ndarray, x_shape) -> np.ndarray | None:
    """The gradient of ``maxpool2d_with_indices``: +0.0 everywhere, each of ``g``'s elements
    added to its index's input in row-major order (``np.add.at``'s), or None (no native code,
    another dtype, an index outside its plane: nothing returned)."""
    lib = library()
    if lib is None or g.dtype not in _DT or idx.dtype != np.int64 or g.shape != idx.shape \
            or g.ndim < 2 or len(x_shape) != g.ndim or tuple(x_shape[:-2]) != g.shape[:-2]:
        return None
    g, idx = aligned(g), aligned(idx)
    planes = math.prod(g.shape[:-2])
    gx = np.empty(tuple(x_shape), g.dtype)
    fn = lib.ts_maxpool2d_idx_bwd_f32 if g.dtype == np.float32 else lib.ts_maxpool2d_idx_bwd_f64
    ok = fn(address(g), address(idx), address(gx), planes, g.shape[-1] * g.shape[-2],
            x_shape[-1] * x_shape[-2])
    return gx if ok else None


@functools.cache
def _libm_fma(name: str = "fmaf") -> int | None:
    """The address of the C library's ``fmaf`` (or ``fma``) (exact: its fused instruction or
    its emulation), or None where there is no such library."""
    import ctypes.util

    lib = ctypes.util.find_library("m")
    try:
        return ctypes.cast(getattr(ctypes.CDLL(lib), name), ctypes.c_void_p).value if lib \
            else None
    except (OSError, AttributeError):
        return None


_FMA4 = {np.dtype(np.float32): ("ts_fma4_f32", "fmaf"),
         np.dtype(np.float64): ("ts_fma4_f64", "fma")}


def fma_into(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    """``acc = fma(a, b, acc)`` in place, elementwise, each result rounded once (C's
    ``fmaf``, or ``fma`` in float64), ``a`` and ``b`` broadcast to ``acc``'s shape: float32
    or float64 throughout, ``acc`` C-contiguous, writeable, aligned and of rank 1-4. False
    (nothing written) where native code is off or the arrays are not those: the caller's
    numpy then."""
    lib = library()
    kind = _FMA4.get(acc.dtype)
    if lib is None or kind is None or not 1 <= acc.ndim <= 4:
        return False
    fn = _libm_fma(kind[1])
    if fn is None:
        return False
    f = acc.flags
    if not (f.c_contiguous and f.writeable and f.aligned):
        return False
    try:
        av, bv = (np.broadcast_to(v, acc.shape) for v in (a, b))
    except ValueError:
        return False
    if av.dtype != acc.dtype or bv.dtype != acc.dtype or not av.flags.aligned \
            or not bv.flags.aligned:
        return False
    lead, size = 4 - acc.ndim, acc.itemsize
    geo = np.array([(1,) * lead + acc.shape,
                    (0,) * lead + tuple(s // size for s in av.strides),
                    (0,) * lead + tuple(s // size for s in bv.strides)], np.int64)
    if acc.size:
        getattr(lib, kind[0])(address(acc), address(av), address(bv), address(geo[0]),
                              address(geo[1]), address(geo[2]), fn)
    return True


def fma_chain(a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> bool:
    """``acc += a @ b`` as fma chains, in place: each output ``fma(a[..., k], b[..., k, :],
    acc)`` for k from 0 up, every step rounded once (C's ``fmaf``): what ``fma_into`` does a k
    at a time, the whole product in one call. float32 throughout, ``a`` (..., m, k) and ``b``
    (..., k, n) with the same leading axes as ``acc`` (..., m, n) or none (``b`` 2-D), all
    C-contiguous and aligned, ``acc`` writeable. False (nothing written) where native code is
    off or the arrays are not those: the caller's loop then."""
    lib = library()
    if lib is None or acc.ndim < 2 or a.ndim != acc.ndim or b.ndim not in (2, acc.ndim):
        return False
    fmaf = _libm_fma("fmaf")
    if fmaf is None:
        return False
    if any(x.dtype != np.float32 or not (x.flags.c_contiguous and x.flags.aligned)
           for x in (a, b, acc)) or not acc.flags.writeable:
        return False
    m, kk, n = a.shape[-2], a.shape[-1], b.shape[-1]
    lead = acc.shape[:-2]
    if a.shape[:-2] != lead or acc.shape[-2:] != (m, n) or b.shape[-2] != kk \
            or (b.ndim > 2 and b.shape[:-2] != lead):
        return False
    if acc.size and kk:
        nb = math.prod(lead)
        lib.ts_fma_chain_f32(address(acc), address(a), address(b), nb, m, n, kk, m * kk,
                             kk * n if b.ndim > 2 else 0, fmaf)
    return True


_ext: object = False  # False: not tried yet; None: unavailable


def load_extension(name: str, path: Path) -> object:
    """The CPython extension module ``name`` built at ``path`` (a kernel cache's file: only
    tapescope's own sources are built there), loaded without an import of its name (ImportError
    where it does not load)."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _load_ext():
    import sysconfig

    cc = shutil.which(os.environ.get("CC", "gcc"))
    inc = sysconfig.get_paths().get("include")
    src = _HERE / "refmath_py.c"
    if cc is None or os.environ.get("TAPESCOPE_NO_NATIVE") or not inc or \
            not os.path.isfile(os.path.join(inc, "Python.h")) or library() is None:
        return None
    # numpy's C API (the extension allocates its results): built against this numpy's headers,
    # so its version is in the key (another numpy rebuilds)
    np_inc = np.get_include()
    fl = flags()
    # (compare.c is compiled into it too: refmath_py.c includes it)
    key = cache_key(src.read_bytes(), (_HERE / "compare.c").read_bytes(),
                    *(p.read_bytes() for p in _HEADERS), " ".join(fl),
                    _compiler_id(cc), cpu_id(), sysconfig.get_config_var("EXT_SUFFIX") or "",
                    inc, np_inc, np.__version__)

    def build(out: Path) -> None:
        with progress(f"compiling refmath's Python extension with {Path(cc).name} "
                      "(cached after)"):
            subprocess.run([cc, *[f for f in fl if f != "-std=c99"], f"-I{inc}",
                            f"-I{np_inc}", f"-I{REFMATH_C}", f"-I{_HERE}", "-o", str(out),
                            str(src)],
                           check=True, capture_output=True, timeout=BUILD_TIMEOUT_S)

    try:
        path, _ = KernelCache().get_or_build(f"refmath-py-{key}", ".so", build)
        return load_extension("_ts_refmath", path)
    except (OSError, ImportError, CacheError, subprocess.SubprocessError):
        return None  # ctypes loops instead: the same code, a little more overhead per call


def defer() -> None:
    """Answer None from here on (numpy's reference: the same bits, slower) instead of building:
    for a build already running on another thread that the user chose not to wait for (the
    window's Cancel); that build still stores its library, and a thread in ``library()`` when
    it ends installs it."""
    global _lib, _ext
    if _lib is False:
        _lib = None
    if _ext is False:
        _ext = None


@contextlib.contextmanager
def use_isa(name: str, tune: str = "native"):
    """Build (once) and use the native code of path ``name`` (``avx512``, ``avx2``, ``c``),
    gcc tuned for ``tune`` (``native``, ``intel``, ``amd``: core.native.isa), inside the block,
    the process's own build outside it: how the tests run every path this CPU can in one
    process. ISAError when the CPU cannot run it."""
    global _lib, _ext
    env = {isa.ENV: name, isa.TUNE_ENV: tune}
    saved_env = {k: os.environ.get(k) for k in env}
    saved = (_lib, _ext)
    os.environ.update(env)
    try:
        isa.extra_flags()  # refuse a path this CPU lacks before building anything
        _lib, _ext = _by_isa.get((name, tune), (False, False))
        yield
    finally:
        _by_isa[name, tune] = (_lib, _ext)
        _lib, _ext = saved
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def refmath_ext():
    """The CPython extension over refmath's C twin (``apply(i, x)``; and
    ``tanh_grad(g, y)``, the tape's tanh backward), or None (use ctypes)."""
    global _ext
    if _ext is False:
        _ext = _load_ext()
    return _ext


def refmath_fn(name: str, dtype: np.dtype):
    """The C twin's loop ``f(x_ptr, y_ptr, n)`` for refmath function ``name``, or None."""
    lib = library()
    if lib is None or np.dtype(dtype) not in _DT:
        return None
    return getattr(lib, f"tsv_{name}{'f' if np.dtype(dtype) == np.float32 else ''}")


# compare.c's kinds: the float types the capture judge compares bit by bit
_FD_KIND = {np.dtype(np.float64): 0, np.dtype(np.float32): 1, precision.FLOAT16: 2,
            precision.BFLOAT16: 3}


def _fd_layout(x: np.ndarray, y: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    """(shape, x's byte strides, y's) of two arrays of one shape, dimensions of size 1 left
    out and neighbours that both arrays step through as one merged (row-major order kept)."""
    shape: list[int] = []
    xs: list[int] = []
    ys: list[int] = []
    for n, sx, sy in zip(x.shape, x.strides, y.strides, strict=True):
        if n == 1:
            continue
        if shape and xs[-1] == sx * n and ys[-1] == sy * n:
            shape[-1] *= n
            xs[-1], ys[-1] = sx, sy
        else:
            shape.append(n)
            xs.append(sx)
            ys.append(sy)
    if not shape:  # one element (or a 0-d array)
        return [1], [x.itemsize], [y.itemsize]
    return shape, xs, ys


class _FdOut(ctypes.Structure):
    """ts_fdiff's outputs in one object: out[0..2], then *ulp, then *abs_out."""
    _fields_ = [("out", ctypes.c_longlong * 3), ("ulp", ctypes.c_uint64),
                ("mab", ctypes.c_double)]


_FD_ULP = _FdOut.ulp.offset
_FD_MAB = _FdOut.mab.offset
_FD_ONE = ctypes.c_longlong * 1  # a C-contiguous pair's shape and stride (one dimension)
_FD_STRIDE = {n: _FD_ONE(n) for n in (2, 4, 8)}  # by itemsize (read only: shared by calls)


def float_diff(ref: np.ndarray, rec: np.ndarray, block: int, full: bool = True):
    """compare.c's numbers of two non-empty float arrays of one dtype and shape, read in place
    (any strides): ``(n_diff, first_index, max_ulp, max_abs, n_signed_zero)`` (``first_index``
    None without a difference), or ``"nan"`` where a block of ``block`` elements that holds a
    difference holds a NaN (the caller applies the NaN policy), or None when native code is
    unavailable or does not take them. ``full=False``: max_abs and n_signed_zero are 0.
    The CPython extension's ``fdiff`` where it is built, else :func:`float_diff_ctypes`."""
    # (the judge calls this ~1,300 times a zoo capture, on arrays of a few hundred elements:
    # the call's own cost is most of it; the extension's is ~1 us, ctypes' ~8 us)
    ext = _ext if _ext else refmath_ext()
    if ext is not None:
        kind = _FD_KIND.get(ref.dtype)
        if kind is None or not ref.size:
            return None
        try:
            return ext.fdiff(ref, rec, kind, block, full)
        except (TypeError, ValueError):  # another dtype, shape or layout: not taken
            return None
    return float_diff_ctypes(ref, rec, block, full)


def float_diff_entry() -> tuple | None:
    """``(fdiff, kinds)``: the CPython extension's entry that :func:`float_diff` calls and its
    kind per dtype, for a caller that compares many small pairs itself (the capture judge: its
    wrapper's own ~0.5 us a call was a third of the call), or None where it is not built."""
    ext = _ext if _ext else refmath_ext()
    return None if ext is None else (ext.fdiff, _FD_KIND)


def compare_out_entry() -> Callable | None:
    """The CPython extension's ``outcmp(g, rec, t, kinds, block)``: the capture judge's
    numbers of one output (its reference's output on the recorded inputs and on the chain's,
    against the recorded one) in one call, two of :func:`float_diff`'s passes, with ``kinds``
    ``float_diff_entry()``'s; or None where it is not built (as ``float_diff_entry``)."""
    ext = _ext if _ext else refmath_ext()
    return None if ext is None else ext.outcmp


def ew_entry() -> Callable | None:
    """The CPython extension's ``ew(code, x, y, z, s)``: an optimizer's tiny elementwise ops in
    one call (core.capture.aten_ref_table.ew_c), or None where native code is off or the
    extension is not built."""
    if library() is None:  # (first: where a caller turned native code off, this is off too)
        return None
    ext = _ext if _ext else refmath_ext()
    return None if ext is None else ext.ew


def gelu_entry() -> Callable | None:
    """The CPython extension's ``gelu(x, g, s, p)``: aten's exact GELU (``g`` None) or its
    backward in one call (core.capture.aten_ref_pointwise), or None where native code is off
    or the extension is not built."""
    if library() is None:  # (first: where a caller turned native code off, this is off too)
        return None
    ext = _ext if _ext else refmath_ext()
    return None if ext is None else getattr(ext, "gelu", None)


def zero_le_entry() -> Callable | None:
    """The CPython extension's ``zero_le(x, t, v)`` (``x <= t ? +0.0 : v`` elementwise in one
    pass: relu and threshold_backward), or None where native code is off or the extension is
    not built."""
    if library() is None:
        return None
    ext = _ext if _ext else refmath_ext()
    return None if ext is None else getattr(ext, "zero_le", None)


def square_sums(xs: list) -> np.ndarray | None:
    """Each array's serial sum of squares (``acc = +0.0; acc = acc + x * x`` in C order) as a
    new 1-d array, in one native call (the extension's sqsums): for a list of C-contiguous
    aligned arrays of one native float type; None where native code is off, the extension is
    not built, the arrays are not taken, or a sum is NaN."""
    if library() is None:
        return None
    ext = _ext if _ext else refmath_ext()
    if ext is None:
        return None
    try:
        return ext.sqsums(xs)
    except (TypeError, ValueError):
        return None


def walk_entry() -> Callable | None:
    """The CPython extension's ``decode(a, arrays, ids, chain, other, missing)``: the capture
    judge's argument walk (``core.capture.judge._decode_ids``, ~1,500 calls a zoo capture),
    or None where the extension is not built."""
    ext = _ext if _ext else refmath_ext()
    return None if ext is None else ext.decode


def float_diff_ctypes(ref: np.ndarray, rec: np.ndarray, block: int, full: bool = True):
    """:func:`float_diff` through ctypes (where the CPython extension is not built: no
    ``Python.h``), the same compare.c and the same numbers."""
    lib = _lib if _lib else library()
    kind = _FD_KIND.get(ref.dtype)
    if lib is None or kind is None or rec.dtype != ref.dtype or rec.shape != ref.shape \
            or ref.size == 0 or block < 1 or ref.ndim > 32:
        return None
    if ref.flags.c_contiguous and rec.flags.c_contiguous:  # (the common case, cheaply)
        nd = 1
        shape = _FD_ONE(ref.size)
        rs = os_ = _FD_STRIDE[ref.itemsize]
    else:
        sh, r, o = _fd_layout(ref, rec)
        nd = len(sh)
        arr = ctypes.c_longlong * nd
        shape, rs, os_ = arr(*sh), arr(*r), arr(*o)
    res = _FdOut()
    rc = lib.ts_fdiff(ref.ctypes.data, rec.ctypes.data, kind, nd, shape, rs, os_, block,
                      int(full), res.out, ctypes.byref(res, _FD_ULP),
                      ctypes.byref(res, _FD_MAB))
    if rc == 1:
        return "nan"
    if rc != 0:
        return None
    out = res.out
    return (out[0], None if out[1] < 0 else out[1], res.ulp, res.mab, out[2])
