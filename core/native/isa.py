"""Which instruction set the native code is built for, and how to force each path.

gcc builds the native kernels (``core/native``) and the host backend's kernels (``gpu/host_*``)
with ``-march=native``, so the code the preprocessor and the vectoriser pick depends on the CPU:
``refkernels.c`` takes 64-byte tiles and the embedded-broadcast multiply under AVX-512, 32-byte
tiles under AVX2, and gcc's generic vectors lowered to SSE2 without AVX. A path nobody runs is a
path nobody tests, so ``TAPESCOPE_ISA`` forces one on any CPU that can run it:

=========  ===============================================  =====================================
value      flags added after ``-march=native``              the CPU needs
=========  ===============================================  =====================================
``avx512`` ``-mprefer-vector-width=512`` (below)           avx512f, avx512bw, avx512dq, avx512vl
``avx2``   ``-mno-avx512f`` (every AVX-512 subset off)      avx2
``c``      ``-mno-avx`` (AVX, AVX2, FMA, AVX-512 off: the   x86-64 (SSE2)
           generic C vectors, lowered to SSE2)
=========  ===============================================  =====================================

Unset (or ``native``), the build is the machine's own: ``avx512`` where the CPU has it, else
``avx2``, else ``c``. The bits never depend on the path (every product and add one rounding, no
FMA: ``-ffp-contract=off``; docs/reference-order.md), except a NaN's sign and payload, which the
NaN policy leaves to the implementation: ``core.parity.same_under_nan_policy`` is the one rule
the product and the tests compare by. Forcing a path the CPU lacks, or an unknown value, is an
:class:`ISAError` naming the variable and what this CPU can run. Off x86-64 only ``native``
exists.
"""

from __future__ import annotations

import functools
import os
import platform

__all__ = ["ENV", "TUNE_ENV", "ISAS", "ISAError", "chosen", "cpu_flags", "extra_flags", "runnable",
           "describe"]

ENV = "TAPESCOPE_ISA"
# widest first: the order runnable() lists and the native default picks
ISAS = ("avx512", "avx2", "c")
# -mprefer-vector-width=512: gcc tunes Intel's AVX-512 CPUs (skylake-avx512 .. sapphirerapids)
# to vectorise loops 256 bits wide and AMD's Zen 4 512 wide, so "the AVX-512 build" was two
# different programs (on the Intel Xeon the red team used, the conv's NaN-sign test failed
# while the same source passed on our EPYCs). One width for every AVX-512 CPU: the code that
# is tested and measured here is the code that runs there.
_EXTRA = {"avx512": ("-mprefer-vector-width=512",), "avx2": ("-mno-avx512f",),
          "c": ("-mno-avx",)}
# TAPESCOPE_TUNE=intel|amd: gcc's scheduling and unrolling choices for the other vendor's CPUs
# (the instructions stay this CPU's): the nearest this machine gets to building what an
# Intel (AMD) machine's -march=native builds. The tests run one path tuned for each.
TUNE_ENV = "TAPESCOPE_TUNE"
_TUNES = {"intel": ("-mtune=sapphirerapids",), "amd": ("-mtune=znver3",)}
_NEEDS = {"avx512": ("avx512f", "avx512bw", "avx512dq", "avx512vl"), "avx2": ("avx2",),
          "c": ()}


class ISAError(ValueError):
    """TAPESCOPE_ISA names a path that does not exist or that this CPU cannot run."""


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux: /proc/cpuinfo); empty where they cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def runnable() -> tuple[str, ...]:
    """The paths this CPU can run, widest first (off x86-64: none to choose between)."""
    if not _x86():
        return ()
    have = cpu_flags()
    return tuple(i for i in ISAS if all(f in have for f in _NEEDS[i]))


def chosen() -> str:
    """The path the native code is built for here: ``$TAPESCOPE_ISA`` if set (checked), else
    the widest this CPU runs (``native`` off x86-64)."""
    want = os.environ.get(ENV, "").strip().lower()
    can = runnable()
    if want in ("", "native"):
        return can[0] if can else "native"
    if want not in ISAS:
        raise ISAError(f"{ENV}={want!r} is not a path: one of {', '.join(ISAS)} or native")
    if not _x86():
        raise ISAError(f"{ENV}={want}: only x86-64 has that path (this is "
                       f"{platform.machine()}); unset it")
    if want not in can:
        raise ISAError(f"{ENV}={want}: this CPU lacks {', '.join(_NEEDS[want])} (it runs "
                       f"{', '.join(can) or 'none of them'})")
    return want


def extra_flags(isa: str | None = None) -> tuple[str, ...]:
    """The gcc flags that hold a build to ``isa`` (default: :func:`chosen`), after
    ``-march=native``."""
    isa = chosen() if isa is None else isa
    tune = os.environ.get(TUNE_ENV, "").strip().lower()
    if tune not in ("", "native", *_TUNES):
        raise ISAError(f"{TUNE_ENV}={tune!r}: one of {', '.join(_TUNES)} or native")
    return _EXTRA.get(isa, ()) + (_TUNES.get(tune, ()) if _x86() else ())


def describe() -> str:
    """One line for benchmarks and ``doctor``: the path, and the CPU it runs on."""
    try:
        isa = chosen()
    except ISAError as e:
        isa = f"invalid ({e})"
    forced = os.environ.get(ENV, "").strip()
    return f"{isa}{' (forced by ' + ENV + ')' if forced else ''} on {cpu_model()}"


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what :mod:`platform` says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine()
