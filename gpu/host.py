"""The host backend: CUDA C kernels compiled by g++ behind host_prelude.h, run via ctypes."""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import re
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from core.cache import KernelCache, cache_key
from core.native import cpu_id
from core.native import threads as native_threads
from gpu.device import KERNEL_DIR, Buffer, Device, DeviceError, Kernel, Launch, Module
from gpu.signature import KernelSig, parse_kernels

__all__ = ["HostDevice", "HOST_FLAGS", "ORDERS", "find_compiler", "host_flags"]

# -ffp-contract=off: no fused multiply-add, each written operation rounds once (the parity
# contract). Never -ffast-math (the prelude refuses it).
# -fno-math-errno: sqrt stays the one correctly rounded instruction it always was; the flag only
# drops the libm call gcc keeps beside it to set errno for a negative argument (whose result,
# the default NaN, is the instruction's anyway), a call that kept every loop with a square root
# (Adam) from vectorising. No result bit depends on it (test_host_lanes.py checks sqrt of -x,
# -0, NaN and inf bit for bit). -ffast-math's other parts stay off.
# -march=native: the machine's real ISA (FMA included where the CPU has it), so that a
# contraction, were it ever allowed, would change bits and the parity tests would see it
# (tests/gpu/test_fp_contract.py). Dropped only where the compiler refuses it.
# Vectorising: loops only (-ftree-loop-vectorize with the dynamic cost model, so a loop over
# several pointers is versioned for aliasing), not straight-line code (-fno-tree-slp-vectorize:
# gcc 12's basic-block SLP turned a rotation's `x1*c - x2*s`, `x2*c + x1*s` pair into one
# vfmaddsub132pd despite -ffp-contract=off). A vectorised loop runs its iterations as lanes:
# each lane is one iteration with its own operations in their order, and gcc never reorders a
# floating-point sum across iterations without -fassociative-math, so no bit changes (the lane
# kernels of host_prelude.h rely on it). The loop vectoriser groups statements too (SLP inside
# a loop), so the machine code is what holds the line: tests/gpu/test_fp_contract.py and
# test_host_lanes.py disassemble the library, the diff kernels, the lane kernels and both
# workloads' fused kernels and fail on any FMA instruction.
# -funroll-loops: the matmul kernel's 4x4 tile loops unrolled, a k-step's loads and its four row
# updates overlap (1.7x on the big mlp's products); unrolling repeats operations, it never
# reorders them, and -fno-variable-expansion-in-unroller keeps each accumulator one variable
# (gcc splits a float accumulator only under -fassociative-math anyway).
# --param max-unrolled-insns / max-average-unrolled-insns (200 / 80 by default): the matmul
# tile's k-loop is unrolled 8x instead of 2x. After its q loop is vectorised the tile's four
# accumulator rows live in a stack array (the vectoriser makes them memory, and no later pass
# moves them back), so each unrolled body reloads and stores them: a store-to-load round trip
# in every output's chain once per body instead of once per two k-steps (big-mlp products
# 5.2 -> 3.8 ms). Unrolling repeats each k-step's operations in k order; no bit changes.
# --param vect-max-version-for-alias-checks=40 (10 by default): Adam's loop reads and writes
# six pointers (w, g, m, v, ctl, k), more pairs than gcc checks at run time by default, so it
# stayed scalar; with the checks it runs as lanes when the buffers do not overlap and as the
# scalar loop when they do. Lanes are iterations, each with its own operations in order.
# -funswitch-loops: a loop-invariant test inside a loop (binary_fwd/bwd's broadcast flags) is
# taken once, outside, and each copy of the loop keeps the other statements as written: only
# which branch runs is decided earlier (binary kernels ~0.8 -> ~0.63 ms per big-mlp episode).
HOST_FLAGS = ("-O2", "-ffp-contract=off", "-march=native", "-ftree-loop-vectorize",
              "-fno-tree-slp-vectorize", "-fvect-cost-model=dynamic", "-funroll-loops",
              "-fno-variable-expansion-in-unroller", "--param=max-unrolled-insns=800",
              "--param=max-average-unrolled-insns=400", "-fno-math-errno",
              "--param=vect-max-version-for-alias-checks=40", "-funswitch-loops", "-fPIC",
              "-shared", "-std=c++17", "-x", "c++")
