"""The host backend: CUDA C kernels compiled by g++ behind host_prelude.h, run via ctypes.

The backend is three jobs in three modules: finding g++ and its flags (gpu.host_compiler), the C
launchers appended to a source (gpu.host_launcher), built from what the code generators state of
each kernel (gpu.kernel_facts: lanes, barrier), and the device here: memory, compile-and-load
through the kernel cache, launch lists and their replay in one or more thread orders.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from tapescope.core.cache import KernelCache, cache_key
from tapescope.core.native import cpu_id
from tapescope.core.native import threads as native_threads
from tapescope.core.progress import progress
from tapescope.gpu import host_compiler
from tapescope.gpu.device import Buffer, Device, DeviceError, Kernel, Launch, Module
from tapescope.gpu.host_launcher import LaunchRecord, launchers, pack_args
from tapescope.gpu.kernel_facts import Facts, KernelFacts
from tapescope.gpu.signature import parse_kernels

__all__ = ["HostDevice", "HostLaunchList", "ORDERS"]

ORDERS = ("forward", "reverse", "both")


_ERRORS = {
    1: "__syncthreads() reached with more than one thread where the launcher saw no barrier "
       "(a barrier inside a __device__ helper?)",
    2: "__syncthreads() reached by only some threads of a block (the others returned)",
    3: "no memory for the threads' stacks",
}


class HostDevice(Device):
    """Runs kernels on the CPU with their real blockDim (docs/devices.md): a barrier kernel's
    threads as fibers, a lane kernel's runs of threads in one vectorised call (which kernels are
    which: the ``facts`` their source was compiled with, gpu.kernel_facts), any other kernel's
    threads one after another; a launch's blocks on up to ``threads`` OS threads (independent
    units: the bits do not depend on the count).

    ``orders``: "forward" runs blocks and threads in index order (lanes and the block pool
    included), "reverse" runs blocks and threads last to first, one thread after another;
    "both" runs every launch list forward, then thread by thread forward (where that is another
    schedule: lanes or more than one thread), then reverse, from the same memory, and raises
    DeviceError naming the kernel when the bits differ (a missing barrier, a race). Default:
    $TAPESCOPE_HOST_ORDERS, else "forward". ``threads``: None follows core.native.threads()
    ($TAPESCOPE_THREADS / set_threads).
    """

    kind = "host"

    def __init__(self, reason: str, cache_root: Path | None = None,
                 orders: str | None = None, threads: int | None = None) -> None:
        super().__init__(reason)
        self._cache_root = cache_root
        self._modules: dict[str, Module] = {}
        self._memory: weakref.WeakValueDictionary[int, np.ndarray] = (
            weakref.WeakValueDictionary())
        self._n_alloc = 0
        self.orders = orders or os.environ.get("TAPESCOPE_HOST_ORDERS") or "forward"
        if self.orders not in ORDERS:
            raise DeviceError(f"host thread orders {self.orders!r}: one of {', '.join(ORDERS)}")
        self.threads = threads

    def n_threads(self) -> int:
        """OS threads a launch may use: ``threads``, else core.native.threads()."""
        return max(1, int(self.threads if self.threads is not None else native_threads()))

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
        self._n_alloc += 1
        self._memory[self._n_alloc] = raw  # what orders="both" snapshots
        return Buffer(self, n, dt, (raw, arr), raw.ctypes.data + off)

    def upload(self, buf: Buffer, array: np.ndarray) -> None:
        """Copy into the buffer's memory."""
        flat = self._check_upload(buf, array)
        buf.handle[1][...] = flat

    def download(self, buf: Buffer) -> np.ndarray:
        """A copy of the buffer's memory."""
        self.stats.bytes_to_host += buf.nbytes
        return buf.handle[1].copy()

    def host_view(self, buf: Buffer) -> np.ndarray:
        """The buffer's memory itself, read-only (no copy: the host's memory is the device's)."""
        arr = buf.handle[1].view()
        arr.flags.writeable = False
        return arr

    def view(self, buf: Buffer, offset: int, n: int) -> Buffer:
        """Elements [offset, offset + n) of buf (same memory)."""
        raw, arr = buf.handle
        return Buffer(self, n, buf.dtype, (raw, arr[offset : offset + n]),
                      buf.ptr + offset * buf.dtype.itemsize)

    # --- code -------------------------------------------------------------------------------
    def compile(self, source: str, facts: Facts | None = None) -> Module:
        """g++ the source (+ generated launchers) into a cached shared object and load it.

        ``facts`` (gpu.kernel_facts), by kernel name, say which kernels run as lanes and which
        have a barrier; a kernel they do not name runs one thread after another, as fibers where
        its body calls __syncthreads (``KernelSig.barrier``). Facts naming a kernel the source
        does not define are a stale table: DeviceError."""
        cxx = host_compiler.find_compiler()
        version = host_compiler.compiler_version(cxx)
        sigs = parse_kernels(source)
        if not sigs:
            raise DeviceError("compile: the source defines no extern \"C\" __global__ kernels")
        facts = dict(facts or {})
        stale = sorted(set(facts) - set(sigs))
        if stale:
            raise DeviceError(f"compile: kernel facts for kernels the source does not define: "
                              f"{', '.join(stale[:5])}")
        plan = {n: facts.get(n, KernelFacts(barrier=s.barrier)) for n, s in sigs.items()}
        lanes = frozenset(n for n, f in plan.items() if f.lanes)
        full = source + launchers(sigs.values(), plan)
        cflags = host_compiler.host_flags(cxx)
        # -march=native code is keyed by the CPU too: a shared home may hold another model's
        key = cache_key("host-v3", version, " ".join(cflags), cpu_id(),
                        host_compiler.headers_digest(), full)
        if key in self._modules:
            return self._modules[key]
        cache = KernelCache(self._cache_root)

        def build(out: Path) -> None:
            # the first compile of a big source takes a minute: say so on a terminal
            with progress(f"compiling {len(sigs)} host kernels with {Path(cxx).name} "
                          "(cached after)"):
                host_compiler.build_shared_object(cxx, cflags, full, out)

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
        replay.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_int]
        mod = Module(kernels, path, built)
        mod.lanes = lanes  # type: ignore[attr-defined]
        mod.facts = plan  # type: ignore[attr-defined]  # what each launcher was built from
        mod.lib = lib  # type: ignore[attr-defined]  # keeps the .so loaded
        mod.replay = replay  # type: ignore[attr-defined]
        for k in kernels.values():
            k.module = mod  # type: ignore[attr-defined]
        self._modules[key] = mod
        return mod

    def _pack(self, launch: Launch) -> None:
        launch.packed = pack_args(launch.kernel.sig, launch.args)

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
        self._recs = (LaunchRecord * max(len(self.launches), 1))()
        for r, ln in zip(self._recs, self.launches, strict=False):
            r.fn = ln.kernel.handle
            r.g[:] = ln.grid
            r.b[:] = ln.block
            r.args = ctypes.cast(ln.packed[1], ctypes.c_void_p).value
        self._replay = self.launches[0].kernel.module.replay if self.launches else None
        # "both" restores the device's memory between the two runs: only lists whose buffers
        # all come from this device's alloc can be run twice (not a test double's arrays).
        ours = {id(m) for m in device._memory.values()}
        self._own = all(id(a.handle[0]) in ours for ln in self.launches for a in ln.args
                        if isinstance(a, Buffer))

    def replay(self) -> None:
        """Run every launch in order; DeviceError names the first kernel that failed."""
        if not self.launches:
            return
        if self.device.orders == "both" and self._own:
            self._replay_both()
        else:
            self._call(_REVERSE if self.device.orders == "reverse" else _FORWARD)
        self.device.stats.launches += len(self.launches)

    def _call(self, order: int, lo: int = 0, hi: int | None = None) -> None:
        hi = len(self.launches) if hi is None else hi
        start = ctypes.addressof(self._recs) + lo * ctypes.sizeof(LaunchRecord)
        threads = self.device.n_threads() if order == _FORWARD else 1
        bad = self._replay(start, hi - lo, order, threads)
        if bad:
            k = self.launches[lo + bad // 4 - 1].kernel.name
            raise DeviceError(f"kernel {k}: {_ERRORS.get(bad % 4, 'failed')}")

    def schedules(self) -> list[int]:
        """The orders "both" runs: forward, thread by thread forward where that is another
        schedule (a lane kernel, or more than one OS thread), reverse."""
        lanes = any(ln.kernel.name in getattr(ln.kernel.module, "lanes", ())
                    for ln in self.launches)
        if lanes or self.device.n_threads() > 1:
            return [_FORWARD, _SERIAL, _REVERSE]
        return [_FORWARD, _REVERSE]

    def _replay_both(self) -> None:
        """Every schedule from the same memory; the bits must agree."""
        mem = list(self.device._memory.values())
        before = [m.copy() for m in mem]
        order = self.schedules()
        self._call(order[0])
        first = [m.copy() for m in mem]
        same = True
        for o in order[1:]:
            _restore(mem, before)
            self._call(o)
            same = same and all(np.array_equal(a, b) for a, b in zip(first, mem, strict=True))
        if same:
            return
        # Find the first launch whose schedules disagree, one launch at a time.
        _restore(mem, before)
        for i, ln in enumerate(self.launches):
            pre = [m.copy() for m in mem]
            self._call(order[0], i, i + 1)
            post = [m.copy() for m in mem]
            for o in order[1:]:
                _restore(mem, pre)
                self._call(o, i, i + 1)
                for a, b in zip(post, mem, strict=True):
                    if not np.array_equal(a, b):
                        at = int(np.flatnonzero(a != b)[0])
                        raise DeviceError(
                            f"kernel {ln.kernel.name}: the result depends on the order threads "
                            f"run in (forward vs {_ORDER_NAMES[o]} differ at byte {at} of a "
                            f"{a.size}-byte allocation): a missing __syncthreads() or threads "
                            "racing on one element"
                        )
            _restore(mem, post)
        raise DeviceError("the launch list gives different bits forward and reverse, but no "
                          "single launch does: a kernel depends on memory it does not own")


# host_prelude.h's order bits: forward (lanes, the block pool), reverse, thread by thread
_FORWARD, _REVERSE, _SERIAL = 0, 1, 2
_ORDER_NAMES = {_REVERSE: "reverse", _SERIAL: "thread by thread"}


def _restore(mem: list[np.ndarray], saved: list[np.ndarray]) -> None:
    for m, s in zip(mem, saved, strict=True):
        m[...] = s
