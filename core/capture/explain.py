"""Why a captured op introduced its difference: the op re-run on its own recorded inputs under
documented departures from the reference order, the first that reproduces the recorded bits
named (numpy only). The departures are ``core.explain``'s own table (issue 44 item 4: one
table, not a second): a product takes every ``mm`` variant of ``variants_for("matmul")``, a
sum or mean every ``sum`` variant of ``variants_for("sum")``, a transcendental every math
namespace (``M``) of ``VARIANTS``, in the table's order; ``_softmax``, ``silu`` and ``sqrt``
also PyTorch's own CPU kernels (``core.explain_aten``, ``core.explain.UPDATE_VARIANTS``).

==================  ==========================================================================
``signed-zero``     equal but for the sign of zeros (read from the difference alone)
``fma``,            products (mm, bmm, addmm): the table's ``mm`` variants, fma first, then
``reassociation``,  BLAS's blocked ``np.matmul``, the halving tree, BLAS micro-kernel tiles,
``accumulator``     k-lanes, wider / narrower accumulators; sums and means: its ``sum``
                    variants (numpy's pairwise sum, the tree, PyTorch's cascade and ATen's sum
                    kernel, W-lane sums, accumulators)
``libm``            transcendental ops (``tanh``, ``exp``, ``log``, ``sigmoid``, ``erf``,
                    ``gelu``, ``silu``) in each of the table's math namespaces (numpy's, the C
                    library's); ``_softmax`` and ``silu`` as PyTorch's CPU kernels (SLEEF's
                    exp), ``sqrt`` as MKL VML's (PyTorch's CPU ``torch.sqrt``)
==================  ==========================================================================

An op outside this table is ``unknown`` with no variant tried; one inside whose variants all
miss is ``unknown`` with the closest (fewest differing elements) named. Only output 0 is
explained (the op's main result).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from tapescope.core.explain import (
    _HINTS,
    UPDATE_VARIANTS,
    VARIANTS,
    _mm_blas,
    closer,
    distance,
    remember,
    variants_for,
)
from tapescope.core.explain_aten import ATEN_FORWARD
from tapescope.core.explain_aten import silu as _aten_silu
from tapescope.core.parity import compare_arrays

__all__ = ["explain_op"]

_Variant = tuple[str, str, Callable[[list, dict], np.ndarray]]


def _f32(x: Any) -> np.ndarray:
    a = np.asarray(x)
    return a.astype(np.float32) if a.dtype.name in ("float16", "bfloat16") else a


def _batched(mm: Callable) -> Callable:
    def f(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.ndim == 2:
            return mm(a, b)
        return np.stack([mm(a[i], b[i]) for i in range(a.shape[0])])
    return f


def _dtype(args: list) -> np.dtype:
    for a in args:
        if isinstance(a, np.ndarray) and a.dtype.kind in "fV":
            return a.dtype
    return np.dtype(np.float64)


def _products(op: str, dt: np.dtype) -> list[_Variant]:
    """mm / bmm / addmm: (bias +) alpha * A @ B under each product variant of core.explain's
    table (the ``mm`` primitive's, in its order)."""
    out: list[_Variant] = []
    # the table's order, but numpy's BLAS product first: the cheapest, and what a captured
    # float32 product most often is (a captured model's products can be large; the contracted
    # chains loop over k in Python)
    mms = sorted((v for v in variants_for("matmul", dt) if v.prim == "mm"),
                 key=lambda v: v.value is not _mm_blas)
    for v in mms:
        m = _batched(v.value)

        def run(args: list, kw: dict, m=m) -> np.ndarray:
            if op.startswith("aten.addmm"):
                bias, a, b = (_f32(x) for x in args[:3])
                beta = kw.get("beta", args[3] if len(args) > 3 else 1)
                alpha = kw.get("alpha", args[4] if len(args) > 4 else 1)
                p = m(a, b)
                if alpha != 1:
                    p = p * p.dtype.type(alpha)
                return (p + (bias if beta == 1 else bias * bias.dtype.type(beta))).astype(
                    np.asarray(args[1]).dtype)
            a, b = _f32(args[0]), _f32(args[1])
            return m(a, b).astype(np.asarray(args[0]).dtype)
        out.append((v.cause, v.label, run))
    return out


def _sums(op: str, dt: np.dtype) -> list[_Variant]:
    """sum / mean: the ``sum`` primitive's variants of core.explain's table, in its order."""
    def axes(args: list, kw: dict) -> tuple[Any, bool]:
        if ".dim" not in op:  # sum.default / mean.default: (self, dtype): the whole tensor
            return None, False
        dim = kw.get("dim", args[1] if len(args) > 1 else None)
        keep = kw.get("keepdim", args[2] if len(args) > 2 else False)
        if dim is not None and not isinstance(dim, (list, tuple)):
            dim = [dim]
        return (None if not dim else tuple(dim)), bool(keep)

    def make(fn: Callable) -> Callable:
        def run(args: list, kw: dict) -> np.ndarray:
            x = np.asarray(args[0])
            ax, keep = axes(args, kw)
            w = _f32(x)
            s = np.asarray(fn(w, ax, keep))
            if op.startswith("aten.mean"):
                n = x.size if ax is None else math.prod(x.shape[a] for a in ax)
                s = s / s.dtype.type(n)
            return np.asarray(s).astype(x.dtype)
        return run

    return [(v.cause, v.label, make(v.value)) for v in variants_for("sum", dt)
            if v.prim == "sum"]


def _erf(M: Any) -> Callable:
    return lambda x: np.asarray(M.erf(x)).astype(x.dtype)


def _gelu(M: Any) -> Callable:
    def f(x: np.ndarray, a: list, k: dict) -> np.ndarray:
        t = x.dtype.type
        if k.get("approximate", a[1] if len(a) > 1 else "none") == "tanh":
            return t(0.5) * x * (t(1) + M.tanh(t(math.sqrt(2 / math.pi))
                                             * (x + t(0.044715) * x * x * x)))
        return t(0.5) * x * (t(1) + _erf(M)(x / t(math.sqrt(2))))
    return f


# aten op -> its formula in a math namespace M (the ``M`` primitive's variants of the table)
_LIBM: dict[str, Callable[[Any], Callable[[np.ndarray, list, dict], np.ndarray]]] = {
    "tanh": lambda M: lambda x, a, k: M.tanh(x),
    "exp": lambda M: lambda x, a, k: M.exp(x),
    "log": lambda M: lambda x, a, k: M.log(x),
    "sigmoid": lambda M: lambda x, a, k: M.sigmoid(x),
    "erf": lambda M: lambda x, a, k: _erf(M)(x),
    "silu": lambda M: lambda x, a, k: x / (x.dtype.type(1) + M.exp(-x)),
    "gelu": _gelu,
}


def _libm(op: str, name: str) -> list[_Variant]:
    out: list[_Variant] = []
    for v in VARIANTS:
        if v.prim != "M":
            continue
        fn = _LIBM[name](v.value)

        def run(args: list, kw: dict, fn=fn) -> np.ndarray:
            x = np.asarray(args[0])
            return np.asarray(fn(_f32(x), args, kw)).astype(x.dtype)
        out.append((v.cause, v.label, run))
    if name == "silu":  # PyTorch's own CPU kernel (core/explain_aten.py)
        out.append(("libm", ATEN_FORWARD["swiglu"][1].replace("silu(a) * u", "silu"),
                    lambda args, kw: _aten_silu(np.asarray(args[0]))))
    return out


def _softmax(op: str) -> list[_Variant]:
    """aten._softmax(x, dim, half_to_float): PyTorch's CPU softmax from the table."""
    fn, label = ATEN_FORWARD["softmax"]

    def run(args: list, kw: dict) -> np.ndarray:
        x = np.asarray(args[0])
        return np.asarray(fn([x], {"axis": int(args[1])})).astype(x.dtype)
    return [("libm", label, run)]


def _sqrt(op: str) -> list[_Variant]:
    """aten.sqrt: the square roots of the table's optimizer variants (MKL VML's)."""
    return [(cause, label, lambda args, kw, f=f: np.asarray(f(np.asarray(args[0]))))
            for cause, label, f in UPDATE_VARIANTS]


def _variants(op: str, dt: Any = np.float64) -> list[_Variant]:
    dt = np.dtype(dt)
    parts = op.split(".")
    base = parts[1] if len(parts) > 1 else op
    if base in ("mm", "bmm", "addmm"):
        return _products(op, dt)
    if base in ("sum", "mean"):
        return _sums(op, dt)
    if base == "_softmax":
        return _softmax(op)
    if base.rstrip("_") == "sqrt":
        return _sqrt(op)
    if base.rstrip("_") in _LIBM and not base.endswith("_backward"):
        return _libm(op, base.rstrip("_"))
    return []


def explain_op(op: str, args: list, kwargs: dict, recorded: np.ndarray, diff: dict) -> dict:
    """The cause of op ``op``'s recorded output 0 differing from the reference (``diff``:
    the judge's difference), as ``core.explain.Cause.to_json``: ``{"cause", "variant"}``, plus
    ``closest``, ``max_ulp``, ``n_diff`` when unknown. As ``core.explain``'s search: the
    variant that last reproduced this op at these shapes is tried first, and a closest variant
    is named only when strictly closer than the reference (``core.explain.closer``)."""
    if diff["n_diff"] and diff.get("n_signed_zero", 0) == diff["n_diff"]:
        return {"cause": "signed-zero", "variant": "equal but for the sign of zero"}
    raw = SimpleNamespace(n_nan=int(diff.get("n_nan", 0)), n_diff=int(diff["n_diff"]),
                          max_ulp=int(diff["max_ulp"]))
    shapes = tuple(np.shape(a) for a in args if isinstance(a, np.ndarray))
    key = ("capture", op, shapes, np.dtype(recorded.dtype).str, repr(args[len(shapes):]))
    cands = _variants(op, _dtype(args))
    hints = _HINTS.get(key, ())
    if hints:
        rank = {lab: i for i, lab in enumerate(hints)}
        cands = sorted(cands, key=lambda c: rank.get(c[1], len(rank)))
    best: tuple | None = None
    for cause, label, run in cands:
        try:
            with np.errstate(all="ignore"):
                y = np.asarray(run(args, kwargs))
        except Exception:  # noqa: BLE001 — a variant that cannot run these args is skipped
            continue
        if y.shape != recorded.shape or y.dtype != recorded.dtype:
            continue
        d = compare_arrays(y, recorded)
        if d.n_diff == 0:
            remember(key, label)
            return {"cause": cause, "variant": label}
        if best is None or distance(d) < distance(best[0]):
            best = (d, cause, label)
    if best is None or not closer(best[0], raw):
        return {"cause": "unknown", "variant": "", "closest": None, "max_ulp": diff["max_ulp"],
                "n_diff": diff["n_diff"]}
    d, cause, label = best
    return {"cause": "unknown", "variant": label, "closest": cause, "max_ulp": int(d.max_ulp),
            "n_diff": int(d.n_diff)}
