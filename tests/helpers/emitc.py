"""Shared helpers of the emitc tests: random scalar tapes and a gcc oracle run through ctypes."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from tapescope.core import Tape, ops, refmath
from tapescope.core.ops import REGISTRY
from tapescope.gpu import optable
from tapescope.gpu.device import INCLUDE_DIRS, REFMATH_C_DIR
from tapescope.gpu.emitc import emit
from tapescope.gpu.source import TRANSCENDENTALS

# gcc, as the issue says: -O2 and no contraction, so every written operation rounds once
CFLAGS = ["-O2", "-ffp-contract=off", "-fPIC", "-shared", "-std=c99", "-x", "c"]


def gcc() -> str:
    """The C compiler, or a clear failure (every machine that runs tapescope's host has one)."""
    path = shutil.which("gcc")
    assert path, "gcc is required for the emitc oracle (the host backend needs it too)"
    return path


def have_math(name: str) -> bool:
    """A transcendental exists on both sides of refmath (numpy and refmath.cuh)."""
    header = (REFMATH_C_DIR / "refmath.cuh").read_text()
    return name in refmath.FUNCTIONS and re.search(rf"\bts_{name}\s*\(", header) is not None


def table_math(op: str) -> tuple[str, ...]:
    """The transcendentals the op table's C form of ``op`` calls."""
    c = REGISTRY[op].c
    text = " ".join((c.fwd, *c.bwd, *(e for _, e in c.lets)))
    return tuple(t.lower() for t in TRANSCENDENTALS if re.search(rf"\b{t}\(", text))


# op name -> transcendentals it needs: the op table's ops from the table, the others by hand
UNARY = {**{n: table_math(n) for n in optable.UNARY},
         "sum": (), "mean": (), "transpose": (), "reshape": (), "slice": (), "concat": (),
         "softmax": ("exp",), "cross_entropy": ("exp", "log")}
BINARY = {**{n: table_math(n) for n in optable.BINARY},
          "matmul": (), "bmm": (), "rms_norm": (), "layer_norm": (), "swiglu": ("sigmoid",)}
SHAPES = [(), (1,), (1, 1)]


def usable(table: dict) -> list[str]:
    """Op names whose transcendentals exist today on both sides."""
    return sorted(k for k, need in table.items() if all(have_math(n) for n in need))


def build(dtype, leaves: list[tuple[str, float, int]], steps: list[tuple]) -> tuple:
    """Record a scalar tape; returns (tape, loss, bindings {const id: index into x})."""
    t = Tape(dtype=dtype)
    pool, bind = [], {}
    for k, (kind, v, si) in enumerate(leaves):
        a = np.full(SHAPES[si], v)
        if kind == "param":
            pool.append(t.param(a, name=f"p{k}"))
        else:
            var = t.const(a, name=f"c{k}")
            if kind == "bound":
                bind[var.id] = f"x[{len(bind)}]"
            pool.append(var)
    n_leaves = len(pool)
    for op, i, j, s, si in steps:
        # the first operand is one of the two newest values (deep chains), the second any
        a, b = pool[-1 - i % min(2, len(pool))], pool[j % len(pool)]
        r = SHAPES[si]
        if op in ("adds", "muls"):
            y = getattr(ops, op)(a, s)
        elif op == "sum" or op == "mean":
            axis = -1 if si == 2 and a.shape != () else None
            y = getattr(ops, op)(a, axis=axis, keepdims=si == 1)
        elif op == "transpose":
            # NOTE: transpose of a 0-d value trips core (ascontiguousarray makes it 1-d)
            y = ops.transpose(ops.reshape(a, (1, 1)) if a.shape == () else a)
        elif op == "reshape":
            y = ops.reshape(a, r)
        elif op == "slice":
            y = ops.slice(ops.reshape(a, (1, 1)), axis=1, start=0, stop=1)
        elif op == "concat":
            y = ops.concat([ops.reshape(a, (1,))], axis=0)
        elif op == "softmax":
            y = ops.softmax(ops.reshape(a, (1,)) if a.shape == () else a)
        elif op == "cross_entropy":
            y = ops.cross_entropy(ops.reshape(a, (1, 1)), np.zeros(1))
        elif op == "matmul":
            y = ops.matmul(ops.reshape(a, (1, 1) if si != 2 else (1, 1, 1)), ops.reshape(b, (1, 1)))
        elif op == "bmm":
            y = ops.bmm(ops.reshape(a, (1, 1, 1)), ops.reshape(b, (1, 1, 1)))
        elif op == "rms_norm":
            y = ops.rms_norm(ops.reshape(a, (1,) if si != 2 else (1, 1)), ops.reshape(b, (1,)),
                             eps=abs(s) * 1e-3)
        elif op == "layer_norm":
            y = ops.layer_norm(ops.reshape(a, (1,) if si != 2 else (1, 1)), ops.reshape(b, (1,)),
                               eps=abs(s) * 1e-3 + 1e-5)
        elif op == "swiglu":
            y = ops.swiglu(a, ops.reshape(b, a.shape))
        elif op in BINARY:
            y = getattr(ops, op)(a, b)
        else:
            y = getattr(ops, op)(a)
        assert t.ok, t.error
        pool.append(y)
    # every computed value feeds the loss, so every node's value and gradient is checked
    loss = pool[-1]
    for v in pool[n_leaves:-1]:
        loss = ops.add(loss, v)
    return t, loss, bind


def compile_all(tmp: Path, sources: list[str]) -> ctypes.CDLL:
    """One shared object from many emitted functions (one gcc run)."""
    src = tmp / "emitted.c"
    src.write_text('#include "intrinsics_host.h"\n#include "refmath.cuh"\n\n' + "\n".join(sources))
    so = tmp / f"emitted_{abs(hash(src.read_text()))}.so"
    cmd = [gcc(), *CFLAGS, *(f"-I{d}" for d in INCLUDE_DIRS), str(src), "-o", str(so)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return ctypes.CDLL(str(so))


def emit_traced(tape, loss, bind: dict[int, str], name: str) -> str:
    """The emitted function with every node's value and gradient traced out."""
    ct = "double" if tape.dtype == np.float64 else "float"
    return emit(tape, loss, bind, name=name, qualifier="", trace=True, args=f"const {ct}* x")


def run_traced(lib: ctypes.CDLL, name: str, tape, bind: dict[int, str], g0: np.ndarray):
    """Call the emitted function; returns (loss, g, tv, tg) as arrays of the tape dtype."""
    dt = tape.dtype
    p = np.array([v.value.reshape(-1)[0] for v in tape.params()], dtype=dt)
    g = np.array(g0, dtype=dt)
    n = len(tape)
    tv = np.zeros(n, dtype=dt)
    tg = np.zeros(n, dtype=dt)
    x = np.array([tape.value(i).reshape(-1)[0] for i in bind] or [0], dtype=dt)
    fn = getattr(lib, name)
    cty = ctypes.c_double if dt == np.float64 else ctypes.c_float
    fn.restype = cty

    def ptr(a):
        return a.ctypes.data_as(ctypes.c_void_p)

    fn.argtypes = [ctypes.c_void_p] * 5
    loss = dt.type(fn(ptr(p), ptr(g), ptr(tv), ptr(tg), ptr(x)))
    return loss, g, tv, tg


def bits(a) -> np.ndarray:
    """The bit patterns of a float array (int view)."""
    a = np.ascontiguousarray(a)
    return a.view(np.int64 if a.dtype == np.float64 else np.int32)


def same(a, b) -> bool:
    """Bit-identical, NaN payload aside: every non-NaN bit pattern (±0 included) must match.

    A NaN's sign and payload are not part of the contract: IEEE 754 leaves them open, gcc folds
    ``a + (-b)`` into ``a - b`` (which keeps a NaN's sign where the written form flips it), and
    CUDA returns its canonical NaN. That both sides ARE NaN is checked.
    """
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(bits(a)[~nan], bits(b)[~nan]))
