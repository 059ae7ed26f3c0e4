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
    QStyle,
    QTableView,
    QVBoxLayout,
    QWidget,
)

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views.models.graph_model import shape_text
from tapescope.views.models.numbers import ULP_SCIENTIFIC_FROM, count_text, ulp_exact, ulp_text
from tapescope.views.models.parity_rows import (
    COLUMNS,
    HEADER_TIPS,
    HEADERS,
    ParityRow,
    ParityRows,
    differs,
    number_cell,
    sort_key,
    sort_keys,
)
from tapescope.views.models.plain import cut, tip
from tapescope.views.models.search import NodeSearch
from tapescope.views.models.ulp_scale import ulp_color
from tapescope.views.parity_proxy import ParityFilterProxy

SORT_ROLE = Qt.UserRole + 1
DEBOUNCE_MS = 120  # a pause in typing this long applies the filter
DEBOUNCE_FROM = 2000  # rows: smaller tables filter on every keystroke
ID_ROLE = Qt.UserRole + 2
KEY_ROLE = Qt.UserRole + 3  # a header's field name (COLUMNS), under the words it shows


_ROLES = frozenset({Qt.DisplayRole, SORT_ROLE, ID_ROLE, Qt.TextAlignmentRole, Qt.BackgroundRole,
                    Qt.ForegroundRole, Qt.ToolTipRole, Qt.DecorationRole})
_DECORATION = Qt.DecorationRole
_SWATCH: dict[float, QColor] = {}  # a differing row's worst-ulp chip, per worst value
_DIFF_BG = QColor("#fde2e2")
_DIFF_FG = QColor("#111827")  # dark on the pink, whatever the theme's text colour


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
        if orientation != Qt.Horizontal or not 0 <= section < len(COLUMNS):
            return None
        key = COLUMNS[section]
        if role == Qt.DisplayRole:  # words, not field names ("value\ndiffering", not n_diff)
            return HEADERS.get(key, key)
        if role == KEY_ROLE:
            return key
        if role == Qt.ToolTipRole:
            return HEADER_TIPS.get(key)
        return None

    def sort_keys(self, col: int) -> np.ndarray:
        """Column ``col``'s sort value (SORT_ROLE) of every row, as one array."""
        return sort_keys(self._rows, col)

    def differs(self) -> np.ndarray:
        """Per row: do its value or gradient bits differ."""
        return differs(self._rows)

    def _chip(self, row: int) -> QColor | None:
        """A differing row's chip: its node's worst ulp in the window's one scale (the graph's
        stripe), one QColor per worst value (a repaint asks each visible row again)."""
        r = self._rows[row]
        if not r.differs:
            return None
        w = r.worst
        got = _SWATCH.get(w)
        if got is None:
            got = _SWATCH[w] = QColor(ulp_color(w))
        return got

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        return self.cell_data(index.row(), index.column(), role)

    def cell_data(self, row: int, c: int, role):
        """``data()`` of the cell at source row ``row``, column ``c``."""
        # NOTE: called per cell and role on every repaint: unhandled roles leave first
        if role not in _ROLES or not 0 <= row < len(self._rows):
            return None
        # (asked of every cell on every repaint: an identity test, ~0.15 us; `role == Qt.X`
        # costs ~7 us in PySide6, a tax on every other role's call)
        if role is _DECORATION:  # only the op cell has one
            return self._chip(row) if c == 1 else None
        r = self._rows[row]
        v = r.cell(c)
        if role == Qt.DisplayRole:
            if v is None:
                return ""
            if c == 3:
                return shape_text(v)
            if c >= 4:  # the window's one rule (views.models.numbers): 23,296 and 5.87e+06
                return number_cell(r, c)
            return cut(v) if c == 2 else str(v)  # a name from the file: one line, cut
        if role == SORT_ROLE:
            return sort_key(r, c)
        if role == ID_ROLE:
            return r.id
        if role == Qt.TextAlignmentRole and c not in (1, 2):
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role == Qt.BackgroundRole and c >= 4 and v:
            return _DIFF_BG  # this side has differing bits
        if role == Qt.ForegroundRole and c >= 4 and v:
            return _DIFF_FG
        if role == Qt.ToolTipRole and c == 2:
            return tip(r.name)  # the full name, escaped: Qt reads a tooltip as HTML
        if role == Qt.ToolTipRole and c in (5, 7) and v is not None and v >= ULP_SCIENTIFIC_FROM:
            return f"{ulp_exact(v)} ulp"  # every digit of what the cell rounds
        if role == Qt.ToolTipRole and c in (4, 6) and r.nan_bits(c):
            return (f"{r.nan_bits(c)} NaN elements differ only in sign or payload: equal "
                    "under the NaN policy, not counted in n_diff")
        return None


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
                    words = max(HEADERS.get(COLUMNS[c], COLUMNS[c]).split("\n"),
                                key=fm.horizontalAdvance)
                    self.table.setColumnWidth(c, fm.horizontalAdvance(words) + 24)
            self.fit_numbers()
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
        self.fit_numbers()

    def fit_numbers(self) -> None:
        """Widen each comparison column to its widest number: a cell never elides one
        ("3.75…" read as another number, issue 46). From the columns' arrays, not a data()
        call per row: a 10k-node step arrives ten times a second. Columns only grow, so a
        step with smaller numbers does not make the table jump."""
        if not self.model.rowCount():
            return
        t = self.table
        fm = t.fontMetrics()
        margin = 2 * (t.style().pixelMetric(QStyle.PM_FocusFrameHMargin, None, t) + 1) + 6
        for c in range(4, len(COLUMNS)):
            keys = np.asarray(self.model.sort_keys(c), dtype=np.float64)
            keys = keys[np.isfinite(keys) & (keys >= 0)]
            if c in (4, 6):
                texts = [count_text(keys.max())] if keys.size else []
            else:  # the widest ulp text is the largest number of either form
                small = keys[keys < ULP_SCIENTIFIC_FROM]
                texts = ["NaN"] + [ulp_text(k.max()) for k in (keys, small) if k.size]
            need = max((fm.horizontalAdvance(x) for x in texts), default=0) + margin
            if need > t.columnWidth(c):
                t.setColumnWidth(c, need)

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
