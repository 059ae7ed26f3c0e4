"""The parity table's filter and sort: the source rows to show, in order, as one numpy array.

The source is a ``ParityTableModel`` (views/parity_table.py), which gives every row's sort
values (``sort_keys``) and differing flags (``differs``) as arrays; the text filter is the
search index's boolean mask (views/models/search.py).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, Slot

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views.models.parity_rows import COLUMNS


class ParityFilterProxy(QAbstractTableModel):
    """The table's rows: the source rows that match the search mask (and, optionally, differ),
    in the order of the sorted column; one numpy index array maps them to source rows.

    NOTE: replaces a QSortFilterProxyModel, which asked Python once per row on every filter
    (60-130 ms a keystroke at 100k rows) and once per comparison when sorting (15-19 s).
    A filter or a sort here is a few numpy passes and one layout change; the selection
    (persistent indexes) follows its row, as with Qt's proxy.
    """

    def __init__(self, parent=None):
        super().__init__(parent)
        self._src = None  # a views.parity_table.ParityTableModel
        self.only_differing = False
        self.mask: np.ndarray | None = None
        self._sort_col, self._sort_order = -1, Qt.AscendingOrder
        self._order: np.ndarray | None = None  # source rows in sorted order (None: id order)
        self._map = np.zeros(0, dtype=np.intp)  # proxy row -> source row
        self._inv = np.zeros(0, dtype=np.intp)  # source row -> proxy row, -1 when hidden

    # ---- the source --------------------------------------------------------------------------
    def setSourceModel(self, model) -> None:  # noqa: N802 (Qt's name)
        """Show ``model``'s rows (its resets and in-place updates are followed)."""
        self.beginResetModel()
        self._src = model
        model.modelAboutToBeReset.connect(self._source_about_to_reset)
        model.modelReset.connect(self._source_reset)
        model.dataChanged.connect(self._source_changed)
        self._order = None
        self._map, self._inv = self._compute()
        self.endResetModel()

    def sourceModel(self):  # noqa: N802 (Qt's name)
        return self._src

    @Slot()
    def _source_about_to_reset(self) -> None:
        self.beginResetModel()

    @Slot()
    def _source_reset(self) -> None:
        if self.mask is not None and len(self.mask) != self._src.rowCount():
            self.mask = None  # another tape: the panel filters again with its new index
        self._order = self._sorted(self._sort_col, self._sort_order)
        self._map, self._inv = self._compute()
        self.endResetModel()

    @Slot(QModelIndex, QModelIndex)
    def _source_changed(self, top: QModelIndex, bottom: QModelIndex) -> None:
        # a new comparison for the same nodes: the order and "only differing" may change
        # (what Qt's dynamic sort/filter did row by row)
        if self.only_differing or self._sort_col >= 4:
            self._relayout(self._sorted(self._sort_col, self._sort_order))
        if self._map.size:
            self.dataChanged.emit(self.index(0, top.column()),
                                  self.index(self._map.size - 1, bottom.column()))

    # ---- filter and sort ---------------------------------------------------------------------
    def set_only_differing(self, on: bool) -> None:
        """Keep only rows whose value or gradient bits differ."""
        self.only_differing = bool(on)
        self._relayout(self._order)

    def set_mask(self, mask: np.ndarray | None) -> None:
        """Keep only source rows where ``mask`` is True (None: every row); one relayout."""
        self.mask = mask
        self._relayout(self._order)

    def sort(self, column: int, order=Qt.AscendingOrder) -> None:
        """Order by ``column``'s sort values (stable: ties stay in id order); -1: id order."""
        self._sort_col, self._sort_order = int(column), order
        self._relayout(self._sorted(self._sort_col, order))

    def sortColumn(self) -> int:  # noqa: N802 (Qt's name)
        return self._sort_col

    def sortOrder(self):  # noqa: N802 (Qt's name)
        return self._sort_order

    def _sorted(self, column: int, order) -> np.ndarray | None:
        if self._src is None or not 0 <= column < len(COLUMNS):
            return None
        keys = self._src.sort_keys(column)
        if not keys.size:
            return None
        # ranks of the values: descending is then a stable sort of the negated ranks, so ties
        # keep id order both ways (strings cannot be negated)
        _, rank = np.unique(keys, return_inverse=True)
        if order == Qt.DescendingOrder:
            rank = -rank
        return np.argsort(rank, kind="stable").astype(np.intp)

    def _compute(self) -> tuple[np.ndarray, np.ndarray]:
        n = 0 if self._src is None else self._src.rowCount()
        keep = None
        if self.mask is not None and len(self.mask) == n:
            keep = np.asarray(self.mask, dtype=bool)
        if self.only_differing and n:
            d = self._src.differs()
            keep = d if keep is None else keep & d
        order = self._order if self._order is not None else np.arange(n, dtype=np.intp)
        rows = order if keep is None else order[keep[order]]
        inv = np.full(n, -1, dtype=np.intp)
        inv[rows] = np.arange(rows.size, dtype=np.intp)
        return rows, inv

    def _relayout(self, order: np.ndarray | None) -> None:
        """Apply a new order and filter as one layout change; persistent indexes (the
        selection, the current row) follow their source rows or become invalid."""
        self.layoutAboutToBeChanged.emit()
        old = self.persistentIndexList()
        src = [int(self._map[i.row()]) if 0 <= i.row() < self._map.size else -1 for i in old]
        self._order = order
        self._map, self._inv = self._compute()
        new = []
        for i, s in zip(old, src, strict=True):
            r = int(self._inv[s]) if s >= 0 else -1
            new.append(self.index(r, i.column()) if r >= 0 else QModelIndex())
        self.changePersistentIndexList(old, new)
        self.layoutChanged.emit()

    # ---- mapping -----------------------------------------------------------------------------
    def mapToSource(self, index: QModelIndex) -> QModelIndex:  # noqa: N802 (Qt's name)
        """The source model's index behind a table index (invalid for an invalid one)."""
        if not index.isValid() or not 0 <= index.row() < self._map.size:
            return QModelIndex()
        return self._src.index(int(self._map[index.row()]), index.column())

    def mapFromSource(self, index: QModelIndex) -> QModelIndex:  # noqa: N802 (Qt's name)
        """The table index of a source index (invalid when the filter hides its row)."""
        if not index.isValid() or not 0 <= index.row() < self._inv.size:
            return QModelIndex()
        r = int(self._inv[index.row()])
        return self.index(r, index.column()) if r >= 0 else QModelIndex()

    # ---- Qt's table model --------------------------------------------------------------------
    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802,B008 (Qt override)
        return 0 if parent.isValid() else int(self._map.size)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802,B008 (Qt override)
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802 (Qt override)
        if orientation == Qt.Horizontal and self._src is not None:
            return self._src.headerData(section, orientation, role)
        return None

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        r = index.row()
        if not 0 <= r < self._map.size:
            return None
        return self._src.cell_data(int(self._map[r]), index.column(), role)
