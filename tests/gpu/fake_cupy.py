"""A stand-in for the part of CuPy that needs a GPU: module load, launch, streams and graphs.

Compilation is NOT faked: `cupy.cuda.nvrtc` here is CuPy's real NVRTC binding, and the cuda
backend compiles through `gpu.nvrtc.nvrtc_compile` with it, so the fake is only usable where
NVRTC loads (tests/gpu/conftest.py `needs_nvrtc`). What a GPU would do with the cubin is
emulated: every binary the real NVRTC produced in this process is remembered with its source
(a spy on `nvrtc_compile`), and `RawModule(path=...)` runs that source on the host backend. With
`session_cache` (one kernel cache for every fake-CUDA test of the run, shared by the xdist
workers) the spy also leaves source and PTX beside the cache, so a binary another worker of the
same run compiled loads too, instead of each worker compiling the same library again.

The real CuPy contract is enforced (checked against the installed CuPy 14.2 sources and
docstrings; tests/gpu/test_cuda_plumbing.py compares the signatures with the installed CuPy):
  RawModule(str code=None, *, str path=None, ...)   path must be a str (not Path, not bytes);
      a cubin must be an ELF for EM_CUDA of this device's architecture, PTX must target an
      architecture the device can JIT; get_function(str name) must name a kernel in it
  Function.__call__(tuple grid, tuple block, args, size_t shared_mem=0, stream=None,
      enable_cooperative_groups=False)                 grid/block tuples; args of CuPy's types
  ndarray.set(arr, stream=None)     a numpy.ndarray of the same dtype and shape
  ndarray.get(stream=None, order='C', out=None, blocking=True)
  Stream(null=False, non_blocking=False, ptds=False, priority=None); begin_capture(mode=None),
      end_capture() -> Graph, record(event=None) -> Event, synchronize(); Graph.launch(stream)
  alloc_pinned_memory(size_t size) -> PinnedMemoryPointer (a buffer numpy can wrap)
Streams are asynchronous as on a GPU: launches, graph launches and copies queue on their stream
and run only when something waits for it (synchronize, an event, a blocking get). A copy from
pinned memory reads the host memory when it runs (so overwriting a pinned slot too early shows
up as a wrong result), a copy from pageable memory snapshots it at the call (CUDA stages it).
Copies and synchronization while a stream is capturing are refused, as CUDA refuses them.
A launch is held to the device's limits (CUDA's for compute capability 9.0, checked by the driver
at cuLaunchKernel: CUDA_ERROR_INVALID_VALUE): at most 1024 threads per block, block x and y <=
1024 and z <= 64, grid x < 2**31, grid y and z <= 65535, no zero dimension, and static plus
dynamic shared memory <= 48 KB (more needs an opt-in attribute tapescope never sets); a PTX
whose entry declares more than 48 KB static shared memory does not load (ptxas refuses the
same in a cubin). A launch that fails while its stream captures invalidates the capture, and
`end_capture()` then raises cudaErrorStreamCaptureInvalidated, as CUDA does.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import struct
import sys
import types
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from tapescope.gpu.device import Buffer
from tapescope.gpu.host import HostDevice

_HOST = HostDevice("fake cupy")
_SOURCES: dict[str, str] = {}  # sha256 of a binary NVRTC produced → its source
_PTX: dict[str, str] = {}  # sha256 of a binary NVRTC produced → its PTX
_PINNED: list[PinnedMemoryPointer] = []
_SCALAR_TYPES = {np.dtype(c).type for c in "?bhilqBHILQefdFD"}  # CuPy's _pointer_numpy_types
EM_CUDA = 190
# the per-launch limits of compute capability 9.0 (CUDA C Programming Guide, "Technical
# Specifications per Compute Capability"; the same for every architecture since 3.0)
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_SHARED_PER_BLOCK = 48 * 1024  # static + dynamic, without cudaFuncAttributeMaxDynamicShared...


class FakeState:
    """What the fake saw (reset per install): captures, graph launches, copies."""

    def __init__(self, cc: str, driver: int) -> None:
        self.cc = cc
        self.driver = driver
        self.captures = 0
        self.graph_launches = 0
        self.copies: list[tuple[int, bool]] = []  # (elements, from pinned memory)
        self.loaded: list[tuple[str, str]] = []  # (kind "cubin" | "ptx", target)


state = FakeState("90", 0)


# ---- memory ----------------------------------------------------------------------------------
class MemoryPointer:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class PinnedMemoryPointer(bytearray):
    """Page-locked host memory (numpy wraps it through the buffer protocol, as with CuPy's)."""

    @property
    def ptr(self) -> int:
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))

    def holds(self, a: np.ndarray) -> bool:
        lo = self.ptr
        return lo <= a.ctypes.data and a.ctypes.data + a.nbytes <= lo + len(self)


