"""A node's parity summary, each rule once: its worst ulp, its merge over steps, its JSON form.

numpy only, no tape: ``core.parity``, ``core.step_record``, the step history, the report, the
parity command and the window all call these (issue 47 item 1); the colour of a worst ulp is
``views.models.ulp_scale.ulp_color``.

The worst ulp of a node (``worst``): per side (value, gradient) that differs (``n_diff`` > 0),
its ``max_ulp`` but at least 1 (a signed-zero mismatch has no ulp distance and still differs);
a side that does not differ counts 0; the node's worst is the larger of its sides, and -1 when a
side that differs holds a NaN against a number (``n_nan`` > 0), whatever the other side says.

The one NaN rule: a NaN (or a missing ``max_ulp``: ``None`` in a dict) is an unknown distance,
never a bigger or smaller one: it is skipped (``np.fmax``), so a side that differs with a NaN
``max_ulp`` counts 1, and a merge over steps keeps the numbers it has. Only ``n_nan`` (a NaN
value against a number) makes a node -1. inf stays inf; -0.0 is 0.

Ordering worsts (``worst_of``, ``severity``): a NaN mismatch (-1) is worse than any ulp.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

__all__ = ["NODE_KEYS", "SIDE_KEYS", "entries_worst", "entry_differs", "entry_worst", "fold",
           "merge_side", "node_summary", "severity", "side_summary", "worst", "worst_of"]

# the JSON form of one side (value or gradient) of a node over a run: the worst step's
# ``TensorDiff`` counts (``tapescope parity --json``, the report's .json, the worker's report)
SIDE_KEYS = ("n", "n_diff", "max_ulp", "max_abs", "n_nan", "nan_bits_differ")
# the JSON form of a node over a run, in this order
NODE_KEYS = ("id", "op", "name", "shape", "inputs", "value", "grad", "first_step_differing")


def worst(v_diff, v_ulp, v_nan, g_diff, g_ulp, g_nan) -> np.ndarray:
    """Per node, its worst ulp over value and gradient (columns: ``n_diff``, ``max_ulp``, and
    ``n_nan`` or a NaN flag per side): 0 exact, >= 1 when a side differs, -1 a NaN mismatch.
    A node without a gradient entry has ``g_diff`` <= 0 (-1 in a step record)."""
    v_on = np.asarray(v_diff) > 0
    g_on = np.asarray(g_diff) > 0
    # NOTE: fmax, not maximum: a NaN max_ulp is an unknown distance and counts 1 (the module's
    # NaN rule); a uint64 ulp column becomes float64 here (2**53+ ulp round, never wrap)
    v = np.where(v_on, np.fmax(v_ulp, 1.0), 0.0)
    g = np.where(g_on, np.fmax(g_ulp, 1.0), 0.0)
    nan = (v_on & (np.asarray(v_nan) > 0)) | (g_on & (np.asarray(g_nan) > 0))
    return np.where(nan, -1.0, np.fmax(v, g))


def _side_cols(entries: Sequence[Mapping], which: str) -> tuple[list, list, list]:
    diff, ulp, nan = [], [], []
    for e in entries:
        d = e.get(which)
        if d:
            diff.append(d.get("n_diff") or 0)
            u = d.get("max_ulp")
            ulp.append(np.nan if u is None else float(u))
            nan.append(d.get("n_nan") or 0)
        else:
            diff.append(0)
            ulp.append(0.0)
            nan.append(0)
    return diff, ulp, nan


def entries_worst(entries: Iterable[Mapping]) -> np.ndarray:
    """``worst`` of ``NodeParity.to_json`` entries (or node summaries): one array for all."""
    es = list(entries)
    vd, vu, vn = _side_cols(es, "value")
    gd, gu, gn = _side_cols(es, "grad")
    return worst(np.asarray(vd, dtype=np.int64), np.asarray(vu, dtype=np.float64), vn,
                 np.asarray(gd, dtype=np.int64), np.asarray(gu, dtype=np.float64), gn)


def entry_worst(e: Mapping) -> float:
    """One entry's ``worst``: 0 when exact, at least 1 when a side differs, -1 a NaN mismatch."""
    return float(entries_worst((e,))[0])


