"""The parity table: a thin Qt model over ``ParityRow`` data, sortable and filterable."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    Qt,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from views.graph_model import shape_text
from views.parity_rows import COLUMNS, ParityRow, ParityRows, differs, sort_key, sort_keys
from views.search import NodeSearch

SORT_ROLE = Qt.UserRole + 1
DEBOUNCE_MS = 120  # a pause in typing this long applies the filter
DEBOUNCE_FROM = 2000  # rows: smaller tables filter on every keystroke
ID_ROLE = Qt.UserRole + 2


_ROLES = frozenset({Qt.DisplayRole, SORT_ROLE, ID_ROLE, Qt.TextAlignmentRole, Qt.BackgroundRole,
                    Qt.ToolTipRole})
_DIFF_BG = QColor("#fde2e2")


def _seq(rows) -> Sequence[ParityRow]:
    """Rows as given when they are a lazy ParityRows (built on read), else a list."""
    return rows if isinstance(rows, ParityRows) else list(rows or [])


def _ids(rows) -> list[int]:
    return rows.ids if isinstance(rows, ParityRows) else [r.id for r in rows]


class ParityTableModel(QAbstractTableModel):
    """Rows of ParityRow; Qt.UserRole+1 gives sortable raw values (empty cells sort first)."""

    def __init__(self, rows: Sequence[ParityRow] | None = None, parent=None):
        super().__init__(parent)
        self._rows: Sequence[ParityRow] = _seq(rows)
        self._row_of = {i: k for k, i in enumerate(_ids(self._rows))}

    def set_rows(self, rows: Sequence[ParityRow]) -> None:
        """Replace every row."""
        self.beginResetModel()
        self._rows = _seq(rows)
        self._row_of = {i: k for k, i in enumerate(_ids(self._rows))}
        self.endResetModel()

    def update_rows(self, rows: list[ParityRow]) -> bool:
        """Swap in rows for the same nodes (a new comparison): no reset, selection and scroll
        stay; False (nothing done) when the nodes differ."""
        if _ids(rows) != _ids(self._rows):
            return False
        self._rows = _seq(rows)
        if rows:
            self.dataChanged.emit(self.index(0, 4), self.index(len(rows) - 1, len(COLUMNS) - 1))
        return True

    def row_of(self, node_id: int) -> int:
        """Source row of a node id, or -1."""
        return self._row_of.get(node_id, -1)

    def row_data(self, row: int) -> ParityRow:
        """The plain row behind table row ``row``."""
        return self._rows[row]

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802,B008 (Qt override)
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802,B008 (Qt override)
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802 (Qt override)
        if role == Qt.DisplayRole and orientation == Qt.Horizontal and 0 <= section < len(COLUMNS):
            return COLUMNS[section]
        return None

    def sort_keys(self, col: int) -> np.ndarray:
        """Column ``col``'s sort value (SORT_ROLE) of every row, as one array."""
        return sort_keys(self._rows, col)

    def differs(self) -> np.ndarray:
        """Per row: do its value or gradient bits differ."""
        return differs(self._rows)

    def data(self, index, role=Qt.DisplayRole):
        # NOTE: called per cell and role on every repaint: unhandled roles leave first
        if role not in _ROLES or not index.isValid():
            return None
        return self.cell_data(index.row(), index.column(), role)

    def cell_data(self, row: int, c: int, role):
        """``data()`` of the cell at source row ``row``, column ``c``."""
        if not 0 <= row < len(self._rows):
            return None
        r = self._rows[row]
        v = r.cell(c)
        if role == Qt.DisplayRole:
            if v is None:
                return ""
            if c == 3:
                return shape_text(v)
            if c in (5, 7):
                return f"{v:g}"
            return str(v)
        if role == SORT_ROLE:
            return sort_key(r, c)
        if role == ID_ROLE:
            return r.id
        if role == Qt.TextAlignmentRole and c not in (1, 2):
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role == Qt.BackgroundRole and c >= 4 and v:
            return _DIFF_BG  # this side has differing bits
        if role == Qt.ToolTipRole and c == 2:
            return r.name
        if role == Qt.ToolTipRole and c in (4, 6) and r.nan_bits(c):
            return (f"{r.nan_bits(c)} NaN elements differ only in sign or payload: equal "
                    "under the NaN policy, not counted in n_diff")
        return None


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
        self._src: ParityTableModel | None = None
        self.only_differing = False
        self.mask: np.ndarray | None = None
        self._sort_col, self._sort_order = -1, Qt.AscendingOrder
        self._order: np.ndarray | None = None  # source rows in sorted order (None: id order)
        self._map = np.zeros(0, dtype=np.intp)  # proxy row -> source row
        self._inv = np.zeros(0, dtype=np.intp)  # source row -> proxy row, -1 when hidden

    # ---- the source --------------------------------------------------------------------------
    def setSourceModel(self, model: ParityTableModel) -> None:  # noqa: N802 (Qt's name)
        """Show ``model``'s rows (its resets and in-place updates are followed)."""
        self.beginResetModel()
        self._src = model
        model.modelAboutToBeReset.connect(self._source_about_to_reset)
        model.modelReset.connect(self._source_reset)
        model.dataChanged.connect(self._source_changed)
        self._order = None
        self._map, self._inv = self._compute()
        self.endResetModel()

    def sourceModel(self) -> ParityTableModel | None:  # noqa: N802 (Qt's name)
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
        if role not in _ROLES or not index.isValid():
            return None
        r = index.row()
        if not 0 <= r < self._map.size:
            return None
        return self._src.cell_data(int(self._map[r]), index.column(), role)


