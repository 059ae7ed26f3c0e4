"""The CUDA backend: real NVRTC (gpu/nvrtc.py), launches on one stream, episodes as CUDA graphs.

Compilation goes through `gpu.nvrtc.nvrtc_compile` (our flags, never CuPy's `-ftz=true`) to a
cubin for the device's compute capability (PTX only as the fallback `gpu.nvrtc.choose_target`
documents), kept in our own cache and loaded with `cupy.RawModule(path=...)`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np

from tapescope.core.cache import KernelCache, cache_key
from tapescope.core.precision import BFLOAT16
from tapescope.core.progress import progress
from tapescope.gpu.device import Buffer, Device, DeviceError, Kernel, Launch, Module
from tapescope.gpu.kernel_facts import Facts
from tapescope.gpu.nvrtc import (
    NVRTC_FLAGS,
    choose_target,
    cuda_version_text,
    kernel_headers,
    load_nvrtc,
    nvrtc_compile,
    nvrtc_version,
)
from tapescope.gpu.signature import parse_kernels

__all__ = ["CudaDevice", "cuda_unavailable_reason", "NVRTC_FLAGS"]


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def cuda_unavailable_reason() -> str | None:
    """None when CuPy imports, a CUDA device answers and NVRTC loads; else the one-line reason,
    e.g. "CuPy 14.2.0 found, but no CUDA device: cudaErrorNoDevice: ..."."""
    try:
        import cupy
    except ImportError:
        return "CuPy not installed"
    except Exception as e:  # a broken install raises all sorts of things
        return f"CuPy failed to import: {type(e).__name__}: {_one_line(e)}"
    found = f"CuPy {getattr(cupy, '__version__', '?')} found"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        try:
            drv = int(cupy.cuda.runtime.driverGetVersion())
        except Exception:
            drv = -1
        # no libcuda at all reads as "driver insufficient" in CUDA's words: say which it is
        none = " (no NVIDIA driver is installed)" if drv == 0 else ""
        return f"{found}, but no CUDA device{none}: {_one_line(e)}"
    if n < 1:
        return f"{found}, but no CUDA device (the driver reports 0)"
    try:
        _ = cupy.cuda.Device(0).compute_capability
    except Exception as e:
        return f"{found}, but CUDA device 0 does not answer: {_one_line(e)}"
    try:
        load_nvrtc()
    except DeviceError as e:
        return f"{found} and a CUDA device, but {_one_line(e)}"
    return None


class CudaDevice(Device):
    """Device 0 through CuPy. All work goes to one non-blocking stream (graph-capturable)."""

    kind = "cuda"

    def __init__(self, reason: str, cache_root: Path | None = None) -> None:
        import cupy

        super().__init__(reason)
        self.cp = cupy
        nvrtc = load_nvrtc()
        self.nvrtc_version = nvrtc_version()
        self.driver_version = int(cupy.cuda.runtime.driverGetVersion())
        self.cc = int(cupy.cuda.Device(0).compute_capability)
        archs = tuple(int(a) for a in nvrtc.getSupportedArchs())
        self.target = choose_target(self.cc, self.nvrtc_version, archs, self.driver_version)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self._cache_root = cache_root
        self._modules: dict[str, Module] = {}

    def describe(self) -> str:
        """`device: cuda (<reason>; sm_90 cubin, NVRTC 12.9, driver CUDA 12.4)`."""
        return (f"device: cuda ({self.reason}; {self.target.arch} {self.target.kind}, NVRTC "
                f"{cuda_version_text(self.nvrtc_version)}, driver CUDA "
                f"{cuda_version_text(self.driver_version)})")

    def alloc(self, n: int, dtype: Any) -> Buffer:
        """A zero-filled device array."""
        dt = np.dtype(dtype)
        with self.stream:  # bfloat16 (numpy kind "V", unknown to CuPy): held as its bits
            arr = self.cp.zeros(max(int(n), 1), dtype=np.uint16 if dt == BFLOAT16 else dt)
        return Buffer(self, int(n), dt, arr, arr.data.ptr)

    def upload(self, buf: Buffer, array: np.ndarray) -> None:
        """Host → device on the device stream (pageable: the host array is free on return)."""
        flat = self._check_upload(buf, array)
        if buf.n:
            buf.handle[: buf.n].set(_bits(flat), stream=self.stream)

    def stage(self, buf: Buffer, array: np.ndarray) -> None:
        """Per-step data (optimizer scalars) through a pinned host slot: an asynchronous copy
        in stream order, before the graph that reads it. The slot is rewritten only after its
        previous copy finished (an event), so a queued episode never sees the next step's."""
        flat = self._check_upload(buf, array)
        if not buf.n:
            return
        slot = getattr(buf, "_pinned", None)
        if slot is None:
            mem = self.cp.cuda.alloc_pinned_memory(buf.nbytes)
            slot = buf._pinned = [np.frombuffer(mem, dtype=buf.dtype, count=buf.n), None, mem]
        if slot[1] is not None:
            slot[1].synchronize()
        slot[0][...] = flat
        buf.handle[: buf.n].set(_bits(slot[0]), stream=self.stream)
        slot[1] = self.stream.record()

    def download(self, buf: Buffer) -> np.ndarray:
        """Device → host (synchronous)."""
        self.stats.bytes_to_host += buf.nbytes
        out = buf.handle[: buf.n].get(stream=self.stream)
        return out.view(BFLOAT16) if buf.dtype == BFLOAT16 else out

    def view(self, buf: Buffer, offset: int, n: int) -> Buffer:
        """Elements [offset, offset + n) of buf (a CuPy view, same memory)."""
        arr = buf.handle[offset : offset + max(n, 1)]
        return Buffer(self, n, buf.dtype, arr, buf.ptr + offset * buf.dtype.itemsize)

    def compile(self, source: str, facts: Facts | None = None) -> Module:
        """NVRTC (our flags) → cubin (or the PTX fallback) in the per-user cache → RawModule.
        ``facts`` (gpu.kernel_facts) change nothing here: CUDA schedules its own threads."""
        sigs = parse_kernels(source)
        if not sigs:
            raise DeviceError("compile: the source defines no extern \"C\" __global__ kernels")
        tgt = self.target
        hnames, htexts = kernel_headers()
        version = cuda_version_text(self.nvrtc_version)
        key = cache_key("cuda-v2", version, " ".join(NVRTC_FLAGS), tgt.arch, tgt.kind,
                        *hnames, *htexts, source)
        if key in self._modules:
            return self._modules[key]

        def build(out: Path) -> None:
            with progress(f"compiling {len(sigs)} kernels with NVRTC {version} for "
                          f"{tgt.arch} (cached after)"):
                res = nvrtc_compile(source, tgt.arch)
            out.write_bytes(res.binary)

        path, built = KernelCache(self._cache_root).get_or_build(key, f".{tgt.kind}", build)
        try:
            raw = self.cp.RawModule(path=str(path))
            kernels = {n: Kernel(self, s, raw.get_function(n)) for n, s in sigs.items()}
        except Exception as e:
            raise DeviceError(
                f"the driver could not load the {tgt.kind} for {tgt.arch} ({_one_line(e)}); "
                f"NVRTC {version}, driver CUDA {cuda_version_text(self.driver_version)}") from e
        mod = Module(kernels, path, built)
        self._modules[key] = mod
        return mod

    def _pack(self, launch: Launch) -> None:
        launch.packed = tuple(a.handle if isinstance(a, Buffer) else a for a in launch.args)

    def launch_list(self, launches: list[Launch]) -> CudaLaunchList:
        """A replayable list (launched kernel by kernel; `capture_graph` makes a graph)."""
        return CudaLaunchList(self, launches)

    def run(self, launches: list[Launch]) -> None:
        """Launch each recorded kernel on the device stream (asynchronous)."""
        for ln in launches:
            ln.kernel.handle(ln.grid, ln.block, ln.packed, stream=self.stream)
        self.stats.launches += len(launches)

    def capture_graph(self, launches: list[Launch]) -> Any:
        """Capture the launches as one CUDA graph on the device stream; returns the graph."""
        self.stream.begin_capture()
        try:
            for ln in launches:
                ln.kernel.handle(ln.grid, ln.block, ln.packed, stream=self.stream)
        except BaseException:
            # the failed launch invalidated the capture: end it (the stream must not stay
            # capturing), but raise the launch's own error, not end_capture's "capture
            # invalidated", which names no kernel
            with contextlib.suppress(Exception):
                self.stream.end_capture()
            raise
        return self.stream.end_capture()

    def launch_graph(self, graph: Any, n_launches: int) -> None:
        """Replay a captured graph; counts its kernels as launches."""
        graph.launch(stream=self.stream)
        self.stats.launches += n_launches

    def synchronize(self) -> None:
        """Wait for the device stream."""
        self.stream.synchronize()


class CudaLaunchList:
    """Launches replayed in order on the device stream."""

    def __init__(self, device: CudaDevice, launches: list[Launch]) -> None:
        self.device = device
        self.launches = list(launches)

    def replay(self) -> None:
        """Launch every kernel in order."""
        self.device.run(self.launches)


def _bits(a: np.ndarray) -> np.ndarray:
    """What a CuPy array holds of ``a``: a bfloat16 array's bits (uint16), else ``a``."""
    return a.view(np.uint16) if a.dtype == BFLOAT16 else a