def entry_differs(e: Mapping, which: str | None = None) -> bool:
    """An entry differs (in ``which``, or in value or gradient): some ``n_diff`` > 0."""
    sides = (which,) if which else ("value", "grad")
    return any(e.get(w) and bool(e[w]["n_diff"]) for w in sides)


def worst_of(worsts, axis: int | None = None):
    """The worst of several worsts (of nodes, of steps, of runs): -1 when any is a NaN
    mismatch, else the largest (0 for none; a NaN skipped). ``axis``: per row or column of a
    2-D array of worsts (an array back), else over all of them (a float)."""
    w = np.asarray(worsts if isinstance(worsts, np.ndarray) else list(worsts), dtype=np.float64)
    if axis is None:
        w, axis = w.ravel(), 0
    out = np.where((w < 0).any(axis=axis), -1.0, np.fmax.reduce(w, axis=axis, initial=0.0))
    return float(out) if out.ndim == 0 else out


def severity(w: float) -> tuple[int, float]:
    """A sort key for a worst, smaller is worse: a NaN mismatch first, then the most ulp."""
    return (0, 0.0) if w < 0 else (1, -float(w))


# ---- over steps ---------------------------------------------------------------------------
def _fmax(a, b):
    # the NaN rule for a merge: a NaN is skipped, the number kept (Python's max keeps a NaN
    # that comes first); the winner keeps its type (an int ulp stays an int)
    if a is None or a != a:
        return b
    if b is None or b != b:
        return a
    return b if b > a else a


def side_summary(d: Mapping) -> dict:
    """One step's side (a ``TensorDiff.to_json``, or a summary) in the ``SIDE_KEYS`` form."""
    return {k: d.get(k, 0) for k in SIDE_KEYS}


def merge_side(acc: Mapping | None, d: Mapping) -> dict:
    """``acc`` (a side's summary so far, or None) with one more step's side: ``n`` the
    latest, every other count the largest seen (the NaN rule: a NaN skipped)."""
    b = side_summary(d)
    if acc is None:
        return b
    return {"n": b["n"], **{k: _fmax(acc.get(k, 0), b[k]) for k in SIDE_KEYS[1:]}}


def fold(per_node: dict[int, dict], entries: Iterable[Mapping], step: int) -> None:
    """Fold one step's ``NodeParity.to_json`` entries into ``per_node`` (id → a node's
    summary so far): each side merged (``merge_side``), and the first step (from 1) at which
    the node differs."""
    for n in entries:
        e = per_node.get(n["id"])
        if e is None:
            e = per_node[n["id"]] = {"id": n["id"], "op": n["op"], "name": n["name"],
                                     "value": None, "grad": None,
                                     "first_step_differing": None}
        for which in ("value", "grad"):
            if n[which] is not None:
                e[which] = merge_side(e[which], n[which])
                if e["first_step_differing"] is None and entry_differs(n, which):
                    e["first_step_differing"] = step


def node_summary(node, value: Mapping | None, grad: Mapping | None,
                 first_step_differing: int | None) -> dict:
    """The JSON form of a node over a run (``NODE_KEYS``): ``node`` a tape node (``id``,
    ``op``, ``name``, ``shape``, ``inputs``) or a dict of those."""
    get = node.get if isinstance(node, Mapping) else lambda k: getattr(node, k)
    return {"id": int(get("id")), "op": get("op"), "name": get("name"),
            "shape": [int(s) for s in get("shape")], "inputs": [int(i) for i in get("inputs")],
            "value": None if value is None else side_summary(value),
            "grad": None if grad is None else side_summary(grad),
            "first_step_differing": first_step_differing}
