"""What ``tapescope parity`` prints (a helper module: no ``register``): the node tables, in the
order that leads to the culprit, and a step's loss pair.

A table lists the nodes that *introduced* error first (in the order they first did: step, then
tape order), then the inherited ones, worst first; cut at its limit, it says how many more differ
and where they are listed (issue 46: the nodes that made the error never appeared among fifteen
inherited ones in id order). A loss that differs prints both values in full with their bits and
their ulp distance (two equal-looking numbers beside DIFFERS said nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tapescope.views.models.numbers import count_text, ulp_text

if TYPE_CHECKING:  # numpy and core.parity load where a table is printed, not with the CLI parser
    import numpy as np

__all__ = ["AGAINST_ROWS", "PARITY_ROWS", "cut_notice", "loss_text", "origin_text",
           "other_loss_text", "print_nodes", "table_order"]

PARITY_ROWS = 15  # rows of `parity`'s table
# core.bounds.OUTSIDE (not imported: core.bounds loads numpy; tests/app/test_parity_table
# checks the two are one string)
_OUTSIDE = "outside reordering bound"
AGAINST_ROWS = 20  # rows of `--against`'s table


def cut_notice(more: int) -> str:
    """The line under a cut table."""
    return f"… {more} more node{'s' if more != 1 else ''} differ (--json lists them)"


def table_order(ids: Iterable[int], introduced: list[dict],
                worst: dict[int, tuple] | None = None) -> list[int]:
    """``ids`` with the nodes that introduced error first (in the order ``introduced`` lists
    them: by step, then as the pair found them) and the rest after, worst first (``worst``: a
    sort key per id, smaller is worse; the id breaks ties)."""
    ids = list(ids)
    present = set(ids)
    first: list[int] = []
    for e in introduced:
        i = e["node"]
        if i in present and i not in first:
            first.append(i)
    # a node with an array outside every reordering bound (what ``--fail-on bug`` fails on)
    # before those whose arrays are all valid reorderings: a long table's cut never hides it
    outside = {e["node"] for e in introduced if e.get("class") == _OUTSIDE}
    first.sort(key=lambda i: i not in outside)
    seen = set(first)
    rest = sorted((i for i in ids if i not in seen),
                  key=lambda i: ((worst or {}).get(i, ()), i))
    return first + rest


def origin_text(i: int, introduced: list[dict], explain: bool) -> str:
    """``introduced`` (``--explain``: its first array's cause, ``unknown`` when no variant
    matched; the first outside every reordering bound where one is, the array ``--fail-on
    bug`` fails on) or ``inherited``."""
    mine = [e for e in introduced if e["node"] == i]
    if not mine:
        return "inherited"
    if not explain:
        return "introduced"
    from tapescope.core.bounds import entry_label

    e = next((e for e in mine if e.get("class") == _OUTSIDE), mine[0])
    return entry_label(e)  # "grad by #12: unknown · valid" (issue 44)


def print_nodes(bad: list[dict], introduced: list[dict], explain: bool,
                limit: int = PARITY_ROWS) -> None:
    """``parity``'s table of the differing nodes (``bad``: folded ``NodeParity`` entries)."""
    by_id = {n["id"]: n for n in bad}
    from tapescope.core.summary import entries_worst, severity

    # a NaN mismatch before any ulp (the worsts in one call: a 10k-node table, not 10k calls)
    worst = entries_worst(by_id.values()).tolist()
    order = table_order(by_id, introduced,
                        {i: severity(w) for i, w in zip(by_id, worst, strict=True)})
    # (counts and ulp as the window writes them, views.models.numbers: 4,488 and 5.87e+06)
    print(f"{'node':>5} {'op':<14} {'name':<28} {'value diff':>11} {'ulp':>8} "
          f"{'grad diff':>10} {'ulp':>8} {'cause' if explain else 'origin':<13}")
    for i in order[:limit]:
        n = by_id[i]
        v = n["value"] or {"n_diff": 0, "max_ulp": 0}
        g = n["grad"] or {"n_diff": 0, "max_ulp": 0}
        print(f"{i:>5} {n['op']:<14} {(n['name'] or '')[:28]:<28} "
              f"{count_text(v['n_diff']):>11} {ulp_text(v['max_ulp']):>8} "
              f"{count_text(g['n_diff']):>10} {ulp_text(g['max_ulp']):>8} "
              f"{origin_text(i, introduced, explain):<13}")
    if len(order) > limit:
        print(cut_notice(len(order) - limit))


def _loss_dtype(dtype: str | None, *xs: float) -> np.dtype:
    """The run's dtype when both losses are values of it (a half run's loss is a half value),
    else float64 (a mixed-precision loss may be float32 in a float16 run)."""
    import numpy as np

    from tapescope.core import precision

    try:
        dt = precision.dtype_of(dtype) if dtype else np.dtype(np.float64)
    except (TypeError, ValueError, KeyError):
        return np.dtype(np.float64)
    a = np.asarray(xs, np.float64)
    if np.array_equal(a.astype(dt).astype(np.float64), a, equal_nan=True):
        return dt
    return np.dtype(np.float64)


def loss_text(ref: float, cand: float, dtype: str | None = None) -> str:
    """``loss 2.80311321  device 2.80311321`` when the two are the same bits; when not, both in
    full (the shortest digits that name the value) with their bits and the ulp between them:
    ``loss 2.587384547283145 (0x4004b2f6ab660e14)  device 2.5873845472831456
    (0x4004b2f6ab660e15)  1 ulp apart``."""
    same, r, c, apart = _loss_pair(ref, cand, dtype)
    if same:
        return f"loss {ref:.9g}  device {cand:.9g}"
    return f"loss {r}  device {c}  {apart}"


def other_loss_text(ref: float, cand: float, dtype: str | None = None) -> str:
    """A second candidate's loss (``--against``): ``2.80311321`` when it has the reference's
    bits, else in full with its bits and its ulp from the reference."""
    same, _, c, apart = _loss_pair(ref, cand, dtype)
    return f"{cand:.9g}" if same else f"{c}  {apart}"


def _loss_pair(ref: float, cand: float, dtype: str | None) -> tuple[bool, str, str, str]:
    import numpy as np

    from tapescope.core import precision
    from tapescope.core.parity import same_under_nan_policy, ulp_distance

    dt = _loss_dtype(dtype, ref, cand)
    r, c = np.asarray([ref], np.float64).astype(dt), np.asarray([cand], np.float64).astype(dt)
    if same_under_nan_policy(r, c):
        return True, "", "", ""
    _, uint = precision.bits_types(dt)
    width = np.dtype(uint).itemsize * 2

    def full(x: np.ndarray) -> str:
        s = repr(float(x[0])) if dt == np.float64 else str(x[0])
        return f"{s} (0x{int(x.view(uint)[0]):0{width}x})"

    if np.isnan(r[0]) != np.isnan(c[0]):
        apart = "NaN against a number"
    else:
        d = int(ulp_distance(r, c)[0])
        apart = f"{d} ulp apart" if d else "differ in the sign of zero"
    return False, full(r), full(c), apart
