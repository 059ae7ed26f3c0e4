"""A stand-in for the slice of CuPy that gpu/cuda.py uses, backed by the host backend.

It lets the cuda backend's Python code (NVRTC options, PTX caching, RawModule loading, stream
use, graph capture and replay, transfers) run on a machine without a GPU: "PTX" is the CUDA C
source itself, and RawModule compiles it with the host backend. It proves the plumbing, not
the GPU's arithmetic (that is what tests/gpu/test_cuda.py does on a real device).
"""

from __future__ import annotations

import types

import numpy as np

from gpu.device import Buffer
from gpu.host import HostDevice

_HOST = HostDevice("fake cupy")
_current: list = []
seen_options: list[tuple[str, ...]] = []


class _Mem:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class ndarray:  # noqa: N801  (CuPy's name)
    def __init__(self, a: np.ndarray) -> None:
        self._a = a
        self.data = _Mem(a.ctypes.data)
        self.dtype = a.dtype

    def __getitem__(self, sl) -> ndarray:
        return ndarray(self._a[sl])

    def set(self, host: np.ndarray, stream=None) -> None:
        self._a[...] = host

    def get(self, stream=None) -> np.ndarray:
        return self._a.copy()


def zeros(n: int, dtype) -> ndarray:
    return ndarray(np.zeros(n, dtype))


class Graph:
    def __init__(self, calls: list) -> None:
        self.calls = calls

    def launch(self, stream=None) -> None:
        for fn, args in self.calls:
            fn(*args)


class Stream:
    def __init__(self, non_blocking: bool = False) -> None:
        self.capturing: list | None = None

    def __enter__(self) -> Stream:
        _current.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _current.pop()

    def begin_capture(self) -> None:
        self.capturing = []

    def end_capture(self) -> Graph:
        g, self.capturing = Graph(self.capturing or []), None
        return g

    def synchronize(self) -> None:
        pass


class _Function:
    def __init__(self, kernel) -> None:
        self.kernel = kernel

    def _run(self, grid, block, args) -> None:
        conv = []
        assert len(args) == len(self.kernel.sig.params)
        for a in args:
            if isinstance(a, ndarray):
                flat = a._a.reshape(-1)
                conv.append(Buffer(_HOST, flat.size, flat.dtype, (flat, flat), a.data.ptr))
            else:
                conv.append(a)
        _HOST.run([self.kernel.record(grid, block, *conv)])

    def __call__(self, grid, block, args, shared_mem: int = 0) -> None:
        s = _current[-1] if _current else None
        if s is not None and s.capturing is not None:
            s.capturing.append((self._run, (grid, block, args)))
        else:
            self._run(grid, block, args)


class RawModule:
    def __init__(self, path: str) -> None:
        with open(path) as f:
            self.mod = _HOST.compile(f.read())

    def get_function(self, name: str) -> _Function:
        return _Function(self.mod[name])


class NVRTCError(RuntimeError):
    pass


def _nvrtc() -> types.SimpleNamespace:
    progs: dict[int, str] = {}

    def create(src, name, headers, include_names):
        assert "refmath.cuh" in include_names  # the headers travel with the program
        progs[len(progs) + 1] = src
        return len(progs)

    def compile_(prog, options):
        seen_options.append(tuple(options))

    return types.SimpleNamespace(
        createProgram=create, compileProgram=compile_, getPTX=lambda p: progs[p].encode(),
        getProgramLog=lambda p: "", destroyProgram=lambda p: None, NVRTCError=NVRTCError,
        getVersion=lambda: (12, 4))


def install(monkeypatch) -> types.ModuleType:
    """Put the fake in sys.modules as `cupy` (with cupy.cuda, cupy.cuda.nvrtc)."""
    cp = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    cuda.nvrtc = _nvrtc()
    cuda.Stream = Stream
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)
    cuda.Device = lambda i: types.SimpleNamespace(compute_capability="90")
    cp.cuda = cuda
    cp.zeros = zeros
    cp.RawModule = RawModule
    cp.ndarray = ndarray
    monkeypatch.setitem(__import__("sys").modules, "cupy", cp)
    monkeypatch.setitem(__import__("sys").modules, "cupy.cuda", cuda)
    monkeypatch.setitem(__import__("sys").modules, "cupy.cuda.nvrtc", cuda.nvrtc)
    return cp
