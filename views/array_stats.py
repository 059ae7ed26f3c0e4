"""Array summaries the inspector shows (no Qt): stats, NaN scans, copy-as-numpy text."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable

import numpy as np


def array_stats(a: np.ndarray | None) -> dict[str, float | int]:
    """min, max, mean, std over the finite elements, plus NaN/inf counts and size."""
    if a is None:
        return {}
    a = np.asarray(a)
    out: dict[str, float | int] = {"size": int(a.size)}
    if a.dtype.kind == "b":
        a = a.astype(np.int8)  # booleans summarise as 0/1
    if a.dtype.kind not in "fiu":  # strings, objects, complex: nothing to summarise
        nan = float("nan")
        out.update(nan=0, inf=0, min=nan, max=nan, mean=nan, std=nan)
        return out
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        inf = np.isinf(a)
        out["nan"] = int(nan.sum())
        out["inf"] = int(inf.sum())
        fin = a[~(nan | inf)]
    else:
        out["nan"] = out["inf"] = 0
        fin = a.ravel()
    if fin.size:
        # NOTE: stats over finite elements only, so one NaN does not hide the rest of the picture
        f64 = fin.astype(np.float64)
        out.update(min=float(f64.min()), max=float(f64.max()), mean=float(f64.mean()),
                   std=float(f64.std()))
    else:
        out.update(min=float("nan"), max=float("nan"), mean=float("nan"), std=float("nan"))
    return out


def has_nonfinite(a: np.ndarray | None) -> bool:
    """True when a float array holds a NaN or an inf."""
    return a is not None and np.asarray(a).dtype.kind == "f" and not bool(np.isfinite(a).all())


def nonfinite_nodes(
    ids: Iterable[int], value: Callable[[int], np.ndarray | None],
    grad: Callable[[int], np.ndarray | None] | None = None,
) -> list[int]:
    """Ids (in the given order) whose value or gradient holds a NaN or inf."""
    out = []
    for i in ids:
        if has_nonfinite(value(i)) or (grad is not None and has_nonfinite(grad(i))):
            out.append(int(i))
    return out


def first_nonfinite(ids: Iterable[int], value, grad=None) -> int | None:
    """The first id in tape order whose value (then gradient) is not all finite."""
    ids = sorted(ids)
    for i in ids:
        if has_nonfinite(value(i)):
            return int(i)
    if grad is not None:
        for i in reversed(ids):  # gradients are born in reverse tape order
            if has_nonfinite(grad(i)):
                return int(i)
    return None


def numpy_text(a: np.ndarray) -> str:
    """Source text that rebuilds ``a`` exactly: ``np.array([...], dtype=np.float64)``."""
    a = np.asarray(a)
    if a.size == 0:  # "[]" would lose the shape
        return f"np.empty({a.shape}, dtype=np.{a.dtype.name})"
    # floatmode="unique": the shortest repr that round-trips, so pasting gives the same bits
    body = np.array2string(a, separator=", ", threshold=sys.maxsize, floatmode="unique",
                           max_line_width=100)
    body = body.replace("nan", "np.nan").replace("inf", "np.inf")
    return f"np.array({body}, dtype=np.{a.dtype.name})"


def format_number(v: float) -> str:
    """Compact display of one statistic."""
    if isinstance(v, int):
        return str(v)
    if v != v:
        return "—"
    return f"{v:.6g}"