# The fibers of host_prelude.h switch stacks by hand: a CET shadow stack must not be claimed.
_X86_FLAGS = ("-fcf-protection=none",)
ORDERS = ("forward", "reverse", "both")

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


@functools.lru_cache(maxsize=8)
def host_flags(cxx: str) -> tuple[str, ...]:
    """HOST_FLAGS as this compiler and CPU take them (-march=native only where accepted)."""
    flags = list(HOST_FLAGS)
    if platform.machine() in ("x86_64", "AMD64"):
        at = flags.index("-march=native") + 1
        flags[at:at] = _X86_FLAGS
    with tempfile.TemporaryDirectory(prefix="tapescope-cc-") as td:
        src = Path(td) / "probe.cc"
        src.write_text("int ts_probe(int x) { return x + 1; }\n")
        for drop in ((), ("-march=native",), ("-march=native", *_X86_FLAGS)):
            trial = [f for f in flags if f not in drop]
            res = subprocess.run([cxx, *trial, str(src), "-o", str(Path(td) / "probe.so")],
                                 capture_output=True, text=True, timeout=120)
            if res.returncode == 0:
                return tuple(trial)
    return tuple(f for f in flags if f not in ("-march=native", *_X86_FLAGS))


def _headers_digest() -> str:
    parts = []
    for p in sorted(KERNEL_DIR.iterdir()):
        if p.suffix in (".h", ".cuh"):
            parts.append(p.name)
            parts.append(p.read_bytes().decode("utf-8", "replace"))
    return cache_key(*parts)


def _launcher(sig: KernelSig, lanes: bool = False) -> str:
    casts = []
    for i, p in enumerate(sig.params):
        ctype = f"{'const ' if p.const else ''}{p.ctype}{'*' if p.pointer else ''}"
        casts.append(f"*({ctype}*)a[{i}]")
    call = f"{sig.name}({', '.join(casts)});"
    # A kernel with a barrier runs its block's threads as fibers, a lane kernel runs runs of
    # threads in one call (host_prelude.h)
    return (
        f"static void ts_body_{sig.name}(void** a) {{ (void)a; {call} }}\n"
        f'extern "C" int ts_launch_{sig.name}(long long gx, long long gy, long long gz,'
        " long long bx, long long by, long long bz, void** a, int order, int nthreads) {\n"
        f"  return ts_run_grid(ts_body_{sig.name}, a, gx, gy, gz, bx, by, bz,"
        f" {int(sig.barrier)}, {int(lanes)}, order, nthreads);\n"
        "}\n"
    )


# ---- lane kernels: which kernels may run a run of threads in one call ------------------------