def alloc_pinned_memory(size: int) -> PinnedMemoryPointer:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise TypeError(f"alloc_pinned_memory(size_t size): got {size!r}")
    mem = PinnedMemoryPointer(int(size))
    _PINNED.append(mem)
    return mem


def _is_pinned(a: np.ndarray) -> bool:
    return any(m.holds(a) for m in _PINNED)


def _capturing() -> bool:
    return any(s.capturing is not None for s in Stream.all)


class ndarray:  # noqa: N801  (CuPy's name)
    def __init__(self, a: np.ndarray) -> None:
        self._a = a
        self.data = MemoryPointer(a.ctypes.data)
        self.dtype = a.dtype
        self.shape = a.shape
        self.size = a.size

    def __getitem__(self, sl) -> ndarray:
        return ndarray(self._a[sl])

    def set(self, arr, stream=None) -> None:
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, not "
                            f"{type(arr).__name__}")
        if arr.dtype != self.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        if arr.shape != self.shape:
            raise ValueError("Shape mismatch")
        if _capturing():
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: a copy while a stream is "
                               "capturing")
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"stream must be a cupy.cuda.Stream, not {type(stream).__name__}")
        pinned = _is_pinned(arr)
        state.copies.append((arr.size, pinned))
        dst = self._a
        src = arr if pinned and stream is not None else arr.copy()  # pinned: read when it runs

        def copy() -> None:
            dst[...] = src

        if stream is None:
            copy()
        else:
            stream._enqueue(copy)

    def get(self, stream=None, order="C", out=None, blocking=True) -> np.ndarray:
        if _capturing():
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: get() while capturing")
        if stream is not None:
            if not isinstance(stream, Stream):
                raise TypeError(f"stream must be a cupy.cuda.Stream, not {type(stream).__name__}")
            stream.synchronize()
        return self._a.copy()


def zeros(shape, dtype=float, order="C") -> ndarray:
    if np.dtype(dtype).kind not in "biufc":  # as CuPy: ml_dtypes' bfloat16 (kind "V") is not
        raise TypeError(f"Unsupported dtype {np.dtype(dtype)}")  # one of its dtypes
    return ndarray(np.zeros(shape, dtype, order=order))


# ---- streams, events, graphs -----------------------------------------------------------------
_current: list[Stream] = []


class Event:
    def __init__(self, stream: Stream, upto: int) -> None:
        self.stream, self.upto = stream, upto

    def synchronize(self) -> None:
        self.stream._run_until(self.upto)


class Graph:
    def __init__(self, ops: list) -> None:
        self.ops = ops

    @property
    def calls(self) -> list:
        """The captured kernel launches."""
        return self.ops

    def launch(self, stream=None) -> None:
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"stream must be a cupy.cuda.Stream, not {type(stream).__name__}")
        s = stream or (_current[-1] if _current else None)
        state.graph_launches += 1
        for op in self.ops:
            s._enqueue(op) if s is not None else op()


class Stream:
    all: list[Stream] = []

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None) -> None:
        self.capturing: list | None = None
        self.invalidated = False  # a launch failed during this capture
        self.pending: deque = deque()
        self.done = 0
        self.queued = 0
        Stream.all.append(self)

    def __enter__(self) -> Stream:
        _current.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _current.pop()

    def _enqueue(self, op) -> None:
        if self.capturing is not None:
            self.capturing.append(op)
            return
        self.pending.append(op)
        self.queued += 1

    def _run_until(self, upto: int) -> None:
        while self.done < upto and self.pending:
            self.pending.popleft()()
            self.done += 1

    def begin_capture(self, mode=None) -> None:
        if self.capturing is not None:
            raise RuntimeError("cudaErrorIllegalState: the stream is already capturing")
        state.captures += 1
        self.capturing = []
        self.invalidated = False

    def end_capture(self) -> Graph:
        if self.capturing is None:
            raise RuntimeError("cudaErrorIllegalState: the stream is not capturing")
        g, self.capturing = Graph(self.capturing), None
        if self.invalidated:
            self.invalidated = False
            raise RuntimeError("cudaErrorStreamCaptureInvalidated: operation failed due to a "
                               "previous error during capture")
        return g

    def record(self, event=None) -> Event:
        if event is not None:
            raise NotImplementedError("the fake records fresh events only")
        return Event(self, self.queued)

    def synchronize(self) -> None:
        if self.capturing is not None:
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: synchronize while capturing")
        self._run_until(self.queued)


