"""The host backend's compiler: finding g++, the flags it compiles kernels with (as this
compiler and CPU take them), and the one g++ run that turns a kernel source into a shared object.

The flags are part of the parity contract (no contraction, no fast math): tests/gpu/
test_fp_contract.py and test_host_lanes.py disassemble what they build.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tapescope.core.cache import cache_key
from tapescope.core.native import isa
from tapescope.gpu.device import (
    INCLUDE_DIRS,
    CompileLimitError,
    DeviceError,
    compile_limits,
    header_paths,
)

__all__ = ["HOST_FLAGS", "find_compiler", "compiler_version", "host_flags", "headers_digest",
           "build_shared_object"]

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
# -funroll-loops (written for the matmul's 4x4 tile; the host now compiles its own mm_T body,
# gpu/kernels/ops_rows.cu): the tile loops unrolled, a k-step's loads and its four row
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

_INSTALL_HINT = (
    "the host backend compiles kernels with g++ (part of gcc): install it, e.g. "
    "`apt-get install g++` (Debian/Ubuntu), `dnf install gcc-c++` (Fedora), "
    "`xcode-select --install` (macOS), or set TAPESCOPE_CXX to a g++ binary"
)


def find_compiler() -> str:
    """The g++ the host backend uses ($TAPESCOPE_CXX or g++ on PATH); DeviceError if none."""
    cxx = os.environ.get("TAPESCOPE_CXX", "g++")
    path = shutil.which(cxx)
    if path is None:
        raise DeviceError(f"no C++ compiler found ({cxx!r}): {_INSTALL_HINT}")
    return path


@functools.lru_cache(maxsize=8)
def compiler_version(path: str) -> str:
    """``cxx --version`` (its text keys the kernel cache)."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise DeviceError(f"compiler {path} does not run ({e}): {_INSTALL_HINT}") from e
    if out.returncode != 0:
        raise DeviceError(f"compiler {path} --version failed: {out.stderr.strip()}")
    return out.stdout.strip()


def host_flags(cxx: str) -> tuple[str, ...]:
    """HOST_FLAGS as this compiler and CPU take them (-march=native only where accepted), with
    the path $TAPESCOPE_ISA forces (core.native.isa: the host kernels run on the same paths as
    the tape's native code)."""
    return _host_flags(cxx, isa.extra_flags())


@functools.lru_cache(maxsize=8)
def _host_flags(cxx: str, extra: tuple[str, ...]) -> tuple[str, ...]:
    flags = list(HOST_FLAGS)
    if platform.machine() in ("x86_64", "AMD64"):
        at = flags.index("-march=native") + 1
        flags[at:at] = _X86_FLAGS + extra
    with tempfile.TemporaryDirectory(prefix="tapescope-cc-") as td:
        src = Path(td) / "probe.cc"
        src.write_text("int ts_probe(int x) { return x + 1; }\n")
        for drop in ((), ("-march=native", *extra), ("-march=native", *_X86_FLAGS, *extra)):
            trial = [f for f in flags if f not in drop]
            res = subprocess.run([cxx, *trial, str(src), "-o", str(Path(td) / "probe.so")],
                                 capture_output=True, text=True, timeout=120)
            if res.returncode == 0:
                return tuple(trial)
    return tuple(f for f in flags if f not in ("-march=native", *_X86_FLAGS, *extra))


def headers_digest() -> str:
    """One hash over every header a kernel may include (name and text): part of the cache key."""
    parts = []
    for name, p in header_paths().items():
        parts.append(name)
        parts.append(p.read_bytes().decode("utf-8", "replace"))
    return cache_key(*parts)


GUARD = Path(__file__).with_name("compile_guard.py")
LIBRARY_COMPILE_S = 600.0  # the library's and fused kernels' compile: no memory limit


def _run_guarded(cmd: list[str]) -> tuple[int, str]:
    """(exit status, stderr) of ``cmd`` run through gpu/compile_guard.py: in its own process
    group, which dies with this process (SIGKILL included) and is killed whole at the
    deadline, under ``gpu.device.limited``'s limits (RLIMIT_AS, RLIMIT_CPU and the wall clock)."""
    mem, secs = compile_limits() or (0, LIBRARY_COMPILE_S)
    cpu = int(secs) + 1 if mem else 0
    argv = [sys.executable, "-I", "-S", str(GUARD), str(os.getpid()), str(mem), str(cpu), "--",
            *cmd]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = p.communicate(timeout=secs)
    except BaseException as e:  # the deadline, Ctrl-C: the compiler and its children go too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        if isinstance(e, subprocess.TimeoutExpired):
            raise CompileLimitError(f"the compiler did not finish within {secs:g} s (it was "
                                    "ended)") from None
        raise
    text = err.decode("utf-8", "replace")
    if mem and p.returncode != 0 and (
            p.returncode in (128 + signal.SIGXCPU, 128 + signal.SIGKILL)
            or any(w in text for w in ("out of memory", "memory exhausted", "bad_alloc",
                                       "Cannot allocate memory", "signal terminated program"))):
        cpu_out = p.returncode == 128 + signal.SIGXCPU or "CPU time limit" in text
        why = f"its {cpu - 1} s of CPU time" if cpu_out else f"its memory limit of {mem >> 20} MiB"
        raise CompileLimitError(f"the compiler went over {why} (it was ended): "
                                f"{' '.join(text.split())[:200]}")
    return p.returncode, text


def build_shared_object(cxx: str, cflags: tuple[str, ...], source: str, out: Path) -> None:
    """g++ ``source`` behind host_prelude.h (the kernel headers on the include path) into the
    shared object ``out``; DeviceError with the compiler's last words when it fails. The
    compiler runs in its own process group that dies with this process (``_run_guarded``)."""
    flags = cflags + tuple(f"-I{d}" for d in INCLUDE_DIRS) + ("-include", "host_prelude.h")
    with tempfile.TemporaryDirectory(prefix="tapescope-cc-") as td:
        src = Path(td) / "kernels.cu"
        src.write_text(source)
        cmd = [cxx, *flags, str(src), "-o", str(out)]
        rc, err = _run_guarded(cmd)
        if rc != 0:
            raise DeviceError(
                f"host compile failed ({' '.join(cmd[:-3])}):\n{err[-4000:]}"
            )
