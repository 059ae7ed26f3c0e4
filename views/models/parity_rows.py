"""Rows of the parity table as plain data (no Qt): one per node, comparison columns optional.

A comparison is a list of per-node dicts ``{"id", "value": {"n_diff", "max_ulp", ...},
"grad": {...}}`` (what a parity file holds), or a ``ColumnComparison``: one step's columns
(what a live session's step history keeps, ``app.step_history``), read column by column, a
node's dict made only when something asks for that entry. A node without an entry has empty
comparison cells.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tapescope.core.step_record import F_G_NAN, F_V_NAN
from tapescope.views.models.numbers import count_text, ulp_text

COLUMNS = ("id", "op", "name", "shape", "value n_diff", "value max_ulp", "grad n_diff",
           "grad max_ulp")
# what the table's header says (COLUMNS are the field names the code and tests key on)
HEADERS = {"value n_diff": "value\ndiffering", "value max_ulp": "value\nmax ulp",
           "grad n_diff": "gradient\ndiffering", "grad max_ulp": "gradient\nmax ulp"}
HEADER_TIPS = {"value n_diff": "elements of the value whose bits differ",
               "value max_ulp": "the value's largest distance in units in the last place",
               "grad n_diff": "elements of the gradient whose bits differ",
               "grad max_ulp": "the gradient's largest distance in units in the last place"}


@dataclass(frozen=True)
class ParityRow:
    """One node's line in the table; comparison fields are None when nothing was compared."""

    id: int
    op: str
    name: str
    shape: tuple[int, ...]
    value_n_diff: int | None = None
    value_max_ulp: float | None = None
    grad_n_diff: int | None = None
    grad_max_ulp: float | None = None
    # NaNs differing only in sign/payload, equal under the NaN policy: per side, so each n_diff
    # cell's tooltip counts its own side
    value_nan_bits: int = 0
    grad_nan_bits: int = 0
    # a NaN against a number on that side (n_nan > 0): the node's worst is -1 (core.summary)
    value_nan: bool = False
    grad_nan: bool = False

    def cell(self, col: int):
        """The raw value of column ``col`` (numbers stay numbers, for sorting)."""
        return (self.id, self.op, self.name, self.shape, self.value_n_diff, self.value_max_ulp,
                self.grad_n_diff, self.grad_max_ulp)[col]

    @property
    def nan_bits_differ(self) -> int:
        """NaNs equal under the NaN policy though their bits differ, value and gradient."""
        return self.value_nan_bits + self.grad_nan_bits

    def nan_bits(self, col: int) -> int:
        """Those NaNs on the side that column ``col`` shows (4: value, 6: gradient)."""
        return self.value_nan_bits if col == 4 else self.grad_nan_bits if col == 6 else 0

    @cached_property  # (a frozen row: its worst is computed once, when first drawn)
    def worst(self) -> float:
        """The node's worst ulp by core.summary's one rule: 0 exact, >= 1, -1 a NaN mismatch."""
        from tapescope.core.summary import worst

        v_ulp, g_ulp = (np.nan if u is None else u for u in (self.value_max_ulp,
                                                            self.grad_max_ulp))
        return float(worst(self.value_n_diff or 0, v_ulp, self.value_nan, self.grad_n_diff or 0,
                           g_ulp, self.grad_nan))

    @property
    def differs(self) -> bool:
        """True when any compared element differs in its bits."""
        return bool(self.value_n_diff) or bool(self.grad_n_diff)


def _side(entry: Mapping, key: str, where: str) -> tuple[int | None, float | None]:
    side = entry.get(key)
    if side is None:
        return None, None
    if not isinstance(side, Mapping):
        raise ValueError(f"{where}: {key!r} must be a mapping, got {type(side).__name__}")
    n = side.get("n_diff")
    u = side.get("max_ulp")
    return (None if n is None else int(n)), (None if u is None else float(u))


class ColumnComparison(Sequence):
    """One step's comparison as columns, aligned with ``ids``: ``v_n``, ``v_ulp``, ``g_n`` (-1:
    no gradient entry), ``g_ulp``, ``nb`` (NaN pairs differing in bits, both sides), and an
    ``entry(k)`` that makes row ``k``'s dict (the list-of-dicts form) only when read."""

    def __init__(self, ids: list[int], cols: Mapping[str, np.ndarray], entry) -> None:
        self.ids, self.cols, self._entry = ids, cols, entry

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        return self._entry(k)