# ---- modules and launches ----------------------------------------------------------------------
def _arch_of_cubin(data: bytes) -> int:
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise RuntimeError("CUDA_ERROR_INVALID_IMAGE: not a 64-bit ELF")
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine != EM_CUDA:
        raise RuntimeError(f"CUDA_ERROR_INVALID_IMAGE: ELF machine {machine}, not CUDA")
    flags = struct.unpack_from("<I", data, 48)[0]
    # e_flags: the sm number in bits 0-7 (0x5a055a: sm_90), or in bits 8-15 under the newer
    # ABI whose low byte is a small version number (0x6007802: sm_120)
    return flags & 0xFF if flags & 0xFF >= 20 else (flags >> 8) & 0xFF


def _static_shared(ptx: str) -> dict[str, int]:
    """Bytes of static shared memory per .entry: the `.shared` arrays declared in its body and
    the module-scope (file-level __shared__) ones it names; `.extern .shared` is dynamic."""
    text = re.sub(r"//[^\n]*", "", ptx)
    decl = re.compile(r"^\s*\.shared\s+(?:\.align\s+\d+\s+)?\.\w+\s+([\w$]+)(?:\[(\d+)\])?",
                      re.M)
    heads = list(re.finditer(r"\.entry\s+(\w+)\s*\(", text))
    module_vars = {m.group(1): int(m.group(2) or 1)
                   for m in decl.finditer(text[:heads[0].start()] if heads else text)}
    out = {}
    for i, h in enumerate(heads):
        body = text[h.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        size = sum(int(m.group(2) or 1) for m in decl.finditer(body))
        size += sum(n for v, n in module_vars.items() if re.search(rf"\b{re.escape(v)}\b", body))
        out[h.group(1)] = size
    return out


def _check_launch(name: str, grid: tuple, block: tuple, shared: int) -> None:
    """cuLaunchKernel's checks (CUDA_ERROR_INVALID_VALUE), with what broke which limit."""
    bad = "CUDA_ERROR_INVALID_VALUE: invalid argument"
    for what, dims, limits in (("grid", grid, MAX_GRID), ("block", block, MAX_BLOCK)):
        if not 1 <= len(dims) <= 3 or any(not isinstance(d, (int, np.integer))
                                          or isinstance(d, bool) for d in dims):
            raise TypeError(f"{what} must be a tuple of 1-3 ints, got {dims!r}")
        full = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
        for axis, d, lim in zip("xyz", full, limits, strict=True):
            if not 1 <= d <= lim:
                raise RuntimeError(f"{bad} ({name}: {what}.{axis} = {d}, the limit is {lim})")
    threads = int(np.prod([int(b) for b in block]))
    if threads > MAX_THREADS_PER_BLOCK:
        raise RuntimeError(f"{bad} ({name}: block {block} is {threads} threads, the limit is "
                           f"{MAX_THREADS_PER_BLOCK})")
    if shared > MAX_SHARED_PER_BLOCK:
        raise RuntimeError(f"{bad} ({name}: {shared} bytes of shared memory per block, the "
                           f"limit is {MAX_SHARED_PER_BLOCK})")


class Function:
    def __init__(self, kernel, static_shared: int = 0) -> None:
        self.kernel = kernel
        self.static_shared = static_shared

    def _run(self, grid, block, args) -> None:
        conv = []
        for p, a in zip(self.kernel.sig.params, args, strict=True):
            if isinstance(a, ndarray):
                if not p.pointer:
                    raise TypeError(f"{self.kernel.name}: a device array where {p} is declared")
                flat = a._a.reshape(-1)
                if p.dtype.kind == "V" and flat.dtype == np.uint16:  # bfloat16 held as bits
                    flat = flat.view(p.dtype)  # (a GPU reads the pointer, whatever its type)
                conv.append(Buffer(_HOST, flat.size, flat.dtype, (flat, flat), a.data.ptr))
            else:
                if p.pointer or a.dtype.itemsize != p.dtype.itemsize:
                    raise TypeError(f"{self.kernel.name}: a {a.dtype} value where {p} is "
                                    f"declared (a GPU would read garbage)")
                conv.append(a)
        _HOST.run([self.kernel.record(grid, block, *conv)])

    def __call__(self, grid, block, args, shared_mem=0, stream=None,
                 enable_cooperative_groups=False) -> None:
        s = stream if isinstance(stream, Stream) else (_current[-1] if _current else None)
        try:
            self._check(grid, block, args, shared_mem, stream)
        except Exception:
            if s is not None and s.capturing is not None:
                s.invalidated = True  # CUDA: a failed launch invalidates the capture
            raise
        conv = []
        for a in args:  # CuPy's _pointer(): arrays, its numpy scalar types, int, float, bool
            if isinstance(a, ndarray) or type(a) in _SCALAR_TYPES:
                conv.append(a)
            elif isinstance(a, bool):
                conv.append(np.bool_(a))
            elif isinstance(a, int):
                conv.append(np.int64(a))
            else:
                conv.append(np.float64(a))

        def op() -> None:
            self._run(grid, block, conv)

        op.launch = (self.kernel.name, grid, block)  # type: ignore[attr-defined]
        if s is None:
            op()
        else:
            s._enqueue(op)

    def _check(self, grid, block, args, shared_mem, stream) -> None:
        for what, v in (("grid", grid), ("block", block)):
            if not isinstance(v, tuple):
                raise TypeError(f"Argument '{what}' has incorrect type (expected tuple, got "
                                f"{type(v).__name__})")
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"args must be a tuple or list, not {type(args).__name__}")
        if len(args) != len(self.kernel.sig.params):
            raise TypeError(f"{self.kernel.name}: {len(args)} arguments for "
                            f"{len(self.kernel.sig.params)} parameters")
        for a in args:  # CuPy's _pointer(): arrays, its numpy scalar types, int, float, bool
            if not (isinstance(a, (ndarray, int, float)) or type(a) in _SCALAR_TYPES):
                raise TypeError(f"Unsupported type {type(a)}")
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"stream must be a cupy.cuda.Stream, not {type(stream).__name__}")
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, (int, np.integer)) \
                or shared_mem < 0:
            raise TypeError(f"shared_mem (size_t): got {shared_mem!r}")
        _check_launch(self.kernel.name, grid, block, self.static_shared + int(shared_mem))