# The loops host_prelude.h defines with lanes; a kernel source may define them only under
# `#ifndef NAME` (so the prelude's definition is the one used), never #undef them.
LANE_LOOPS = ("TS_GRID_STRIDE", "TS_BLOCK_STRIDE")
_COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)((?:[^\n]*\\\n)*[^\n]*)", re.M)
_KERNEL_HEAD_RE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)\s*\{')
# what a lane kernel's body may not contain once its lane loops are taken out
_LANE_FORBIDDEN = re.compile(r"\b(threadIdx|__syncthreads|__shared__|return|break|goto|asm|"
                             r"__asm__|setjmp|longjmp)\b")


def _block(text: str, open_brace: int) -> int:
    """The index just past the brace that closes the one at open_brace."""
    depth = 0
    for i in range(open_brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise DeviceError("compile: unbalanced braces in the kernel source")


def _strip_call(body: str, name: str) -> str | None:
    """body with every `name(...)` invocation removed (None if one is not closed)."""
    out, at = [], 0
    for m in re.finditer(rf"\b{name}\s*\(", body):
        if m.start() < at:
            continue
        depth, i = 0, m.end() - 1
        while i < len(body):
            depth += {"(": 1, ")": -1}.get(body[i], 0)
            if depth == 0:
                break
            i += 1
        else:
            return None
        out.append(body[at:m.start()])
        at = i + 1
    return "".join(out) + body[at:]


def _split_loops(body: str, loops: list[str]) -> tuple[str, list[str]] | None:
    """(the body without its lane loops, each lane loop's statement); None where a loop's
    extent is unclear (a bracket not closed, an `else` after a single statement) or one lane
    loop holds another."""
    pat = re.compile(r"\b(" + "|".join(loops) + r")\s*\(")
    outside, stmts, at = [], [], 0
    for m in pat.finditer(body):
        if m.start() < at:
            continue
        depth, i = 0, m.end() - 1
        while i < len(body):  # the macro's arguments
            depth += {"(": 1, ")": -1}.get(body[i], 0)
            if depth == 0:
                break
            i += 1
        j = i + 1
        while j < len(body) and body[j].isspace():
            j += 1
        if j >= len(body):
            return None
        if body[j] == "{":
            try:
                end = _block(body, j)
            except DeviceError:
                return None
        else:  # one statement: up to its `;` outside brackets
            depth, end = 0, j
            while end < len(body) and not (body[end] == ";" and depth == 0):
                depth += {"(": 1, ")": -1, "[": 1, "]": -1, "{": 1, "}": -1}.get(body[end], 0)
                end += 1
            end += 1
            if re.match(r"\s*else\b", body[end:]):
                return None
        stmt = body[j:end]
        if pat.search(stmt):
            return None
        outside.append(body[at:m.start()])
        stmts.append(stmt)
        at = end
    outside.append(body[at:])
    return " ".join(outside), stmts


_NAME = r"(?<![\w.>])([A-Za-z_]\w*)"
_ASSIGN_OP = r"(?:<<=|>>=|[-+*/%&|^]?=)(?!=)"
_SCALAR_WRITE = re.compile(_NAME + r"\s*" + _ASSIGN_OP + r"|" + _NAME + r"\s*(?:\+\+|--)|"
                           r"(?:\+\+|--)\s*" + _NAME + r"|(?:^|[(,=?:]|return)\s*&\s*" + _NAME)
_ELEMENT_WRITE = re.compile(_NAME + r"\s*((?:\[[^\]]*\]|\.\w+|->\w+)+)\s*(?:" + _ASSIGN_OP
                            + r"|\+\+|--)")


def _carries_state(outside: str, stmts: list[str], params: str) -> bool:
    """Whether a lane loop writes a variable that outlives one iteration: a scalar parameter,
    or a local declared outside the loop (a thread's running count, an array), written,
    incremented or address-taken inside it. Run as lanes, the threads would share it. Writes
    through a pointer (a parameter, or a pointer local set outside the loop) are memory."""
    pointers = {m.group(1) for m in re.finditer(r"\*\s*(\w+)\s*(?:,|$)", params)}
    pointers |= {m.group(1) for m in re.finditer(r"\*\s*(\w+)\s*=", outside)}
    names = set(re.findall(r"\b[A-Za-z_]\w*\b", outside + " " + params))
    for stmt in stmts:
        for m in _SCALAR_WRITE.finditer(stmt):
            if next(g for g in m.groups() if g) in names:
                return True
        for m in _ELEMENT_WRITE.finditer(stmt):
            base, path = m.group(1), m.group(2)
            through_pointer = base in pointers and path.startswith(("[", "->"))
            if base in names and not through_pointer:
                return True
            if base in pointers and re.search(rf"\b{base}\s*\[", outside):
                return True  # declared or indexed as an array outside: not plainly a pointer
    return False


def lane_kernels(source: str) -> frozenset[str]:
    """The kernels of `source` that run runs of threads in one call (host_prelude.h, "lanes").

    A kernel qualifies when every way its body can tell threads apart is a lane loop
    (LANE_LOOPS): its body uses one, and once they are taken out it names no threadIdx, no
    barrier, no __shared__, and has no return, break or goto (each would end the other lanes'
    work too); no macro of the source other than the lane loops, and no code outside the kernel
    bodies, mentions threadIdx; the source includes only the kernel directory's headers (none of
    which names threadIdx: tests/gpu/test_host_lanes.py); and the lane loops are the prelude's
    (defined in the source only under their #ifndef, never #undef); and no lane loop writes a
    variable that outlives one iteration (`_carries_state`: a thread's running count would be
    shared by the lanes). Code outside a lane loop then cannot tell which thread runs it, so
    running it once per run of threads changes nothing, and each iteration is one thread's.
    """
    text = _COMMENT_RE.sub(" ", source)
    for inc in re.findall(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', text, re.M):
        if "/" in inc or not (KERNEL_DIR / inc).is_file():
            return frozenset()
    loops = []
    for name in LANE_LOOPS:
        if re.search(rf"#[ \t]*undef[ \t]+{name}\b", text):
            continue
        defs = [m.start() for m in _DEFINE_RE.finditer(text) if m.group(1) == name]
        if all(re.search(rf"#[ \t]*ifndef[ \t]+{name}[ \t]*\n[ \t]*$", text[:d]) for d in defs):
            loops.append(name)
    tainted = {m.group(1) for m in _DEFINE_RE.finditer(text)
               if "threadIdx" in m.group(2) and m.group(1) not in LANE_LOOPS}
    bodies, params, rest, at = {}, {}, [], 0
    for m in _KERNEL_HEAD_RE.finditer(text):
        if m.start() < at:
            continue
        end = _block(text, m.end() - 1)
        bodies[m.group(1)] = text[m.end():end - 1]
        params[m.group(1)] = m.group(2)
        rest.append(text[at:m.start()])
        at = end
    rest.append(text[at:])
    outside = _DEFINE_RE.sub(" ", "".join(rest))
    if "threadIdx" in outside or not loops:
        return frozenset()
    ok = set()
    for name, body in bodies.items():
        if not any(re.search(rf"\b{loop}\s*\(", body) for loop in loops):
            continue
        stripped = body
        for loop in loops:
            stripped = _strip_call(stripped, loop) if stripped is not None else None
        if stripped is None or _LANE_FORBIDDEN.search(stripped):
            continue
        if any(re.search(rf"\b{t}\b", stripped) for t in tainted):
            continue
        split = _split_loops(body, loops)
        if split is None or _carries_state(*split, params[name]):
            continue
        ok.add(name)
    return frozenset(ok)


_ERRORS = {
    1: "__syncthreads() reached with more than one thread where the launcher saw no barrier "
       "(a barrier inside a __device__ helper?)",
    2: "__syncthreads() reached by only some threads of a block (the others returned)",
    3: "no memory for the threads' stacks",
}


class HostDevice(Device):
    """Runs kernels on the CPU with their real blockDim (docs/devices.md): a barrier kernel's
    threads as fibers, a lane kernel's (`lane_kernels`) runs of threads in one vectorised call,
    any other kernel's threads one after another; a launch's blocks on up to ``threads`` OS
    threads (independent units: the bits do not depend on the count).

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
        lanes = lane_kernels(source)
        full = source + "\n\n/* generated host launchers */\n" + "".join(
            _launcher(s, s.name in lanes) for s in sigs.values()
        )
        cflags = host_flags(cxx)
        flags = cflags + ("-I", str(KERNEL_DIR), "-include", "host_prelude.h")
        # -march=native code is keyed by the CPU too: a shared home may hold another model's
        key = cache_key("host-v3", version, " ".join(cflags), cpu_id(), _headers_digest(), full)
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
        replay.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_int]
        mod = Module(kernels, path, built)
        mod.lanes = lanes  # type: ignore[attr-defined]
        mod.lib = lib  # type: ignore[attr-defined]  # keeps the .so loaded
        mod.replay = replay  # type: ignore[attr-defined]
        for k in kernels.values():
            k.module = mod  # type: ignore[attr-defined]
        self._modules[key] = mod
        return mod

    def _pack(self, launch: Launch) -> None:
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
        start = ctypes.addressof(self._recs) + lo * ctypes.sizeof(_Rec)
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