class ParityRows(Sequence):
    """The table's rows, built when asked for (a 10k-node comparison arrives up to 10 times a
    second in a live session: building every row each time cost ~60 ms of the GUI thread);
    with a ``ColumnComparison`` each cell and sort key is read from its column."""

    def __init__(self, nodes: Sequence, by_id: dict[int, Mapping],
                 cols: ColumnComparison | None = None):
        self.nodes, self.by_id, self.cols = nodes, by_id, cols
        self.ids = list(map(operator.attrgetter("id"), nodes))
        # row k's position in the columns (-1: no entry)
        self._at: np.ndarray | None = None
        if cols is not None:
            if cols.ids == self.ids:  # a live step: the tape's nodes, in order (no 100k dict)
                self._at = np.arange(len(self.ids), dtype=np.int64)
            else:
                pos = {i: k for k, i in enumerate(cols.ids)}
                self._at = np.array([pos.get(i, -1) for i in self.ids], dtype=np.int64)
        self._cache: dict[int, ParityRow] = {}
        self._keys: dict[int, np.ndarray] = {}
        self._differs: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        r = self._cache.get(k)
        if r is None:
            if len(self._cache) > 4096:  # only what is on screen (and sorting) is kept
                self._cache.clear()
            nd = self.nodes[k]
            r = self._cache[k] = (_row(nd, self.by_id.get(nd.id)) if self._at is None
                                  else _column_row(nd, self.cols, int(self._at[k])))
        return r

    def sort_keys(self, col: int) -> np.ndarray:
        """Column ``col``'s sort value for every row, as one array (what ``sort_key`` gives per
        row): straight from the nodes and the comparison entries, no row built."""
        got = self._keys.get(col)
        if got is not None:
            return got
        nodes = self.nodes
        if col == 0:
            got = np.array(self.ids, dtype=np.int64)
        elif col == 1:
            got = np.array([nd.op for nd in nodes], dtype=str)
        elif col == 2:
            got = np.array([nd.name or "" for nd in nodes], dtype=str)
        elif col == 3:
            got = np.array([sum(nd.shape) for nd in nodes], dtype=np.int64)
        elif self._at is not None:  # straight from the step's columns
            name = ("v_n", "v_ulp", "g_n", "g_ulp")[col - 4]
            c, at = self.cols.cols[name], self._at
            got = np.full(len(nodes), -1, dtype=np.int64 if col % 2 == 0 else np.float64)
            have = at >= 0
            vals = c[at[have]]
            if col >= 6:  # a node without a gradient entry: an empty cell, as in a dict
                vals = np.where(self.cols.cols["g_n"][at[have]] < 0, -1, vals)
            got[have] = vals
        else:
            side, field = ("value", "grad")[(col - 4) // 2], ("n_diff", "max_ulp")[col % 2]
            got = np.full(len(nodes), -1, dtype=np.int64 if field == "n_diff" else np.float64)
            if self.by_id:
                row_of = {i: k for k, i in enumerate(self.ids)}
                for i, e in self.by_id.items():
                    v = (e.get(side) or {}).get(field)
                    if v is not None:  # the conversions _side makes for the cells
                        got[row_of[i]] = int(v) if field == "n_diff" else float(v)
        if got.size == 0:
            got = np.zeros(0, dtype=np.int64)
        self._keys[col] = got
        return got

    def differs(self) -> np.ndarray:
        """``ParityRow.differs`` of every row, as one boolean array."""
        if self._differs is None and self._at is not None:
            at, c = self._at, self.cols.cols
            d = np.zeros(len(self.nodes), dtype=bool)
            have = at >= 0
            d[have] = (c["v_n"][at[have]] != 0) | (c["g_n"][at[have]] > 0)
            self._differs = d
        if self._differs is None:
            d = np.zeros(len(self.nodes), dtype=bool)
            if self.by_id:
                row_of = {i: k for k, i in enumerate(self.ids)}
                for i, e in self.by_id.items():
                    d[row_of[i]] = any(int((e.get(k) or {}).get("n_diff") or 0)
                                       for k in ("value", "grad"))
            self._differs = d
        return self._differs


def number_cell(row: ParityRow, col: int) -> str:
    """The text of comparison column ``col`` (4-7): a count with thousands separators, a
    distance in ulp by the window's one rule (views.models.numbers); "" where nothing was
    compared."""
    v = row.cell(col)
    if v is None:
        return ""
    return count_text(v) if col in (4, 6) else ulp_text(v)


def parity_line(row: ParityRow) -> str:
    """The node's comparison in words, with the table's numbers ("value: 490 differing, max
    356 ulp · gradient: 442 differing, max 4,210 ulp"); "" when nothing was compared."""
    parts = []
    for side, col in (("value", 4), ("gradient", 6)):
        if row.cell(col) is None and row.cell(col + 1) is None:
            continue
        n, u = number_cell(row, col) or "?", number_cell(row, col + 1) or "?"
        parts.append(f"{side}: {n} differing, max {u} ulp" if row.cell(col)
                     else f"{side}: bit-exact")
    return " · ".join(parts)


def sort_key(row: ParityRow, col: int):
    """The value column ``col`` sorts by: numbers stay numbers, a shape sorts by its total
    extent (roughly by size), an empty cell by -1 (first)."""
    v = row.cell(col)
    if col == 3:
        return int(sum(v))
    return -1 if v is None else v


def sort_keys(rows: Sequence[ParityRow], col: int) -> np.ndarray:
    """``sort_key`` of every row as one array (a ParityRows computes it without the rows)."""
    if isinstance(rows, ParityRows):
        return rows.sort_keys(col)
    keys = [sort_key(r, col) for r in rows]
    if col in (1, 2):
        return np.array(keys, dtype=str) if keys else np.zeros(0, dtype=np.int64)
    floats = any(isinstance(k, float) for k in keys)
    return np.array(keys, dtype=np.float64 if floats else np.int64)


def differs(rows: Sequence[ParityRow]) -> np.ndarray:
    """``ParityRow.differs`` of every row as one boolean array."""
    if isinstance(rows, ParityRows):
        return rows.differs()
    return np.array([r.differs for r in rows], dtype=bool)


def _row(nd, e: Mapping | None) -> ParityRow:
    vn = vu = gn = gu = None
    vb = gb = 0
    if e is not None:
        vn, vu = _side(e, "value", f"comparison for node {nd.id}")
        gn, gu = _side(e, "grad", f"comparison for node {nd.id}")
        vb, gb = (int((e.get(k) or {}).get("nan_bits_differ", 0)) for k in ("value", "grad"))
        vnan, gnan = (bool((e.get(k) or {}).get("n_nan")) for k in ("value", "grad"))
        return ParityRow(nd.id, nd.op, nd.name or "", tuple(nd.shape), vn, vu, gn, gu, vb, gb,
                         vnan, gnan)
    return ParityRow(nd.id, nd.op, nd.name or "", tuple(nd.shape), vn, vu, gn, gu, vb, gb)


def _column_row(nd, cols: ColumnComparison, k: int) -> ParityRow:
    if k < 0:
        return ParityRow(nd.id, nd.op, nd.name or "", tuple(nd.shape))
    c = cols.cols
    g_n = int(c["g_n"][k])
    f = int(c["flags"][k]) if "flags" in c else 0  # (the NaN-mismatch bits of the record)
    return ParityRow(nd.id, nd.op, nd.name or "", tuple(nd.shape), int(c["v_n"][k]),
                     float(c["v_ulp"][k]), None if g_n < 0 else g_n,
                     None if g_n < 0 else float(c["g_ulp"][k]), int(c["nb"][k]), 0,
                     bool(f & F_V_NAN), g_n >= 0 and bool(f & F_G_NAN))


def build_rows(nodes: Sequence, comparison: Iterable[Mapping] | None = None) -> ParityRows:
    """One ParityRow per node (objects with id/op/name/shape), merged with ``comparison``; the
    entries are checked here, the rows built when first read."""
    if isinstance(comparison, ColumnComparison):
        rows = ParityRows(nodes, {}, comparison)
        unknown = () if comparison.ids == rows.ids else set(comparison.ids) - set(rows.ids)
        if unknown:
            raise ValueError(f"comparison names nodes not on the tape: {sorted(unknown)[:5]}")
        return rows
    by_id: dict[int, Mapping] = {}
    for k, entry in enumerate(comparison or ()):
        if not isinstance(entry, Mapping) or "id" not in entry:
            raise ValueError(f"comparison entry {k}: needs an 'id' key, got {entry!r:.80}")
        for key in ("value", "grad"):
            side = entry.get(key)
            if side is not None and not isinstance(side, Mapping):
                raise ValueError(f"comparison for node {entry['id']}: {key!r} must be a "
                                 f"mapping, got {type(side).__name__}")
        by_id[int(entry["id"])] = entry
    rows = ParityRows(nodes, by_id)
    if by_id:
        known = set(rows.ids)
        unknown = [i for i in by_id if i not in known]
        if unknown:
            raise ValueError(f"comparison names nodes not on the tape: {sorted(unknown)[:5]}")
    return rows