class ParityPanel(QWidget):
    """Filter box + table; selecting a row emits ``node_selected``."""

    node_selected = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.model = ParityTableModel(parent=self)
        self.proxy = ParityFilterProxy(self)
        self.proxy.setSourceModel(self.model)
        self.filter = QLineEdit(self)
        self.filter.setPlaceholderText("Filter by op, name or id")
        self.filter.setClearButtonEnabled(True)
        self.only_diff = QCheckBox("only differing", self)
        self.table = QTableView(self)
        self.table.setModel(self.proxy)
        # NOTE: rows arrive in id order; no sort until the user clicks a header (sorting 10k
        # rows through Python data() calls cost 1.5 s of opening a tape)
        self.table.horizontalHeader().setSortIndicator(-1, Qt.AscendingOrder)
        self.table.setSortingEnabled(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        # size columns from the first rows only: every row would cost a Python data() call each
        self.table.horizontalHeader().setResizeContentsPrecision(40)
        self.table.setAlternatingRowColors(True)
        # NOTE: the comparison columns are shown right after id and op (the model's order is
        # unchanged): at 1280×800 the dock is ~560 px wide, and after a long name and a shape
        # no comparison column was on screen
        hh = self.table.horizontalHeader()
        for c in range(4, len(COLUMNS)):
            hh.moveSection(hh.visualIndex(c), c - 2)
        self.setMinimumWidth(340)  # id, op and both value columns, whatever docks beside it
        top = QHBoxLayout()
        top.addWidget(self.filter, 1)
        top.addWidget(self.only_diff)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.addLayout(top)
        lay.addWidget(self.table, 1)
        self.search: NodeSearch | Callable[[], NodeSearch] | None = None
        self.filters = 0  # filters applied (the debounce test counts them)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DEBOUNCE_MS)
        self._timer.timeout.connect(self._apply_filter)
        self.filter.textChanged.connect(self._set_filter)
        self.only_diff.toggled.connect(self.proxy.set_only_differing)
        self.table.selectionModel().currentRowChanged.connect(self._row_changed)
        self._syncing = False

    def set_rows(self, rows: list[ParityRow]) -> None:
        """Show new rows (a new tape or a new comparison)."""
        fresh = not self.model.rowCount() or self.model.row_data(0).value_n_diff is None
        if self.model.update_rows(rows):
            # the same nodes (a new comparison): no reset, no sizing from every cell (~0.1 s)
            if fresh:
                fm = self.table.horizontalHeader().fontMetrics()
                for c in range(4, len(COLUMNS)):
                    self.table.setColumnWidth(c, fm.horizontalAdvance(COLUMNS[c]) + 24)
            return
        self.model.set_rows(rows)
        if self.filter.text().strip():
            self._apply_filter()
        self.table.resizeColumnsToContents()
        self.table.setColumnWidth(2, min(self.table.columnWidth(2), 160))
        if rows:  # contents were sized from the first rows: the last id and the longest op fit
            fm = self.table.fontMetrics()
            wid = fm.horizontalAdvance(str(max(_ids(rows)))) + 16
            ops = {nd.op for nd in rows.nodes} if isinstance(rows, ParityRows) else {
                r.op for r in rows}
            wop = max(fm.horizontalAdvance(o) for o in ops) + 16
            self.table.setColumnWidth(0, max(self.table.columnWidth(0), wid))
            self.table.setColumnWidth(1, max(self.table.columnWidth(1), min(wop, 140)))

    def set_search(self, search: NodeSearch | Callable[[], NodeSearch] | None) -> None:
        """Filter with ``search`` (the graph's index over the same nodes, in row order), or
        with what a callable returns when the first filter is typed (built lazily: 0.9 s at
        100k nodes, not paid by opening)."""
        self.search = search
        self._apply_filter()

    def _index(self) -> NodeSearch:
        if callable(self.search):
            self.search = self.search()
        n = self.model.rowCount()
        if self.search is None or self.search.n != n:
            rows = self.model._rows
            self.search = NodeSearch(rows.nodes if isinstance(rows, ParityRows) else rows)
        return self.search

    @Slot(str)
    def _set_filter(self, text: str) -> None:
        # a big table filters once typing pauses; a small one on every keystroke
        if self.model.rowCount() >= DEBOUNCE_FROM:
            self._timer.start()
        else:
            self._apply_filter()

    @Slot()
    def _apply_filter(self) -> None:
        self._timer.stop()
        text = self.filter.text()
        if not text.strip():
            if self.proxy.mask is not None:
                self.proxy.set_mask(None)
            return
        self.filters += 1
        self.proxy.set_mask(self._index().mask(text))

    @Slot(QModelIndex, QModelIndex)
    def _row_changed(self, cur: QModelIndex, _prev: QModelIndex) -> None:
        if cur.isValid() and not self._syncing:
            self.node_selected.emit(int(self.proxy.data(cur, ID_ROLE)))

    @Slot(int)
    def select_node(self, node_id: int) -> None:
        """Select the row of ``node_id`` (if it passes the filter) without re-emitting."""
        row = self.model.row_of(node_id)
        if row < 0:
            return
        idx = self.proxy.mapFromSource(self.model.index(row, 0))
        if not idx.isValid():
            return  # filtered out
        self._syncing = True
        try:
            self.table.setCurrentIndex(idx)
            self.table.scrollTo(idx)
        finally:
            self._syncing = False
