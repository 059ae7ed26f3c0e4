"""Kernel signatures parsed from CUDA C source, and the argument type check both backends share."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import numpy as np

from tapescope.core import precision

__all__ = ["KernelArgError", "Param", "KernelSig", "parse_kernels", "check_args"]


class KernelArgError(TypeError):
    """A kernel argument does not match the declared parameter type."""


# C scalar type -> numpy dtype. Only these appear in kernel signatures.
_SCALARS = {
    "double": np.dtype(np.float64),
    "float": np.dtype(np.float32),
    "long long": np.dtype(np.int64),
    "unsigned long long": np.dtype(np.uint64),
    "int": np.dtype(np.int32),
    # the half storage types (gpu/kernels/half.cuh): pointers only
    "ts_f16": precision.FLOAT16,
    "ts_bf16": precision.BFLOAT16,
}

# A parameter list holds no ( ) { } ; : each try stops at the next one of them, so a source of
# signatures that never close costs one pass, not one pass per signature (issue 49: 1.2 MB of
# `extern "C" __global__ void k(` took minutes with `[^)]*`)
_KERNEL_RE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^(){};]*)\)\s*\{')
_BRACE = re.compile(r"[{}]")
_BARRIER = re.compile(r"__syncthreads")


@dataclass(frozen=True)
class Param:
    """One declared kernel parameter: C base type, pointer or value, constness, name."""

    name: str
    ctype: str
    pointer: bool
    const: bool

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of the value (or of the pointee)."""
        return _SCALARS[self.ctype]

    def __str__(self) -> str:
        const = "const " if self.const else ""
        return f"{const}{self.ctype}{'*' if self.pointer else ''} {self.name}"


@dataclass(frozen=True)
class KernelSig:
    """A parsed `extern "C" __global__` kernel: name, parameters, whether it has a barrier."""

    name: str
    params: tuple[Param, ...]
    barrier: bool


def _parse_param(text: str, kernel: str) -> Param:
    toks = text.replace("*", " * ").split()
    toks = [t for t in toks if t not in ("__restrict__", "__restrict")]
    if len(toks) < 2:
        raise ValueError(f"kernel {kernel}: cannot parse parameter {text.strip()!r}")
    name = toks[-1]
    rest = toks[:-1]
    const = "const" in rest
    stars = rest.count("*")
    base = " ".join(t for t in rest if t not in ("const", "*"))
    if base not in _SCALARS or stars > 1:
        raise ValueError(f"kernel {kernel}: unsupported parameter type {text.strip()!r}")
    return Param(name=name, ctype=base, pointer=stars == 1, const=const)


def _closing_braces(source: str) -> dict[int, int]:
    """Each ``{``'s offset -> its matching ``}``'s, in one pass (an unmatched one is absent)."""
    close, stack = {}, []
    for m in _BRACE.finditer(source):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            close[stack.pop()] = m.start()
    return close


def parse_kernels(source: str) -> dict[str, KernelSig]:
    """Every `extern "C" __global__ void name(...)` kernel defined in `source`; in time linear
    in the source's length, whatever it holds."""
    out: dict[str, KernelSig] = {}
    close: dict[int, int] | None = None
    barriers: list[int] = []
    for m in _KERNEL_RE.finditer(source):
        name, plist = m.group(1), m.group(2).strip()
        params = () if plist in ("", "void") else tuple(
            _parse_param(p, name) for p in plist.split(",")
        )
        if close is None:  # the braces and barriers, once, when there is a kernel
            close = _closing_braces(source)
            barriers = [b.start() for b in _BARRIER.finditer(source)]
        start = m.end() - 1
        end = close.get(start)
        if end is None:
            raise ValueError("unbalanced braces in kernel source")
        if name in out:
            raise ValueError(f"kernel {name} defined twice")
        k = bisect.bisect_left(barriers, start)  # a barrier in the body: bisect, no slice
        out[name] = KernelSig(name=name, params=params,
                              barrier=k < len(barriers) and barriers[k] < end)
    return out


def check_args(sig: KernelSig, args: tuple, buffer_type: type) -> list:
    """Validate `args` against `sig`; return them normalised (numpy scalars, buffers).

    Pointers take a device buffer of exactly the pointee dtype. Values take a numpy scalar of
    exactly the declared type, or a Python int (integer params, range-checked) / Python float
    (double params only): a np.int32 where `long long` is declared is an error, never garbage.
    """
    if len(args) != len(sig.params):
        raise KernelArgError(
            f"kernel {sig.name}: {len(sig.params)} arguments declared, {len(args)} given"
        )
    out = []
    for i, (p, a) in enumerate(zip(sig.params, args, strict=True)):
        if p.pointer:
            if not isinstance(a, buffer_type):
                raise KernelArgError(f"{_where(sig, i, p)}: expected a device buffer, got "
                                     f"{type(a).__name__}")
            if a.dtype != p.dtype:
                raise KernelArgError(f"{_where(sig, i, p)}: buffer dtype {a.dtype} does not "
                                     f"match {p.ctype}")
            out.append(a)
            continue
        if isinstance(a, (bool, np.bool_)):
            raise KernelArgError(f"{_where(sig, i, p)}: bool given")
        if isinstance(a, np.generic):
            if a.dtype != p.dtype:
                raise KernelArgError(f"{_where(sig, i, p)}: {a.dtype} given where {p.ctype} "
                                     "is declared")
            out.append(a)
        elif isinstance(a, int) and p.dtype.kind in "iu":
            lo, hi = _int_range(p.dtype)
            if not lo <= a <= hi:
                raise KernelArgError(f"{_where(sig, i, p)}: {a} does not fit {p.ctype}")
            out.append(p.dtype.type(a))
        elif isinstance(a, float) and p.ctype == "double":
            out.append(np.float64(a))
        else:
            raise KernelArgError(f"{_where(sig, i, p)}: {type(a).__name__} given where "
                                 f"{p.ctype} is declared")
    return out


def _where(sig: KernelSig, i: int, p: Param) -> str:
    """The argument an error is about (formatted only for the error: a capture checks ~10
    arguments a launch, tens of thousands of launches at 10k nodes)."""
    return f"kernel {sig.name} argument {i} ({p})"


_INT_RANGES: dict[np.dtype, tuple[int, int]] = {}


def _int_range(dt: np.dtype) -> tuple[int, int]:
    """(min, max) of an integer dtype, looked up once (``np.iinfo`` builds a fresh object)."""
    r = _INT_RANGES.get(dt)
    if r is None:
        info = np.iinfo(dt)
        r = _INT_RANGES[dt] = (int(info.min), int(info.max))
    return r
