"""Runs of whole name scopes that fit a number of rows: the heatmap's rows and the minimap's bands.

No Qt here. Nodes (or display items) come in tape order, where a scope's members are
consecutive; when they outnumber the rows a picture has, each row shows one run: one scope at the
deepest scope level whose scopes fit, or, when even the top-level scopes do not fit, a run of
whole top-level scopes. A picture then aggregates (worst level, worst colour) over each run, so
no error is dropped and every row reads as a scope.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _head(a: np.ndarray) -> np.ndarray:
    """What precedes the last "/" of each string ("" when there is none)."""
    if hasattr(np, "strings"):  # numpy >= 2: ~10x the legacy np.char spelling
        return np.strings.rpartition(a, "/")[0]
    return np.char.rpartition(a, "/")[..., 0]


def scope_runs(names: Sequence[str | None] | None, n: int, budget: int) -> np.ndarray | None:
    """First index of each run when ``n`` items do not fit ``budget`` rows (None when they
    do): runs of one scope (the deepest level that fits), else runs of whole top-level scopes
    about ``n / budget`` long; equal runs of consecutive items when there are no names."""
    if n <= budget:
        return None
    even = np.unique(np.arange(budget) * n // budget)  # equal runs of consecutive items
    if names is None or len(names) != n:
        return even
    # NOTE: the scope of every item as numpy strings, cut one level at a time from the
    # deepest (rpartition on "/"): at 100k items a Python split and join per level cost ~0.1 s
    key = _head(np.array([nm or "" for nm in names], dtype=str))
    levels = np.where(key == "", 0, np.char.count(key, "/") + 1)
    cand = None
    for depth in range(int(levels.max()), 0, -1):
        deeper = levels > depth  # exactly depth + 1 levels: drop the last one
        if deeper.any():
            key = key.copy()
            key[deeper] = _head(key[deeper])
            levels[deeper] = depth
        cand = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        if cand.size <= budget:
            return cand
    if cand is None:  # no scopes at all
        return even
    # more top-level scopes than rows: a row holds whole scopes
    return np.unique(cand[np.searchsorted(cand, even, side="right") - 1])


def run_label(names: Sequence[str | None], lo: int, hi: int) -> str:
    """A name for the run of items ``lo:hi``: their common scope (``block5/attn``), or the
    first and last top-level scopes it spans (``block64 … block127``)."""
    first = (names[lo] or "").split("/")[:-1]
    last = (names[hi - 1] or "").split("/")[:-1]
    common = []
    for a, b in zip(first, last, strict=False):
        if a != b:
            break
        common.append(a)
    if common:
        return "/".join(common)
    a = first[0] if first else (names[lo] or f"#{lo}")
    b = last[0] if last else (names[hi - 1] or f"#{hi - 1}")
    return a if a == b or hi - lo == 1 else f"{a} … {b}"
