"""Array summaries the inspector shows (no Qt): stats, NaN scans, copy-as-numpy text."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from tapescope.core import precision


def array_stats(a: np.ndarray | None) -> dict[str, float | int]:
    """min, max, mean, std over the finite elements, plus NaN/inf counts and size."""
    if a is None:
        return {}
    a = precision.widen(np.asarray(a))  # a half array widens exactly (bfloat16 is kind "V")
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
    if a is None:
        return False
    a = precision.widen(np.asarray(a))
    return a.dtype.kind == "f" and not bool(np.isfinite(a).all())


def nonfinite_flags(arrays: Sequence[np.ndarray | None]) -> np.ndarray:
    """Per array, ``has_nonfinite`` of it (a bool array), in one pass that costs ~1.5 µs an
    array plus a read of its data: 200k arrays in a fraction of a second, not seconds."""
    # NOTE: a float sum is finite only when every element is (an inf or a NaN never turns
    # finite again: inf + -inf is NaN), so each array is summed (no temporary, one numpy call)
    # and only the arrays whose sum is not finite (a NaN/inf, or finite values that overflow)
    # are settled by np.isfinite. At 100k nodes the per-array isfinite().all() and its
    # wrappers, not the data, cost 3.8 s of opening a tape.
    reduce = np.add.reduce
    idx: list[int] = []
    sums: list = []
    with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum: settled below
        for i, a in enumerate(arrays):
            if a is None:
                continue
            if type(a) is not np.ndarray:
                a = np.asarray(a)
            if a.dtype == precision.BFLOAT16:  # numpy kind "V": widened (exact)
                a = a.astype(np.float32)
            if a.dtype.kind == "f":
                idx.append(i)
                sums.append(reduce(a, axis=None))
    out = np.zeros(len(arrays), dtype=bool)
    if sums:
        # (one array of every sum: a wider float keeps an inf an inf and a finite finite)
        for k in np.flatnonzero(~np.isfinite(np.array(sums))).tolist():
            i = idx[k]
            out[i] = not bool(np.isfinite(arrays[i]).all())
    return out


def nonfinite_nodes(
    ids: Iterable[int], value: Callable[[int], np.ndarray | None],
    grad: Callable[[int], np.ndarray | None] | None = None, flags=None,
) -> list[int]:
    """Ids (in the given order) whose value or gradient holds a NaN or inf; ``flags``: the
    (values, gradients) ``nonfinite_flags`` of ``ids`` when already scanned."""
    ids = [int(i) for i in ids]
    bad_v, bad_g = flags if flags is not None else _scan(ids, value, grad)
    return [ids[k] for k in np.flatnonzero(bad_v | bad_g).tolist()]


def first_nonfinite(ids: Iterable[int], value, grad=None, flags=None) -> int | None:
    """The first id in tape order whose value (then gradient) is not all finite; ``flags`` as
    in ``nonfinite_nodes``."""
    ids = [int(i) for i in ids]
    bad_v, bad_g = flags if flags is not None else _scan(ids, value, grad)
    order = np.argsort(ids, kind="stable")
    hit = np.flatnonzero(bad_v[order])
    if hit.size:
        return ids[order[hit[0]]]
    hit = np.flatnonzero(bad_g[order])  # gradients are born in reverse tape order
    return ids[order[hit[-1]]] if hit.size else None


def _scan(ids: list[int], value, grad) -> tuple[np.ndarray, np.ndarray]:
    bad_v = nonfinite_flags([value(i) for i in ids])
    bad_g = (nonfinite_flags([grad(i) for i in ids]) if grad is not None
             else np.zeros(len(ids), dtype=bool))
    return bad_v, bad_g


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