class RawModule:
    def __init__(self, code=None, *, path=None, options=(), backend="nvrtc",
                 translate_cucomplex=False, enable_cooperative_groups=False,
                 name_expressions=None, jitify=None) -> None:
        if code is not None:
            raise NotImplementedError("RawModule(code=...) compiles with CuPy's own flags "
                                      "(-ftz=true): tapescope never uses it")
        if not isinstance(path, str):
            raise TypeError(f"Argument 'path' has incorrect type (expected str, got "
                            f"{type(path).__name__})")
        with open(path, "rb") as f:
            data = f.read()
        cc = int(state.cc)
        if data[:4] == b"\x7fELF":
            arch = _arch_of_cubin(data)
            if arch // 10 != cc // 10 or arch > cc:
                raise RuntimeError(f"CUDA_ERROR_NO_BINARY_FOR_GPU: a cubin for sm_{arch} on a "
                                   f"device of compute capability {cc}")
            state.loaded.append(("cubin", f"sm_{arch}"))
        else:
            text = data.decode("ascii", "replace")
            target = next((ln.split()[1] for ln in text.splitlines()
                           if ln.startswith(".target")), None)
            if target is None:
                raise RuntimeError("CUDA_ERROR_INVALID_PTX: no .target")
            if int(target.split("_")[1].rstrip(",af")) > cc:
                raise RuntimeError(f"CUDA_ERROR_INVALID_PTX: {target} on compute capability {cc}")
            state.loaded.append(("ptx", target))
        digest = hashlib.sha256(data).hexdigest()
        if digest not in _SOURCES:
            _recall(digest)
        if digest not in _SOURCES:
            raise RuntimeError("fake cupy: this binary was not compiled by NVRTC in this "
                               "process or this run's session_cache, so the fake cannot "
                               "emulate it")
        self.shared = _static_shared(_PTX[digest])
        for name, size in self.shared.items():
            if size > MAX_SHARED_PER_BLOCK:  # what ptxas says for a cubin, the JIT for PTX
                raise RuntimeError(f"CUDA_ERROR_INVALID_PTX: entry function '{name}' uses too "
                                   f"much shared data ({size:#x} bytes, "
                                   f"{MAX_SHARED_PER_BLOCK:#x} max)")
        self.mod = _HOST.compile(_SOURCES[digest])

    def get_function(self, name) -> Function:
        if not isinstance(name, str):
            raise TypeError(f"Argument 'name' has incorrect type (expected str, got "
                            f"{type(name).__name__})")
        if name not in self.mod:
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name}")
        return Function(self.mod[name], self.shared.get(name, 0))


