"""The CUDA backend: NVRTC through CuPy, launches on one stream, episodes as CUDA graphs.

Compilation goes through `cupy.cuda.nvrtc` directly, not `cupy.RawModule(code=...)`: CuPy's
`_compile_with_cache_cuda` appends `-ftz=true` to every option tuple (cupy/cuda/compiler.py),
which flushes float32 subnormals to zero and breaks float32 parity with the host. We compile
with our own options (`--fmad=false -ftz=false -prec-div=true -prec-sqrt=true`), keep the PTX in
our own cache and load it with `cupy.RawModule(path=...)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from core.cache import KernelCache, cache_key
from gpu.device import KERNEL_DIR, Buffer, Device, DeviceError, Kernel, Launch, Module
from gpu.signature import parse_kernels

__all__ = ["CudaDevice", "cuda_unavailable_reason", "NVRTC_FLAGS"]

# --fmad=false: no contraction into FMA (the parity contract). -ftz=false: keep float32
# subnormals (CuPy's own path would force -ftz=true). IEEE-rounded division and sqrt.
NVRTC_FLAGS = ("--fmad=false", "-ftz=false", "-prec-div=true", "-prec-sqrt=true", "--std=c++14")


def cuda_unavailable_reason() -> str | None:
    """None when CuPy imports and a CUDA device answers; else the one-line reason."""
    try:
        import cupy
    except ImportError:
        return "CuPy not installed"
    except Exception as e:  # a broken install raises all sorts of things
        return f"CuPy failed to import: {type(e).__name__}: {e}"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"no CUDA driver/device: {e}"
    if n < 1:
        return "no CUDA device"
    try:
        _ = cupy.cuda.Device(0).compute_capability
    except Exception as e:
        return f"CUDA device does not answer: {e}"
    return None


class CudaDevice(Device):
    """Device 0 through CuPy. All work goes to one non-blocking stream (graph-capturable)."""

    kind = "cuda"

    def __init__(self, reason: str, cache_root: Path | None = None) -> None:
        import cupy

        super().__init__(reason)
        self.cp = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.arch = cupy.cuda.Device(0).compute_capability
        self._cache_root = cache_root
        self._modules: dict[str, Module] = {}

    def alloc(self, n: int, dtype: Any) -> Buffer:
        """A zero-filled device array."""
        dt = np.dtype(dtype)
        with self.stream:
            arr = self.cp.zeros(max(int(n), 1), dtype=dt)
        return Buffer(self, int(n), dt, arr, arr.data.ptr)

    def upload(self, buf: Buffer, array: np.ndarray) -> None:
        """Host → device on the device stream."""
        flat = self._check_upload(buf, array)
        if buf.n:
            buf.handle[: buf.n].set(flat, stream=self.stream)

    def download(self, buf: Buffer) -> np.ndarray:
        """Device → host (synchronous)."""
        self.stats.bytes_to_host += buf.nbytes
        return buf.handle[: buf.n].get(stream=self.stream)

    def view(self, buf: Buffer, offset: int, n: int) -> Buffer:
        """Elements [offset, offset + n) of buf (a CuPy view, same memory)."""
        arr = buf.handle[offset : offset + max(n, 1)]
        return Buffer(self, n, buf.dtype, arr, buf.ptr + offset * buf.dtype.itemsize)

    def compile(self, source: str) -> Module:
        """NVRTC (our flags, no -ftz) → PTX in the per-user cache → cupy.RawModule."""
        from cupy.cuda import nvrtc

        sigs = parse_kernels(source)
        if not sigs:
            raise DeviceError("compile: the source defines no extern \"C\" __global__ kernels")
        headers = sorted(p for p in KERNEL_DIR.iterdir() if p.suffix in (".cuh", ".h"))
        headers = [p for p in headers if p.name != "host_prelude.h"]
        hnames = [p.name for p in headers]
        htexts = [p.read_text() for p in headers]
        arch = f"compute_{self.arch}"
        opts = (*NVRTC_FLAGS, f"--gpu-architecture={arch}")
        version = ".".join(map(str, nvrtc.getVersion()))
        key = cache_key("cuda-v1", version, " ".join(opts), *hnames, *htexts, source)
        if key in self._modules:
            return self._modules[key]

        def build(out: Path) -> None:
            prog = nvrtc.createProgram(source, "tapescope.cu", htexts, hnames)
            try:
                try:
                    nvrtc.compileProgram(prog, opts)
                except nvrtc.NVRTCError as e:
                    log = nvrtc.getProgramLog(prog)
                    raise DeviceError(f"NVRTC compile failed ({e}):\n{log[-4000:]}") from e
                ptx = nvrtc.getPTX(prog)
            finally:
                nvrtc.destroyProgram(prog)
            out.write_bytes(ptx if isinstance(ptx, bytes) else ptx.encode())

        path, built = KernelCache(self._cache_root).get_or_build(key, ".ptx", build)
        raw = self.cp.RawModule(path=str(path))
        kernels = {n: Kernel(self, s, raw.get_function(n)) for n, s in sigs.items()}
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
        with self.stream:
            for ln in launches:
                ln.kernel.handle(ln.grid, ln.block, ln.packed)
        self.stats.launches += len(launches)

    def capture_graph(self, launches: list[Launch]) -> Any:
        """Capture the launches as one CUDA graph on the device stream; returns the graph."""
        self.stream.begin_capture()
        try:
            with self.stream:
                for ln in launches:
                    ln.kernel.handle(ln.grid, ln.block, ln.packed)
        finally:
            graph = self.stream.end_capture()
        return graph

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
