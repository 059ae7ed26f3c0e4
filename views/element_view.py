"""The element view: for one node at one step, where reference and candidate differ, element by
element: a log-scale ulp map, the worst elements with both sides' bits, and "Copy repro".

Fed two arrays (``set_pair``); the worst-elements table is a thin ``QAbstractTableModel`` over
``worst_elements`` (plain data). Numbers are printed so that they round-trip (``%.17g`` for
float64, ``%.9g`` for float32), never cut: the bits are beside them in hex.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.core import precision
from tapescope.views import theme
from tapescope.views.models.numbers import ulp_exact, ulp_text

WORST_COLUMNS = ("index", "reference", "candidate", "reference bits", "candidate bits", "ulp",
                 "rel error")
# NOTE: the table shows each side's bits under its number and the relative error under the ulp
# (two lines a row), and hides the columns folded in: seven columns side by side did not fit a
# 600 px dock, and the ulp and relative error went behind a scroll bar (issue 25)
FOLDED = {1: 3, 2: 4, 5: 6}  # shown column → the one whose text is its second line
MAX_ROWS = 200
# wide rows of a float64 pair (an index of rank 3, a 17-digit number with a two-digit exponent,
# a 9.2e18 ulp distance, a NaN against a number): the table's minimum width is theirs, whatever
# the node (a wider row, a rank-5 index or a three-digit exponent, scrolls the table a little)
TEMPLATE_ROWS = [((99, 99, 99), np.float64(-1.2345678901234567e-05),
                  np.float64(-1.2345678901234567e-05), 9.2e18, 1.2345678901234567e-300),
                 ((99, 99, 99), np.float64(0.0), np.float64(np.nan), np.nan, np.inf)]


def mono_font() -> QFont:
    """The numbers' and bits' font (a digit per column, so the hex lines up)."""
    f = QFont("Monospace")
    f.setStyleHint(QFont.TypeWriter)
    return f


def number_text(v: float, dtype: np.dtype) -> str:
    """A float as digits that round-trip in its dtype (never cut)."""
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    dt = np.dtype(dtype)
    # the shortest count of significant digits that round-trips in each type
    digits = {np.dtype(np.float32): 9, precision.FLOAT16: 5, precision.BFLOAT16: 4}.get(dt, 17)
    return f"{v:.{digits}g}"


def bits_text(v, dtype: np.dtype) -> str:
    """The IEEE bit pattern of one element as hex (``0x3ff0000000000000``)."""
    dt = np.dtype(dtype)
    if dt in precision.HALF:  # the half type's own 16 bits: 4 hex digits
        return f"0x{int(np.asarray(v).astype(dt).view(np.uint16)):04x}"
    if dt == np.float32:
        return f"0x{int(np.asarray(v, np.float32).view(np.uint32)):08x}"
    return f"0x{int(np.asarray(v, np.float64).view(np.uint64)):016x}"


def _is_float(a: np.ndarray) -> bool:
    """float64/32/16 or bfloat16 (ml_dtypes' bfloat16 is numpy kind "V")."""
    return a.dtype.kind == "f" or a.dtype in precision.HALF


def _same_dtype(ref: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r, c = np.asarray(ref), np.asarray(cand)
    if r.dtype != c.dtype:  # compared in the narrower dtype, as the parity summaries are
        dt = min(r.dtype, c.dtype, key=lambda d: d.itemsize)
        r, c = r.astype(dt), c.astype(dt)
    return r, c


def n_differ(ref: np.ndarray, cand: np.ndarray) -> int:
    """Elements whose bits differ (two NaNs are equal: the NaN policy)."""
    r, c = _same_dtype(ref, cand)
    sint = precision.bits_types(r.dtype)[0]
    both_nan = np.isnan(r) & np.isnan(c)
    return int(((r.view(sint) != c.view(sint)) & ~both_nan).sum())


def worst_elements(ref: np.ndarray, cand: np.ndarray, limit: int = MAX_ROWS) -> list[tuple]:
    """The differing elements, worst first: (index tuple, ref, cand, ulp (nan: a NaN against a
    number), rel error). Compared in the narrower dtype, as the parity summaries are."""
    from tapescope.core.parity import ulp_distance

    r, c = np.asarray(ref), np.asarray(cand)
    if r.dtype != c.dtype:
        dt = min(r.dtype, c.dtype, key=lambda d: d.itemsize)
        r, c = r.astype(dt), c.astype(dt)
    sint = precision.bits_types(r.dtype)[0]
    rb, cb = r.reshape(-1).view(sint), c.reshape(-1).view(sint)
    both_nan = np.isnan(r.reshape(-1)) & np.isnan(c.reshape(-1))
    differ = (rb != cb) & ~both_nan  # two NaNs are equal (the NaN policy)
    idx = np.flatnonzero(differ)
    if idx.size == 0:
        return []
    ulp = ulp_distance(r, c).astype(np.float64)[idx]
    one_nan = np.isnan(r.reshape(-1)[idx]) | np.isnan(c.reshape(-1)[idx])
    ulp[one_nan] = np.nan
    key = np.where(one_nan, np.inf, ulp)
    order = np.argsort(-key, kind="stable")[:limit]
    rv, cv = r.reshape(-1)[idx], c.reshape(-1)[idx]
    out = []
    with np.errstate(all="ignore"):
        for k in order.tolist():
            a, b = float(rv[k]), float(cv[k])
            rel = abs(b - a) / abs(a) if a != 0 and np.isfinite(a) else float("inf")
            out.append((tuple(int(i) for i in np.unravel_index(idx[k], r.shape)), rv[k], cv[k],
                        float(ulp[k]), rel))
    return out


class WorstElementsModel(QAbstractTableModel):
    """Rows of ``worst_elements``; the dtype decides how numbers and bits are printed."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[tuple] = []
        self.dtype = np.dtype(np.float64)

    def set_rows(self, rows: list[tuple], dtype) -> None:
        """Replace the rows."""
        self.beginResetModel()
        self.rows, self.dtype = list(rows), np.dtype(dtype)
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802,B008 (Qt override)
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802,B008 (Qt override)
        return 0 if parent.isValid() else len(WORST_COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802 (Qt override)
        if orientation == Qt.Horizontal and 0 <= section < len(WORST_COLUMNS):
            if role == Qt.DisplayRole:
                if section == 5:
                    return "ulp\nrel error"
                return WORST_COLUMNS[section] + ("\nbits" if section in (1, 2) else "")
            if role == Qt.ToolTipRole:
                return {1: "the reference's value (digits that round-trip) and its bits (hex)",
                        2: "the candidate's value and its bits", 5: "units in the last place "
                        "between the two, and the relative error |candidate − reference| / "
                        "|reference|"}.get(section)
        return None

    def cell_text(self, row: int, col: int) -> str:
        """The text of one cell (what the table shows)."""
        idx, a, b, ulp, rel = self.rows[row]
        if col == 0:
            return "[" + ", ".join(map(str, idx)) + "]"
        if col in (1, 2):
            return number_text(float(a if col == 1 else b), self.dtype)
        if col in (3, 4):
            return bits_text(a if col == 3 else b, self.dtype)
        if col == 5:
            return "NaN vs number" if np.isnan(ulp) else ulp_text(ulp)
        return f"{rel:.6g}"

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self.rows):
            return None
        if role == Qt.DisplayRole:
            r, c = index.row(), index.column()
            if c in FOLDED:  # the number, its bits (or relative error) below it
                return f"{self.cell_text(r, c)}\n{self.cell_text(r, FOLDED[c])}"
            return self.cell_text(r, c)
        if role == Qt.ToolTipRole:
            return self.tip_text(index.row(), index.column())
        if role == Qt.TextAlignmentRole:
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role == Qt.FontRole and index.column() in (1, 2, 3, 4):
            return mono_font()
        return None

    def tip_text(self, row: int, col: int) -> str:
        """The full value of a cell, whatever its column's width: both sides with their bits
        for a number, the ulp and relative error in full for the distance."""
        idx, a, b, ulp, rel = self.rows[row]
        where = "[" + ", ".join(map(str, idx)) + "]"
        if col in (1, 2, 3, 4):
            side, v = ("reference", a) if col in (1, 3) else ("candidate", b)
            return (f"{side} {where} ({self.dtype}): {number_text(float(v), self.dtype)}\n"
                    f"bits {bits_text(v, self.dtype)}")
        if col in (5, 6):
            return (f"{where}: " + ("a NaN against a number" if np.isnan(ulp) else
                                    f"{ulp_exact(ulp)} ulp apart") + f"; relative error {rel!r}")
        return f"element {where}"


def ulp_map(cpu: np.ndarray, dev: np.ndarray) -> np.ndarray:
    """Per-element ulp distance as float64 (NaN where exactly one side is NaN; two NaNs are
    0 apart whatever their sign and payload: the NaN policy, docs/reference-order.md)."""
    from tapescope.core.parity import ulp_distance

    d = ulp_distance(cpu, dev).astype(np.float64).reshape(np.shape(cpu))
    c, v = np.asarray(cpu), np.asarray(dev)
    nan_mismatch = np.isnan(c) != np.isnan(v)
    d[nan_mismatch] = np.nan  # drawn as "not comparable", counted as NaN in the stats row
    return d


def ulp_level_image(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """The ulp map as levels of the window's one ulp scale (views.models.ulp_scale.heat_levels), 2-D
    (rank > 2 folds its leading dims into rows), a NaN against a number at level 255."""
    from tapescope.views.models.ulp_scale import heat_levels

    u = ulp_map(*_same_dtype(ref, cand))
    img = heat_levels(u)
    if img.ndim == 0:
        return img.reshape(1, 1)
    if img.ndim == 1:
        return img.reshape(1, -1)
    return img.reshape(-1, img.shape[-1]) if img.ndim > 2 else img


class ElementView(QWidget):
    """Log-scale ulp map above the worst-elements table; ``repro_requested`` from the button."""

    repro_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.summary = QLabel("Select a node of a live session (or a tape with a device run)",
                              self)
        self.summary.setTextFormat(Qt.PlainText)  # (an op name from the file: never markup)
        self.summary.setWordWrap(True)
        self.map = pg.PlotWidget(self)
        self.map.setBackground(theme.current().plot_bg)
        self.map.invertY(True)
        self.map.setMinimumHeight(80)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.map.addItem(self.image)
        # NOTE: no rotated axis titles: in a map 80 px tall "log10(1 + ulp)" was cut to
        # "log10(1 + u"; the scale is labelled in ulp (0, 1, 10, …) and the caption says so
        from tapescope.views.models.ulp_scale import HEAT_TICKS, heat_lut

        # the window's one ulp scale (views.models.ulp_scale): the graph stripe's and heatmap's
        # colours
        self.colorbar = pg.ColorBarItem(
            values=(0, 255), colorMap=pg.ColorMap(np.linspace(0.0, 1.0, 256), heat_lut()),
            interactive=False, width=14)
        self.colorbar.setImageItem(self.image, insert_in=self.map.getPlotItem())
        self.colorbar.axis.setTicks([HEAT_TICKS])
        self.caption = QLabel("ulp per element (rows × columns), in the graph stripe's colours: "
                              "green exact, amber 1 ulp → red 2^20, violet NaN ≠", self)
        self.caption.setStyleSheet(f"color: {theme.current().plot_fg}")  # grey words, either theme
        self.caption.setWordWrap(True)  # (a long caption must not widen the dock)
        self.caption.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.model = WorstElementsModel(self)
        self.table = QTableView(self)
        self.table.setModel(self.model)
        self.table.verticalHeader().hide()
        # the user can widen (or narrow) any column; set_pair sizes them to their contents
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.Interactive)
        self.table.setAlternatingRowColors(True)
        self.table.setMinimumHeight(60)
        for c in FOLDED.values():
            self.table.setColumnHidden(c, True)
        self.table.horizontalHeader().setDefaultAlignment(Qt.AlignCenter)
        self.table.horizontalHeader().setStretchLastSection(True)
        # two lines of the monospace font (the number, its bits below): sized by the default
        # font's height, a taller monospace font lost its second line (the hex bits) and the
        # number was elided (issue 46)
        mono = mono_font().resolve(self.table.font())  # as the delegate draws it
        line = max(QFontMetrics(mono).lineSpacing(), self.table.fontMetrics().lineSpacing())
        self.table.verticalHeader().setDefaultSectionSize(2 * line + 8)
        self.repro = QPushButton("Copy repro…", self)
        self.repro.setToolTip("Write a small Python script and .npy inputs that re-run this "
                              "node's reference op on the candidate's inputs (to file a bug "
                              "against a kernel)")
        self.repro.clicked.connect(self.repro_requested)
        self.repro.setEnabled(False)
        split = self.split = QSplitter(Qt.Vertical, self)
        top_map = QWidget(self)
        ml = QVBoxLayout(top_map)
        ml.setContentsMargins(0, 0, 0, 0)
        ml.setSpacing(0)
        ml.addWidget(self.caption)
        ml.addWidget(self.map, 1)
        split.addWidget(top_map)
        split.addWidget(self.table)
        split.setStretchFactor(0, 2)  # the worst elements a little more than the map
        split.setStretchFactor(1, 3)
        top = QHBoxLayout()
        top.addWidget(self.summary, 1)
        top.addWidget(self.repro)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(top)
        lay.addWidget(split, 1)
        self.img: np.ndarray | None = None
        self._sized = False
        self.fit_width()

    def fit_width(self) -> None:
        """The table's minimum width: the whole row of the widest pair (TEMPLATE_ROWS) on
        screen, with no scroll bar (issue 25: a scroll bar hid the ulp).

        NOTE: the same for every node: sized to each node's rows, the minimum (and the dock)
        changed on every selection, and summing the columns' widths, the last one stretched
        to the table, grew it by ~42 px a click (issue 46: "docks jump 100 px on a click")."""
        t, m = self.table, self.model
        t.ensurePolished()  # the application's style sheet: its fonts and padding
        rows, dtype = m.rows, m.dtype
        m.set_rows(TEMPLATE_ROWS, np.float64)
        head = t.horizontalHeader()
        shown = sum(max(t.sizeHintForColumn(k), head.sectionSizeHint(k))
                    for k in range(m.columnCount()) if not t.isColumnHidden(k))
        m.set_rows(rows, dtype)
        t.setMinimumWidth(shown + t.verticalScrollBar().sizeHint().width() + 2 * t.frameWidth()
                          + 4)

    def resizeEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(ev)
        h = self.split.height()
        if not self._sized and h > 150:  # the first real size: the map gets 35 %, the table
            self._sized = True  # the rest (a table's size hint would take nearly all of it)
            self.split.setSizes([int(h * 0.35), h - int(h * 0.35)])

    def set_pair(self, ref: np.ndarray | None, cand: np.ndarray | None, what: str = "") -> None:
        """Show where ``cand`` differs from ``ref`` (None: nothing to compare)."""
        ok = (ref is not None and cand is not None and np.shape(ref) == np.shape(cand)
              and _is_float(np.asarray(ref)) and _is_float(np.asarray(cand)))
        self.repro.setEnabled(ok)
        if not ok:
            self.img = None
            self.image.clear()
            self.model.set_rows([], np.float64)
            self.summary.setText(f"{what}: nothing to compare" if what else "nothing to compare")
            return
        r, c = np.asarray(ref), np.asarray(cand)
        dt = min(r.dtype, c.dtype, key=lambda d: d.itemsize)
        rows = worst_elements(r, c)
        self.model.set_rows(rows, dt)
        t = self.table
        t.resizeColumnsToContents()  # every number whole (a rank-5 index: the table scrolls)
        t.resizeRowsToContents()  # two whole lines whatever the font and DPI (the bits)
        floor = t.verticalHeader().defaultSectionSize()  # and a little air between rows
        for row in range(self.model.rowCount()):
            if t.rowHeight(row) < floor:
                t.setRowHeight(row, floor)
        self.img = ulp_level_image(r, c)
        self.image.setImage(self.img, autoLevels=False, levels=(0.0, 255.0))
        self.colorbar.setLevels((0.0, 255.0))
        self.map.getPlotItem().getViewBox().autoRange(padding=0.02)
        n = n_differ(r, c)
        more = f" (worst {MAX_ROWS} listed)" if n > MAX_ROWS else ""
        self.summary.setText(f"{what} · {n} of {r.size} elements differ{more}" if n else
                             f"{what} · all {r.size} elements bit-identical")
        self.summary.setStyleSheet("" if not n else f"color: {QColor('#991b1b').name()}")
