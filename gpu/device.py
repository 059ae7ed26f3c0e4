"""The backend-neutral pieces: buffers, kernels, launches, counters (opening one: gpu.backends)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tapescope.core.refmath import C_DIR as REFMATH_C_DIR
from tapescope.core.refmath import C_HEADERS as REFMATH_C_HEADERS
from tapescope.gpu.kernel_facts import Facts
from tapescope.gpu.signature import KernelSig, check_args

__all__ = [
    "DeviceError",
    "DeviceStats",
    "Buffer",
    "Kernel",
    "Launch",
    "Device",
    "KERNEL_DIR",
    "INCLUDE_DIRS",
    "REFMATH_C_DIR",
    "header_paths",
    "CompileLimitError",
    "compile_limits",
    "limited",
]

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
#: where a kernel source's #includes are found: gpu's own headers (the host prelude) and the C
#: that core owns and gpu reads from there (refmath's C twin, the host intrinsics: core/refmath/)
INCLUDE_DIRS = (KERNEL_DIR, REFMATH_C_DIR)


def header_paths() -> dict[str, Path]:
    """Every header a kernel source may include, by its include name, sorted by name."""
    paths = [p for p in KERNEL_DIR.iterdir() if p.suffix in (".h", ".cuh")]
    paths += [REFMATH_C_DIR / n for n in REFMATH_C_HEADERS]
    names = [p.name for p in paths]
    if len(set(names)) != len(names):  # one include name, one file: a clash is a packaging bug
        raise DeviceError(f"kernel headers: two files named alike in {INCLUDE_DIRS}")
    return {p.name: p for p in sorted(paths, key=lambda p: p.name)}


class DeviceError(RuntimeError):
    """A backend cannot be opened, a compile failed, or a launch failed."""


class CompileLimitError(DeviceError):
    """The compiler went over the memory or time ``limited`` gave it (a user's kernel file that
    includes /dev/zero, say): its words are not a compile error of the source."""


# (memory bytes, seconds) for the compiles under ``limited``; None: the backend's own
_LIMITS: contextvars.ContextVar[tuple[int, float] | None] = contextvars.ContextVar(
    "compile_limits", default=None)


@contextlib.contextmanager
def limited(memory_bytes: int, seconds: float) -> Iterator[None]:
    """Compiles in this block run with the compiler's address space limited to
    ``memory_bytes`` and its time to ``seconds``; going over is CompileLimitError. Honoured
    where the compiler is a process of its own (the host backend's g++: gpu.host_compiler);
    NVRTC compiles in this process and is not limited (gpu.user_kernels refuses what it can
    see first)."""
    token = _LIMITS.set((int(memory_bytes), float(seconds)))
    try:
        yield
    finally:
        _LIMITS.reset(token)


def compile_limits() -> tuple[int, float] | None:
    """The (memory bytes, seconds) ``limited`` set for this compile, or None."""
    return _LIMITS.get()


@dataclass
class DeviceStats:
    """Traffic and launch counters of one device (reset with `reset`)."""

    launches: int = 0
    bytes_to_host: int = 0
    bytes_to_device: int = 0

    def reset(self) -> None:
        """Zero every counter."""
        self.launches = self.bytes_to_host = self.bytes_to_device = 0


class Buffer:
    """A device allocation of `n` elements of `dtype`; `ptr` is its device address."""

    def __init__(self, device: Device, n: int, dtype: np.dtype, handle: Any, ptr: int) -> None:
        self.device = device
        self.n = int(n)
        self.dtype = np.dtype(dtype)
        self.handle = handle  # host: numpy array, cuda: cupy array (keeps memory alive)
        self.ptr = int(ptr)

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.n * self.dtype.itemsize

    def upload(self, array: np.ndarray) -> None:
        """Copy a host array (same element count; cast-free: dtype must match) into the buffer."""
        self.device.upload(self, array)

    def download(self) -> np.ndarray:
        """A fresh host copy of the whole buffer (counted in `device.stats.bytes_to_host`)."""
        return self.device.download(self)

    def view(self, offset: int, n: int) -> Buffer:
        """Elements [offset, offset + n) of this buffer, sharing its memory."""
        if offset < 0 or n < 0 or offset + n > self.n:
            raise DeviceError(f"view [{offset}, {offset + n}) outside a buffer of {self.n}")
        return self.device.view(self, offset, n)

    def __repr__(self) -> str:
        return f"Buffer({self.device.kind}, n={self.n}, dtype={self.dtype})"


@dataclass
class Launch:
    """One recorded launch: kernel, grid, block, checked arguments (and backend-packed form)."""

    kernel: Kernel
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: list
    packed: Any = field(default=None, repr=False)


def _dims(v: int | tuple[int, ...], what: str) -> tuple[int, int, int]:
    t = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    if not 1 <= len(t) <= 3 or any(
            isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1 for x in t):
        raise DeviceError(f"{what} must be 1-3 positive ints, got {v!r}")
    return tuple(int(x) for x in (t + (1, 1))[:3])  # type: ignore[return-value]


class Kernel:
    """A compiled kernel with its parsed signature; launches are argument-checked."""

    def __init__(self, device: Device, sig: KernelSig, handle: Any) -> None:
        self.device = device
        self.sig = sig
        self.name = sig.name
        self.handle = handle

    def record(self, grid: int | tuple, block: int | tuple, *args: Any) -> Launch:
        """Check the arguments and pack a launch for later (replayed) execution."""
        checked = check_args(self.sig, args, Buffer)
        for a in checked:
            if isinstance(a, Buffer) and a.device is not self.device:
                raise DeviceError(f"kernel {self.name}: buffer from another device")
        launch = Launch(self, _dims(grid, "grid"), _dims(block, "block"), checked)
        self.device._pack(launch)
        return launch

    def __call__(self, grid: int | tuple, block: int | tuple, *args: Any) -> None:
        """Check the arguments and launch now."""
        self.device.run([self.record(grid, block, *args)])


class Module:
    """A compiled source: kernels by name."""

    def __init__(self, kernels: dict[str, Kernel], path: Path | None, built: bool) -> None:
        self.kernels = kernels
        self.path = path
        self.built = built  # False when it came from the cache

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self.kernels[name]
        except KeyError:
            raise DeviceError(f"no kernel named {name!r} in this module") from None

    def __contains__(self, name: str) -> bool:
        return name in self.kernels


class Device:
    """Backend interface: `kind` is "host" or "cuda"; `reason` says why it was chosen."""

    kind = "abstract"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.stats = DeviceStats()

    def describe(self) -> str:
        """The one line users see, e.g. `device: host (CuPy not installed)`."""
        return f"device: {self.kind} ({self.reason})"

    # --- memory -----------------------------------------------------------------------------
    def alloc(self, n: int, dtype: Any) -> Buffer:
        """A zero-filled buffer of n elements."""
        raise NotImplementedError

    def upload(self, buf: Buffer, array: np.ndarray) -> None:
        """Host array → buffer; element count and dtype must match exactly."""
        raise NotImplementedError

    def stage(self, buf: Buffer, array: np.ndarray) -> None:
        """Upload small per-step data (optimizer scalars) read by recorded launches; cuda copies
        it from pinned host memory in stream order. Same checks as `upload`."""
        self.upload(buf, array)

    def download(self, buf: Buffer) -> np.ndarray:
        """Buffer → fresh host array."""
        raise NotImplementedError

    def view(self, buf: Buffer, offset: int, n: int) -> Buffer:
        """A Buffer over elements [offset, offset + n) of buf."""
        raise NotImplementedError

    def host_view(self, buf: Buffer) -> np.ndarray | None:
        """The buffer's memory as a read-only host array without a copy, or None where the
        device's memory is not the host's (cuda). Valid until the next launch or upload."""
        return None

    def _check_upload(self, buf: Buffer, array: np.ndarray) -> np.ndarray:
        a = np.asarray(array)
        if a.dtype != buf.dtype:
            raise DeviceError(f"upload: array dtype {a.dtype} into a {buf.dtype} buffer")
        if a.size != buf.n:
            raise DeviceError(f"upload: {a.size} elements into a buffer of {buf.n}")
        self.stats.bytes_to_device += a.nbytes
        return np.ascontiguousarray(a).reshape(-1)

    # --- code -------------------------------------------------------------------------------
    def compile(self, source: str, facts: Facts | None = None) -> Module:
        """Compile (or fetch from the per-user cache) a CUDA C source; return its kernels.
        ``facts``: what the code that wrote the source says of its kernels (gpu.kernel_facts),
        by kernel name; a backend that needs none ignores them."""
        raise NotImplementedError

    def _pack(self, launch: Launch) -> None:
        raise NotImplementedError

    def run(self, launches: list[Launch]) -> None:
        """Execute recorded launches in order."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all queued work."""
