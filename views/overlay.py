"""Parity colours as arrays: a palette and one colour code per node (or per drawn item).

A live 100k-node step has a handful of distinct colours. Held as a dict of 100k entries, each
snapshot built, copied and walked that dict four times on the GUI thread (the step's colours,
the graph view, the canvas, the minimap: ~70 ms, issue 29 target 4). Here a model hands the
view ``NodeColors`` (node ids, a code per node, the palette's colour names); the view reduces
it to ``ItemColors`` (per drawn item: a code, -1 for none) in a few numpy passes, and the
canvas and the minimap read the codes. ``ItemColors`` also reads as the ``{item: QColor}``
mapping it replaces (``canvas.overlay[item]``, ``.items()``), for tests and the report.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
from PySide6.QtGui import QColor

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views.models.ulp_scale import NAN_COLOR  # (the one ulp scale's NaN violet)


def severity(color: QColor) -> tuple[bool, int]:
    """Order of parity stripe colours, worst last: exact green < amber < red < NaN violet."""
    # NOTE: the stripes run amber → red by lowering green (views.models.ulp_scale.ulp_color);
    # exact green has the most green of all, so it ranks lowest
    return color.name() == NAN_COLOR, -color.green()


class NodeColors:
    """A parity colour per node: ``palette[code[k]]`` is node ``ids[k]``'s colour (a name
    QColor reads, e.g. ``views.models.ulp_scale.EXACT_COLOR``)."""

    __slots__ = ("code", "ids", "palette")

    def __init__(self, ids, code, palette: Sequence[str]) -> None:
        self.ids = np.asarray(ids, dtype=np.int64).ravel()
        self.code = np.asarray(code, dtype=np.int64).ravel()
        self.palette = list(palette)
        if self.code.shape != self.ids.shape:
            raise ValueError(f"{self.code.size} colour codes for {self.ids.size} nodes")
        if self.code.size and not 0 <= int(self.code.min()) <= int(self.code.max()) < len(
                self.palette):
            raise ValueError(f"a colour code outside the palette of {len(self.palette)}")

    def __len__(self) -> int:
        return int(self.ids.size)

    @classmethod
    def from_mapping(cls, colors: Mapping) -> NodeColors:
        """``{node id: colour}`` (names or QColors; equal colours share one palette entry)."""
        names = [v if isinstance(v, str) else QColor(v).name(QColor.HexArgb)
                 for v in colors.values()]
        index: dict[str, int] = {}
        code = np.fromiter((index.setdefault(v, len(index)) for v in names), dtype=np.int64,
                           count=len(names))
        ids = np.fromiter(colors.keys(), dtype=np.int64, count=len(colors))
        return cls(ids, code, list(index))

    def to_items(self, node_item: np.ndarray, n_items: int) -> ItemColors:
        """Per drawn item (``node_item[id]``: the item that draws node ``id``) the colour of
        its worst node: a collapsed scope's box shows its worst child (NaN violet, then least
        green); among equally severe colours the first given wins. Ids off the graph are left
        out."""
        # one QColor per distinct name ("#ff0000" and QColor's "#ffff0000" are one colour)
        qc: dict[str, QColor] = {}
        for nm in self.palette:
            q = QColor(nm)
            qc.setdefault(q.name(QColor.HexArgb), q)
        names = list(qc)
        where = {k: i for i, k in enumerate(names)}
        remap = np.array([where[QColor(nm).name(QColor.HexArgb)] for nm in self.palette],
                         dtype=np.int64)
        shown = list(qc.values())
        keys = [severity(q) for q in shown]
        levels = sorted(set(keys))
        sev = np.array([levels.index(k) for k in keys], dtype=np.int64)
        out = np.full(n_items, -1, dtype=np.int32)
        n = node_item.shape[0]
        at = np.flatnonzero((self.ids >= 0) & (self.ids < n))
        if at.size:
            code = remap[self.code[at]]
            items = node_item[self.ids[at]]
            m = at.size
            # NOTE: one key per node, worst severity first, then the earliest given: the
            # largest key of each item is the colour it shows (as the former sort by item,
            # -severity, position picked)
            key = sev[code] * m + (m - 1 - np.arange(m, dtype=np.int64))
            best = np.full(n_items, -1, dtype=np.int64)
            np.maximum.at(best, items, key)
            has = np.flatnonzero(best >= 0)
            out[has] = code[m - 1 - best[has] % m]
        return ItemColors(out, shown, sev)


class ItemColors(Mapping):
    """Each drawn item's parity colour: ``palette[code[item]]`` (code -1: none); ``sev[c]``
    the severity rank of palette entry ``c`` (0 best; equal severities share a rank). Reads
    as the mapping ``{item: QColor}`` of the coloured items, in item order."""

    def __init__(self, code: np.ndarray, palette: Sequence[QColor], sev) -> None:
        self.code = np.asarray(code, dtype=np.int32)
        self.palette = list(palette)
        self.sev = np.asarray(sev, dtype=np.int64)
        self._items: np.ndarray | None = None

    @classmethod
    def from_mapping(cls, colors: Mapping, n_items: int | None = None) -> ItemColors:
        """``{item: QColor or name}`` as codes (``n_items``: how many items the graph draws)."""
        if isinstance(colors, ItemColors):
            return colors
        if n_items is None:
            n_items = max((int(k) for k in colors), default=-1) + 1
        nc = NodeColors.from_mapping(colors)
        return nc.to_items(np.arange(n_items, dtype=np.int64), n_items)

    def items_colored(self) -> np.ndarray:
        """The items that have a colour, ascending."""
        if self._items is None:
            self._items = np.flatnonzero(self.code >= 0)
        return self._items

    def __getitem__(self, item) -> QColor:
        it = int(item)
        c = int(self.code[it]) if 0 <= it < self.code.size else -1
        if c < 0:
            raise KeyError(item)
        return self.palette[c]

    def __iter__(self) -> Iterator[int]:
        return iter(self.items_colored().tolist())

    def __len__(self) -> int:
        return int(self.items_colored().size)

    def __contains__(self, item) -> bool:
        try:
            it = int(item)
        except (TypeError, ValueError):
            return False
        return 0 <= it < self.code.size and self.code[it] >= 0


EMPTY = ItemColors(np.empty(0, dtype=np.int32), [], [])


def item_mask(node_item: np.ndarray | None, n_items: int, node_ids) -> np.ndarray:
    """Which items draw any of ``node_ids`` (ids off the graph are left out)."""
    mask = np.zeros(n_items, dtype=bool)
    if node_item is None:
        return mask
    ids = (node_ids if isinstance(node_ids, np.ndarray) else
           np.fromiter(map(int, node_ids), dtype=np.int64)).astype(np.int64, copy=False).ravel()
    n = node_item.shape[0]
    mask[node_item[ids[(ids >= 0) & (ids < n)]]] = True
    return mask