# ---- one cache for the run ---------------------------------------------------------------------
_SHARED = "fake-nvrtc"  # beside the kernel cache's own folders: {sha256 of a binary}.json


def session_cache(tmp_path_factory) -> Path:
    """The kernel cache (for TAPESCOPE_CACHE_DIR) of every fake-CUDA test in this run: the
    session's temp folder, above each xdist worker's own, so the library NVRTC and g++ build
    for one dtype is built once per run, not once per worker and module. A test about the
    cache itself uses its own folder. Sharing hides nothing: the cache keys hash the full
    source, flags and target. refmath's own C library (core.native) is loaded first, from the
    per-user cache the rest of the suite uses, so it is not built again into this one."""
    from tapescope.core import native

    native.library()
    native.refmath_ext()
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session folder, shared by the workers
    return base / "fakecuda"


def _shared_dir() -> Path | None:
    root = os.environ.get("TAPESCOPE_CACHE_DIR")
    return Path(root) / _SHARED if root else None


def _remember(digest: str, source: str, ptx: str) -> None:
    """Source and PTX of a binary, where another process of the run finds them (written before
    the cache renames the binary into place, so whoever sees the binary finds these)."""
    _SOURCES[digest] = source
    _PTX[digest] = ptx
    d = _shared_dir()
    if d is None:
        return
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{digest}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"source": source, "ptx": ptx}))
    os.replace(tmp, d / f"{digest}.json")


def _recall(digest: str) -> None:
    d = _shared_dir()
    if d is None or not (d / f"{digest}.json").is_file():
        return
    rec = json.loads((d / f"{digest}.json").read_text())
    _SOURCES[digest] = rec["source"]
    _PTX[digest] = rec["ptx"]


# ---- install ---------------------------------------------------------------------------------
def install(monkeypatch, cc: str = "90", driver: int | None = None) -> types.ModuleType:
    """Put the fake in sys.modules as `cupy` (a device of compute capability `cc`, a driver of
    CUDA version `driver`, 12090 = 12.9; default: as new as the installed NVRTC, whether CUDA 12
    or 13); NVRTC stays real, so it must load."""
    import tapescope.gpu.cuda
    from tapescope.gpu.nvrtc import load_nvrtc, nvrtc_version

    global state
    real_nvrtc = load_nvrtc()  # imported before `cupy` is replaced
    if driver is None:
        major, minor = nvrtc_version()
        driver = major * 1000 + minor * 10
    state = FakeState(cc, driver)
    Stream.all = []
    real_compile = tapescope.gpu.cuda.nvrtc_compile

    def spy(source: str, arch: str, name: str = "tapescope.cu"):
        out = real_compile(source, arch, name)
        _remember(hashlib.sha256(out.binary).hexdigest(), source,
                  out.ptx.decode("ascii", "replace"))
        return out

    monkeypatch.setattr(tapescope.gpu.cuda, "nvrtc_compile", spy)
    cp = types.ModuleType("cupy")
    cp.__version__ = "14.2.0+fake"
    cuda = types.ModuleType("cupy.cuda")
    cuda.nvrtc = real_nvrtc
    cuda.Stream = Stream
    cuda.Event = Event
    cuda.alloc_pinned_memory = alloc_pinned_memory
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1,
                                         driverGetVersion=lambda: state.driver)
    cuda.Device = lambda device=None: types.SimpleNamespace(compute_capability=state.cc)
    cp.cuda = cuda
    cp.zeros = zeros
    cp.RawModule = RawModule
    cp.ndarray = ndarray
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    return cp


def describe_calls(graph: Graph) -> list[Any]:
    """(kernel, grid, block) of each launch a graph holds."""
    return [op.launch for op in graph.ops]
