"""The host backend: CUDA C kernels compiled by g++ behind host_prelude.h, run via ctypes."""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from core.cache import KernelCache, cache_key
from gpu.device import KERNEL_DIR, Buffer, Device, DeviceError, Kernel, Launch, Module
from gpu.signature import KernelSig, parse_kernels

__all__ = ["HostDevice", "HOST_FLAGS", "find_compiler"]

# -ffp-contract=off: no fused multiply-add, each written operation rounds once (the parity
# contract). Never -ffast-math (the prelude refuses it). -fno-math-errno is NOT added either.
HOST_FLAGS = ("-O2", "-ffp-contract=off", "-fPIC", "-shared", "-std=c++17", "-x", "c++")

_INSTALL_HINT = (
    "the host backend compiles kernels with g++ (part of gcc): install it, e.g. "
    "`apt-get install g++` (Debian/Ubuntu), `dnf install gcc-c++` (Fedora), "
    "`xcode-select --install` (macOS), or set TAPESCOPE_CXX to a g++ binary"
)

_CTYPES = {
    "double": ctypes.c_double,
    "float": ctypes.c_float,
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "int": ctypes.c_int,
}


class _Rec(ctypes.Structure):
    _fields_ = [
        ("fn", ctypes.c_void_p),
        ("g", ctypes.c_longlong * 3),
        ("b", ctypes.c_longlong * 3),
        ("args", ctypes.c_void_p),
    ]


def find_compiler() -> str:
    """The g++ the host backend uses ($TAPESCOPE_CXX or g++ on PATH); DeviceError if none."""
    cxx = os.environ.get("TAPESCOPE_CXX", "g++")
    path = shutil.which(cxx)
    if path is None:
        raise DeviceError(f"no C++ compiler found ({cxx!r}): {_INSTALL_HINT}")
    return path


@functools.lru_cache(maxsize=8)
def _compiler_version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise DeviceError(f"compiler {path} does not run ({e}): {_INSTALL_HINT}") from e
    if out.returncode != 0:
        raise DeviceError(f"compiler {path} --version failed: {out.stderr.strip()}")
    return out.stdout.strip()


def _headers_digest() -> str:
    parts = []
    for p in sorted(KERNEL_DIR.iterdir()):
        if p.suffix in (".h", ".cuh"):
            parts.append(p.name)
            parts.append(p.read_bytes().decode("utf-8", "replace"))
    return cache_key(*parts)


def _launcher(sig: KernelSig) -> str:
    casts = []
    for i, p in enumerate(sig.params):
        ctype = f"{'const ' if p.const else ''}{p.ctype}{'*' if p.pointer else ''}"
        casts.append(f"*({ctype}*)a[{i}]")
    call = f"{sig.name}({', '.join(casts)});"
    return (
        f'extern "C" int ts_launch_{sig.name}(long long gx, long long gy, long long gz,'
        " long long bx, long long by, long long bz, void** a) {\n"
        "  (void)a;\n"
        "  gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;\n"
        "  blockDim.x = bx; blockDim.y = by; blockDim.z = bz;\n"
        "  ts_host_error = 0;\n"
        "  for (long long z = 0; z < gz; ++z) for (long long y = 0; y < gy; ++y)\n"
        "  for (long long x = 0; x < gx; ++x) {\n"
        "    blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;\n"
        "    for (long long tz = 0; tz < bz; ++tz) for (long long ty = 0; ty < by; ++ty)\n"
        "    for (long long tx = 0; tx < bx; ++tx) {\n"
        "      threadIdx.x = tx; threadIdx.y = ty; threadIdx.z = tz;\n"
        f"      {call}\n"
        "    }\n"
        "  }\n"
        "  return ts_host_error;\n"
        "}\n"
    )


