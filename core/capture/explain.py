"""Why a captured op introduced its difference: the op re-run on its own recorded inputs under
documented departures from the reference order (``core.explain``'s causes, spelled for aten
ops), the first that reproduces the recorded bits named (numpy only).

==================  ==========================================================================
``signed-zero``     equal but for the sign of zeros (read from the difference alone)
``reassociation``   products: BLAS's blocked ``np.matmul`` or the halving tree instead of the
                    serial order; sums and means: numpy's pairwise ``np.sum`` or the tree
``fma``             products: every multiply-add contracted to one rounding
``accumulator``     products and sums accumulated in a wider type (float32 in float64), rounded
                    once at the end
``libm``            transcendental ops (``tanh``, ``exp``, ``log``, ``sigmoid``, ``erf``,
                    ``gelu``, ``silu``, ...) from the platform's libm (numpy's) instead of refmath
==================  ==========================================================================

An op outside this table is ``unknown`` with no variant tried; one inside whose variants all
miss is ``unknown`` with the closest (fewest differing elements) named. Only output 0 is
explained (the op's main result).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from core.explain import _mm_acc, _mm_fma, _mm_tree, _sum_pairwise, _sum_tree
from core.parity import compare_arrays

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


def _products(op: str) -> list[_Variant]:
    """mm / bmm / addmm: (bias +) alpha * A @ B under each product variant."""
    kinds = [("reassociation", "BLAS's blocked product (np.matmul)", np.matmul),
             ("reassociation", "the halving tree over k", _mm_tree),
             ("fma", "multiply-adds contracted (fma), serial", _mm_fma),
             ("accumulator", "a float64 accumulator, rounded once", _mm_acc(True))]
    out: list[_Variant] = []
    for cause, label, mm in kinds:
        m = _batched(mm) if op.startswith("aten.bmm") or mm is np.matmul else mm

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
        out.append((cause, label, run))
    return out


def _sums(op: str) -> list[_Variant]:
    def axes(args: list, kw: dict) -> tuple[Any, bool]:
        if ".dim" not in op:  # sum.default / mean.default: (self, dtype): the whole tensor
            return None, False
        dim = kw.get("dim", args[1] if len(args) > 1 else None)
        keep = kw.get("keepdim", args[2] if len(args) > 2 else False)
        if dim is not None and not isinstance(dim, (list, tuple)):
            dim = [dim]
        return (None if not dim else tuple(dim)), bool(keep)

    def make(fn: Callable, acc: Any = None) -> Callable:
        def run(args: list, kw: dict) -> np.ndarray:
            x = np.asarray(args[0])
            ax, keep = axes(args, kw)
            w = x.astype(acc) if acc is not None else _f32(x)
            s = fn(w, axis=ax, keepdims=keep)
            if op.startswith("aten.mean"):
                n = x.size if ax is None else math.prod(x.shape[a] for a in ax)
                s = s / s.dtype.type(n)
            return np.asarray(s).astype(x.dtype)
        return run

    return [("reassociation", "numpy's pairwise np.sum", make(_sum_pairwise)),
            ("reassociation", "the halving tree", make(_sum_tree)),
            ("accumulator", "a float64 accumulator, rounded once", make(np.sum, np.float64))]


def _erf(x: np.ndarray) -> np.ndarray:
    v = np.vectorize(math.erf, otypes=[np.float64])
    return v(x.astype(np.float64))


_LIBM: dict[str, Callable[[np.ndarray, list, dict], np.ndarray]] = {
    "tanh": lambda x, a, k: np.tanh(x),
    "exp": lambda x, a, k: np.exp(x),
    "log": lambda x, a, k: np.log(x),
    "sigmoid": lambda x, a, k: x.dtype.type(1) / (x.dtype.type(1) + np.exp(-x)),
    "erf": lambda x, a, k: _erf(x).astype(x.dtype),
    "silu": lambda x, a, k: x / (x.dtype.type(1) + np.exp(-x)),
    "gelu": lambda x, a, k: (
        x.dtype.type(0.5) * x * (x.dtype.type(1) + np.tanh(
            x.dtype.type(math.sqrt(2 / math.pi)) * (x + x.dtype.type(0.044715) * x * x * x)))
        if k.get("approximate", a[1] if len(a) > 1 else "none") == "tanh" else
        x.dtype.type(0.5) * x * (x.dtype.type(1) + _erf(x / x.dtype.type(math.sqrt(2))).astype(
            x.dtype))),
}


def _libm(op: str, name: str) -> list[_Variant]:
    fn = _LIBM[name]

    def run(args: list, kw: dict) -> np.ndarray:
        x = np.asarray(args[0])
        return np.asarray(fn(_f32(x), args, kw)).astype(x.dtype)
    return [("libm", f"the platform's {name} (numpy)", run)]


def _variants(op: str) -> list[_Variant]:
    parts = op.split(".")
    base = parts[1] if len(parts) > 1 else op
    if base in ("mm", "bmm", "addmm"):
        return _products(op)
    if base in ("sum", "mean"):
        return _sums(op)
    if base.rstrip("_") in _LIBM and not base.endswith("_backward"):
        return _libm(op, base.rstrip("_"))
    return []


def explain_op(op: str, args: list, kwargs: dict, recorded: np.ndarray, diff: dict) -> dict:
    """The cause of op ``op``'s recorded output 0 differing from the reference (``diff``:
    the judge's difference), as ``core.explain.Cause.to_json``: ``{"cause", "variant"}``, plus
    ``closest``, ``max_ulp``, ``n_diff`` when unknown."""
    if diff["n_diff"] and diff.get("n_signed_zero", 0) == diff["n_diff"]:
        return {"cause": "signed-zero", "variant": "equal but for the sign of zero"}
    best: tuple[int, int, str, str] | None = None
    for cause, label, run in _variants(op):
        try:
            with np.errstate(all="ignore"):
                y = np.asarray(run(args, kwargs))
        except Exception:  # noqa: BLE001 — a variant that cannot run these args is skipped
            continue
        if y.shape != recorded.shape or y.dtype != recorded.dtype:
            continue
        d = compare_arrays(y, recorded)
        if d.n_diff == 0:
            return {"cause": cause, "variant": label}
        if best is None or d.n_diff < best[0]:
            best = (d.n_diff, d.max_ulp, cause, label)
    if best is None:
        return {"cause": "unknown", "variant": "", "closest": None, "max_ulp": diff["max_ulp"],
                "n_diff": diff["n_diff"]}
    return {"cause": "unknown", "variant": best[3], "closest": best[2], "max_ulp": best[1],
            "n_diff": best[0]}