class HostDevice(Device):
    """Runs kernels on the CPU: one block after another, threads in sequence (docs/devices.md)."""

    kind = "host"

    def __init__(self, reason: str, cache_root: Path | None = None) -> None:
        super().__init__(reason)
        self._cache_root = cache_root
        self._modules: dict[str, Module] = {}

    # --- memory -----------------------------------------------------------------------------
    def alloc(self, n: int, dtype: Any) -> Buffer:
        """A zero-filled, 64-byte aligned host buffer."""
        dt = np.dtype(dtype)
        n = int(n)
        if n < 0:
            raise DeviceError(f"alloc: negative size {n}")
        raw = np.zeros(max(n, 1) * dt.itemsize + 64, dtype=np.uint8)
        off = (-raw.ctypes.data) % 64
        arr = raw[off : off + max(n, 1) * dt.itemsize].view(dt)[:n]
        return Buffer(self, n, dt, (raw, arr), raw.ctypes.data + off)

    def upload(self, buf: Buffer, array: np.ndarray) -> None:
        """Copy into the buffer's memory."""
        flat = self._check_upload(buf, array)
        buf.handle[1][...] = flat

    def download(self, buf: Buffer) -> np.ndarray:
        """A copy of the buffer's memory."""
        self.stats.bytes_to_host += buf.nbytes
        return buf.handle[1].copy()

    def view(self, buf: Buffer, offset: int, n: int) -> Buffer:
        """Elements [offset, offset + n) of buf (same memory)."""
        raw, arr = buf.handle
        return Buffer(self, n, buf.dtype, (raw, arr[offset : offset + n]),
                      buf.ptr + offset * buf.dtype.itemsize)

    # --- code -------------------------------------------------------------------------------
    def compile(self, source: str) -> Module:
        """g++ the source (+ generated launchers) into a cached shared object and load it."""
        cxx = find_compiler()
        version = _compiler_version(cxx)
        sigs = parse_kernels(source)
        if not sigs:
            raise DeviceError("compile: the source defines no extern \"C\" __global__ kernels")
        full = source + "\n\n/* generated host launchers */\n" + "".join(
            _launcher(s) for s in sigs.values()
        )
        flags = HOST_FLAGS + ("-I", str(KERNEL_DIR), "-include", "host_prelude.h")
        key = cache_key("host-v1", version, " ".join(HOST_FLAGS), _headers_digest(), full)
        if key in self._modules:
            return self._modules[key]
        cache = KernelCache(self._cache_root)

        def build(out: Path) -> None:
            with tempfile.TemporaryDirectory(prefix="tapescope-cc-") as td:
                src = Path(td) / "kernels.cu"
                src.write_text(full)
                cmd = [cxx, *flags, str(src), "-o", str(out)]
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                if res.returncode != 0:
                    raise DeviceError(
                        f"host compile failed ({' '.join(cmd[:-3])}):\n{res.stderr[-4000:]}"
                    )

        path, built = cache.get_or_build(key, ".so", build, {"compiler": version.splitlines()[0]})
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            # A verified file that will not load: rebuild once from scratch.
            path.unlink(missing_ok=True)
            path, built = cache.get_or_build(key, ".so", build)
            lib = ctypes.CDLL(str(path))
        kernels = {}
        for name, sig in sigs.items():
            fn = getattr(lib, f"ts_launch_{name}")
            kernels[name] = Kernel(self, sig, ctypes.cast(fn, ctypes.c_void_p).value)
        replay = lib.ts_host_replay
        replay.restype = ctypes.c_longlong
        replay.argtypes = [ctypes.c_void_p, ctypes.c_longlong]
        mod = Module(kernels, path, built)
        mod.lib = lib  # type: ignore[attr-defined]  # keeps the .so loaded
        mod.replay = replay  # type: ignore[attr-defined]
        for k in kernels.values():
            k.module = mod  # type: ignore[attr-defined]
        self._modules[key] = mod
        return mod

    def _pack(self, launch: Launch) -> None:
        if launch.kernel.sig.barrier:
            # A barrier kernel runs one thread per block on the host (see host_prelude.h).
            launch.block = (1, 1, 1)
        store = []
        for p, a in zip(launch.kernel.sig.params, launch.args, strict=True):
            if p.pointer:
                store.append(ctypes.c_void_p(a.ptr))
            else:
                store.append(_CTYPES[p.ctype](a.item()))
        argv = (ctypes.c_void_p * max(len(store), 1))(
            *[ctypes.cast(ctypes.pointer(s), ctypes.c_void_p) for s in store]
        )
        launch.packed = (store, argv)

    def launch_list(self, launches: list[Launch]) -> HostLaunchList:
        """Prebuild a replayable list (the host's counterpart of a CUDA graph)."""
        return HostLaunchList(self, launches)

    def run(self, launches: list[Launch]) -> None:
        """Execute recorded launches in order (one ctypes call)."""
        if launches:
            HostLaunchList(self, launches).replay()


class HostLaunchList:
    """A packed array of launch records replayed by one call into the shared object."""

    def __init__(self, device: HostDevice, launches: list[Launch]) -> None:
        self.device = device
        self.launches = list(launches)
        self._recs = (_Rec * max(len(self.launches), 1))()
        for r, ln in zip(self._recs, self.launches, strict=False):
            r.fn = ln.kernel.handle
            r.g[:] = ln.grid
            r.b[:] = ln.block
            r.args = ctypes.cast(ln.packed[1], ctypes.c_void_p).value
        self._replay = self.launches[0].kernel.module.replay if self.launches else None

    def replay(self) -> None:
        """Run every launch in order; DeviceError names the first kernel that failed."""
        if not self.launches:
            return
        bad = self._replay(ctypes.addressof(self._recs), len(self.launches))
        self.device.stats.launches += len(self.launches)
        if bad:
            k = self.launches[bad - 1].kernel.name
            raise DeviceError(f"kernel {k}: __syncthreads() with more than one host thread")
