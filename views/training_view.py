"""The Training dock: loss of both runs, max ulp per step, a nodes × steps parity heatmap.

Fed plain numbers (``add_steps``); the history is bounded (``MAX_POINTS`` loss points, the last
``HEAT_STEPS`` heatmap columns), so a session of any length keeps a flat memory footprint.
The heatmap has a colour scale in ulp, can show only the error nodes *introduced*
(``set_heat``), and is clickable: ``cell_clicked(node, step)``. A vertical line marks the step
the window shows (``set_cursor``); the parameter list beside it says at which step each
parameter first differed (clicking one emits ``cell_clicked`` too).
"""

from __future__ import annotations

import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.core.summary import worst_of
from tapescope.views import theme
from tapescope.views.models.numbers import count_text, ulp_text
from tapescope.views.models.plain import cut, tip
from tapescope.views.models.scope_runs import scope_runs
from tapescope.views.models.ulp_scale import (  # noqa: F401  (heat_levels, heat_lut: re-exported)
    HEAT_TICKS,
    INHERITED,
    heat_levels,
    heat_lut,
    two_tone_lut,
)

MAX_POINTS = 20_000
HEAT_STEPS = 300
REDRAW_S = 0.5
REF_PEN = pg.mkPen("#2563eb", width=2)
CAND_PEN = pg.mkPen("#ea580c", width=1.5, style=Qt.DashLine)
ULP_PEN = pg.mkPen("#b91c1c", width=1.5)
CURSOR_PEN = pg.mkPen("#1d6fe0", width=1.5)
def heat_colormap() -> pg.ColorMap:
    """The heatmap's lookup table as a ColorMap over levels 0..255 (for its colour bar)."""
    lut = heat_lut()
    return pg.ColorMap(np.linspace(0.0, 1.0, 256), lut)


class TrainingPanel(QWidget):
    """Loss curves, parity timeline and heatmap; ``add_steps`` appends, ``reset`` clears."""

    cell_clicked = Signal(int, int)  # node id, step (from 1)
    introduced_only_changed = Signal(bool)
    start_requested = Signal()  # the empty panel's "Start a live session"

    def __init__(self, parent=None):
        super().__init__(parent)
        self.glw = pg.GraphicsLayoutWidget(self)
        self.glw.setBackground(theme.current().plot_bg)
        self.loss_plot = self.glw.addPlot(row=0, col=0, title="loss")
        self.loss_plot.addLegend(offset=(-5, 5), labelTextSize="8pt")
        self.loss_plot.showGrid(x=True, y=True, alpha=0.2)
        self.ref_curve = self.loss_plot.plot(pen=REF_PEN, name="reference")
        self.cand_curve = self.loss_plot.plot(pen=CAND_PEN, name="candidate")
        self.ulp_plot = self.glw.addPlot(row=0, col=1, title="max ulp per step (log scale)")
        self.ulp_plot.showGrid(x=True, y=True, alpha=0.2)
        # drawn as log2(1 + ulp), labelled in ulp: the heatmap's and the stripe's marks
        self.ulp_plot.getAxis("left").setTicks([[
            (float(np.log2(1.0 + u)), t) for u, t in (
                (0, "0"), (1, "1"), (32, "32"), (1024, "1024"), (2 ** 15, "2^15"),
                (2 ** 20, "2^20"), (2 ** 30, "2^30"), (2 ** 40, "2^40"), (2 ** 52, "2^52"),
                (2 ** 63, "2^63"))]])
        self.ulp_plot.setXLink(self.loss_plot)
        self.ulp_curve = self.ulp_plot.plot(pen=ULP_PEN, stepMode=None)
        # (short: the dock is ~370 px wide at 1280x800; the tooltip says the rest)
        self.heat_plot = self.glw.addPlot(row=1, col=0, colspan=2,
                                          title="worst ulp per step (faded: inherited)")
        self.heat_plot.setLabel("left", "node")
        self.heat_plot.setLabel("bottom", "step")
        self.heat = pg.ImageItem(axisOrder="row-major")
        # NOTE: two tones (views.models.ulp_scale.two_tone_lut): a cell whose node introduced its
        # error in full colour, an inherited one faded, as the graph's stripes; with error
        # flowing down the tape every cell was the same red and no node stood out (issue 25)
        bg = pg.mkColor(theme.current().plot_bg)
        self.heat.setLookupTable(two_tone_lut((bg.red(), bg.green(), bg.blue())))
        self.heat_plot.addItem(self.heat)
        self.heat_plot.invertY(True)
        self.colorbar = pg.ColorBarItem(values=(0, 255), colorMap=heat_colormap(),
                                        interactive=False, width=12)
        # the scale beside the plot, not bound to the image (binding sets the image's table
        # to the bar's 256 colours, which have no faded half)
        self.heat_plot.layout.addItem(self.colorbar, 2, 5)
        self.heat_plot.layout.setColumnFixedWidth(4, 5)
        self.colorbar.axis.setTicks([HEAT_TICKS])
        self.cursors = [pg.InfiniteLine(angle=90, pen=CURSOR_PEN, movable=False)
                        for _ in range(3)]
        for plot, line in zip((self.loss_plot, self.ulp_plot, self.heat_plot), self.cursors,
                              strict=True):
            line.hide()
            plot.addItem(line, ignoreBounds=True)
        self.heat_plot.scene().sigMouseClicked.connect(self._scene_clicked)
        self.heat_steps: list[int] = []
        self.heat_nodes = 0
        self.node_names: list[str | None] | None = None
        self._groups_cache = None
        self.heat_row_starts: np.ndarray | None = None
        self._heat_full = np.zeros((0, 0))
        self.cursor_step = -1
        self.rate = QLabel("—", self)
        self.rate.setTextInteractionFlags(Qt.TextSelectableByMouse)
        # a long line must not set the dock's minimum width (the window fits 1280 px), and must
        # never be clipped mid-number ("max 98713" for 987136): it wraps
        self.rate.setWordWrap(True)
        self.rate.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.rate.setMinimumWidth(120)
        self.introduced_only = QCheckBox("introduced only", self)
        self.introduced_only.setToolTip(
            "Heatmap: only the error each node introduced at each step (a node whose reference "
            "op on the candidate's inputs does not reproduce the candidate); inherited error "
            "is left out")
        self.introduced_only.toggled.connect(self.introduced_only_changed)
        # NOTE: a view over a model of the rows, not a QTableWidget of items: a 100k-node
        # tape has 21k parameters, and 43k items rebuilt whenever one first differed cost
        # ~1.5 s of the GUI thread per snapshot (issue 29, target 4)
        self.params = QTableView(self)
        self.params_model = ParamRows(self)
        self.params.setModel(self.params_model)
        self.params.horizontalHeader().setResizeContentsPrecision(100)
        self.params.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.params.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeToContents)
        self.params.verticalHeader().hide()
        self.params.setWordWrap(False)
        self.params.setTextElideMode(Qt.ElideMiddle)
        self.params.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.params.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.params.setToolTip("Per parameter: the first step at which its value or gradient "
                               "differs (click: that parameter at that step)")
        self.params.clicked.connect(self._param_index_clicked)
        top = QHBoxLayout()
        top.addWidget(self.rate, 1)
        top.addWidget(self.introduced_only)
        # the parameter list is a tab: beside the plots it squeezed them (and the parity table)
        self.tabs = QTabWidget(self)
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.glw, "plots")
        self.tabs.addTab(self.params, "parameters: first step ≠")
        # NOTE: before any step, what the panel will show and the one action that fills it, not
        # empty axes (issue 25: half the window was empty panels without a live session)
        self.empty = QWidget(self)
        el = QVBoxLayout(self.empty)
        self.empty_text = QLabel(
            "<b>Training</b> — a live session trains the workload on the CPU tape and on a "
            "device, step by step, and this panel shows both losses, the worst ulp of each "
            "step and a nodes × steps heatmap of where bits differ (click a cell: that node at "
            "that step).", self.empty)
        self.empty_text.setWordWrap(True)
        self.empty_text.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.start_button = QPushButton("Start a live session (Ctrl+R)", self.empty)
        self.start_button.clicked.connect(self.start_requested)
        el.addWidget(self.empty_text)
        el.addWidget(self.start_button, 0, Qt.AlignLeft)
        el.addStretch(1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.addLayout(top)
        lay.addWidget(self.tabs, 1)
        lay.addWidget(self.empty, 1)
        self._last_draw = 0.0
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._redraw)
        self.reset()

    def reset(self, ref_label: str = "reference", cand_label: str = "candidate") -> None:
        """Forget the history (a new session)."""
        self.steps = np.zeros(0, dtype=np.float64)
        self.loss_ref = np.zeros(0)
        self.loss_cand = np.zeros(0)
        self.max_ulp = np.zeros(0)
        self.columns: list[np.ndarray] = []
        self.col_steps: list[int] = []
        self.steps_per_s = 0.0
        self.exact_steps = 0
        self.total_steps = 0
        legend = self.loss_plot.legend
        legend.clear()
        legend.addItem(self.ref_curve, "ref")
        legend.addItem(self.cand_curve, "cand")
        self.labels = (ref_label, cand_label)
        self.setToolTip(tip(f"ref: {ref_label}\ncand: {cand_label}"))
        for c in (self.ref_curve, self.cand_curve, self.ulp_curve):
            c.setData([], [])
        self.heat.clear()
        self.heat_steps, self.heat_nodes, self.cursor_step = [], 0, -1
        self.override_heat = False
        self._heat_pending: tuple | None = None
        self.params_model.set_rows([])
        for line in self.cursors:
            line.hide()
        for plot in (self.loss_plot, self.ulp_plot, self.heat_plot):
            plot.setRange(xRange=(0, 10), yRange=(0, 1), padding=0.02)
            plot.enableAutoRange()
        self.heat_plot.hide()  # empty, its axes would auto-range to nonsense
        self.rate.setText("No live session yet: press Start on the Live toolbar (or gui --live)")
        self.tabs.hide()
        self.introduced_only.hide()
        self.empty.show()

    def add_steps(self, steps: list[tuple], columns: list[np.ndarray], steps_per_s: float,
                  worst: list[float] | None = None) -> None:
        """Append steps ``(step, loss_ref, loss_cand, seconds, exact)`` and per-node ulp columns
        (of the last ``len(columns)`` steps; ``worst`` per step when columns are fewer)."""
        if not steps:
            return
        if self.empty.isVisibleTo(self) or self.tabs.isHidden():
            self.empty.hide()
            self.tabs.show()
            self.introduced_only.show()
        a = np.array([s[:3] for s in steps], dtype=np.float64)
        if worst is None:
            worst = [worst_of(c) for c in columns]  # core.summary's one rule: NaN first
        worst = np.asarray(worst, dtype=np.float64)
        self.steps = np.concatenate((self.steps, a[:, 0]))
        self.loss_ref = np.concatenate((self.loss_ref, a[:, 1]))
        self.loss_cand = np.concatenate((self.loss_cand, a[:, 2]))
        self.max_ulp = np.concatenate((self.max_ulp, worst))
        if self.steps.size > MAX_POINTS:  # halve the resolution: memory stays bounded
            for name in ("steps", "loss_ref", "loss_cand", "max_ulp"):
                setattr(self, name, getattr(self, name)[::2].copy())
        if columns and self.columns and len(columns[0]) != len(self.columns[-1]):
            self.columns, self.col_steps = [], []  # another tape: its heatmap starts afresh
        self.columns += [heat_levels(c) for c in columns]
        self.col_steps += [int(s[0]) for s in steps[len(steps) - len(columns):]]
        del self.columns[:-HEAT_STEPS], self.col_steps[:-HEAT_STEPS]
        self.steps_per_s = steps_per_s
        self.total_steps += len(steps)
        self.exact_steps += sum(1 for s in steps if s[4])
        self._schedule()

    def _schedule(self) -> None:
        # NOTE: plots repaint at most every REDRAW_S: a pyqtgraph redraw (axes, texts) costs
        # 20-40 ms of the GUI thread, the snapshots may come at 10 Hz
        # always from the timer, at least 20 ms on: the table and graph repaint of the same
        # snapshot then goes out in an earlier frame, so no single frame carries both
        if not self._timer.isActive():
            wait = max(0.02, REDRAW_S - (time.monotonic() - self._last_draw))
            self._timer.start(int(wait * 1000))

    def flush(self) -> None:
        """Draw what is pending now (reports, tests)."""
        self._timer.stop()
        self._redraw()

    def _redraw(self) -> None:
        self._last_draw = time.monotonic()
        self.ref_curve.setData(self.steps, self.loss_ref)
        self.cand_curve.setData(self.steps, self.loss_cand)
        # log2(1 + ulp): exact steps sit at 0, NaN steps (−1) are drawn at the top of the scale
        u = np.where(self.max_ulp < 0, 64.0, np.log2(1.0 + np.maximum(self.max_ulp, 0)))
        self.ulp_curve.setData(self.steps, u)
        if self.columns and not self.override_heat:
            self._draw_heat(np.stack(self.columns, axis=1), self.col_steps)
        if self._heat_pending is not None:
            img, steps, inherited = self._heat_pending
            self._heat_pending = None
            self._draw_heat(img, steps, inherited)
        last = self.max_ulp[-1] if self.max_ulp.size else 0
        last_txt = "NaN" if last < 0 else f"{ulp_text(last)} ulp"
        self.rate.setText(f"{count_text(self.total_steps)} steps · {self.steps_per_s:.1f} "
                          f"steps/s · {count_text(self.exact_steps)} bit-exact · last step max "
                          f"{last_txt}")


    def csv_table(self) -> tuple[list[str], list[list[str]]] | None:
        """The plotted series, one row a training step (File ▸ Export ▸ … as CSV)."""
        if not self.steps.size:
            return None
        rows = [[f"{int(s)}", repr(float(a)), repr(float(b)), "NaN" if u < 0 else f"{u:g}"]
                for s, a, b, u in zip(self.steps.tolist(), self.loss_ref.tolist(),
                                      self.loss_cand.tolist(), self.max_ulp.tolist(),
                                      strict=True)]
        return ["training step", "reference loss", "candidate loss", "max ulp"], rows

    def set_node_names(self, names: list[str | None] | None) -> None:
        """Node names in tape order: a tall heatmap aggregates its rows by their scopes."""
        self.node_names = list(names) if names is not None else None
        self._groups_cache = None

    def heat_rows(self) -> int:
        """How many rows the heatmap can show: its plot's height in pixels (at least 64)."""
        h = self.heat_plot.getViewBox().height()
        return max(64, int(h) if h and h > 1 else 300)

    def _row_starts(self, n: int, budget: int) -> np.ndarray | None:
        """First node of each heatmap row when ``n`` nodes do not fit ``budget`` rows (runs of
        whole scopes: ``views.models.scope_runs``, shared with the minimap's bands)."""
        if n <= budget:
            return None
        key = (n, budget)
        if self._groups_cache is not None and self._groups_cache[0] == key:
            return self._groups_cache[1]
        starts = scope_runs(self.node_names, n, budget)
        self._groups_cache = (key, starts)
        return starts

    def _draw_heat(self, img: np.ndarray, steps: list[int], inherited=None) -> None:
        # NOTE: 10k nodes in a 200 px plot drew every 50th row; each row is now the worst
        # (max level: NaN is 255) of a scope or a run of nodes, so no error is dropped
        self._heat_full = img
        starts = self._row_starts(img.shape[0], self.heat_rows())
        self.heat_row_starts = starts
        if starts is not None:
            img = np.maximum.reduceat(img, starts, axis=0)
        if inherited is not None:  # a row is bright when any node of it introduced error
            intro = ~np.asarray(inherited, dtype=bool)
            if starts is not None:
                intro = np.maximum.reduceat(intro.astype(np.uint8), starts, axis=0) > 0
            img = np.where((img > 0) & ~intro, img.astype(np.uint16) + INHERITED, img)
        self.heat.setImage(img, levels=(0, 2 * INHERITED - 1), autoLevels=False)
        x0, x1 = steps[0], steps[-1]
        self.heat.setRect(x0 - 0.5, -0.5, x1 - x0 + 1, img.shape[0])
        self.heat_steps, self.heat_nodes = list(steps), img.shape[0]
        self.heat_plot.setLabel("left", "node" if starts is None else "scope")
        self.heat_plot.show()
        # the range now, not at the next paint: a click maps to the cell it lands on at once
        self.heat_plot.getViewBox().setRange(xRange=(x0 - 0.5, x1 + 0.5),
                                             yRange=(-0.5, img.shape[0] - 0.5), padding=0.02)

    def set_heat(self, levels: np.ndarray, steps: list[int], now: bool = False,
                 inherited: np.ndarray | None = None) -> None:
        """Show a nodes × steps array of heat levels (``heat_levels`` of each step's worst ulp)
        over ``steps`` (the step history's; replaces what ``add_steps`` collected); cells
        True in ``inherited`` (their error came from the inputs) are drawn faded. Drawn with
        the other plots (at most every REDRAW_S), or ``now``."""
        if not steps:
            return
        self.override_heat = True
        self._heat_pending = (np.asarray(levels), list(steps), inherited)
        if now:
            self.flush()
        else:
            self._schedule()

    def set_cursor(self, step: int) -> None:
        """Mark the step the window shows on every plot."""
        self.cursor_step = step
        for line in self.cursors:
            line.setValue(step)
            line.setVisible(step > 0)

    def set_params(self, first_steps: list[tuple[int, str, int | None]],
                   changed: list[int] | None = None) -> None:
        """(node id, name, first step differing or None) per parameter; ``changed``: the rows
        that differ from the last call's (the same parameters), when the caller knows."""
        self.params_model.set_rows(first_steps, changed)

    @Slot(QModelIndex)
    def _param_index_clicked(self, index: QModelIndex) -> None:
        self._param_clicked(index.row(), index.column())

    @Slot(int, int)
    def _param_clicked(self, row: int, _col: int) -> None:
        m = self.params_model
        step = int(m.index(row, 1).data(Qt.UserRole))
        nid = int(m.index(row, 0).data(Qt.UserRole))
        self.cell_clicked.emit(nid, step if step > 0 else self.cursor_step)

    def cell_at(self, scene_pos) -> tuple[int, int] | None:
        """(node, step) of the heatmap cell under a scene point, or None."""
        vb = self.heat_plot.getViewBox()
        if not self.heat_steps or not vb.sceneBoundingRect().contains(scene_pos):
            return None
        p = vb.mapSceneToView(scene_pos)
        node = int(np.floor(p.y() + 0.5))
        if not 0 <= node < self.heat_nodes:
            return None
        x = p.x()
        if x < self.heat_steps[0] - 0.5 or x > self.heat_steps[-1] + 0.5:
            return None
        step = min(self.heat_steps, key=lambda s: abs(s - x))
        return self.row_node(node, step), step

    def row_node(self, row: int, step: int) -> int:
        """The node a heatmap row stands for at ``step``: itself, or an aggregated row's worst
        node at that step."""
        starts = self.heat_row_starts
        if starts is None:
            return row
        lo = int(starts[row])
        hi = int(starts[row + 1]) if row + 1 < len(starts) else self._heat_full.shape[0]
        col = self._heat_full[lo:hi, self.heat_steps.index(step)]
        return lo + int(np.argmax(col))

    def _scene_clicked(self, ev) -> None:
        if ev.button() != Qt.LeftButton:
            return
        got = self.cell_at(ev.scenePos())
        if got is not None:
            self.cell_clicked.emit(*got)


class ParamRows(QAbstractTableModel):
    """The parameter list: "#id name" and the first step it differs ("—": not yet); the
    UserRole of a row is its node id (column 0) and that step (column 1, -1 for none)."""

    HEADERS = ("parameter", "first step it differs")

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[tuple[int, str, int | None]] = []

    def set_rows(self, rows: list[tuple[int, str, int | None]],
                 changed: list[int] | None = None) -> None:
        """New rows; the same parameters with new steps change only those cells (``changed``:
        which rows differ, when the caller knows: then the rows are not compared here)."""
        rows = list(rows)
        old = self.rows
        if changed is not None and len(old) == len(rows):
            self.rows = rows
        elif len(old) == len(rows) and all(a[0] == b[0] for a, b in zip(old, rows, strict=True)):
            self.rows = rows
            changed = [r for r, (a, b) in enumerate(zip(old, rows, strict=True)) if a != b]
        else:
            changed = None
        if changed is not None:
            if changed:
                self.dataChanged.emit(self.index(min(changed), 0),
                                      self.index(max(changed), 1))
            return
        self.beginResetModel()
        self.rows = rows
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802, B008 (Qt override)
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802, B008 (Qt override)
        return 0 if parent.isValid() else 2

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802
        if orientation == Qt.Horizontal and role == Qt.DisplayRole and 0 <= section < 2:
            return self.HEADERS[section]
        return None

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self.rows):
            return None
        nid, name, step = self.rows[index.row()]
        col = index.column()
        if role == Qt.DisplayRole:
            return f"#{nid} {cut(name)}" if col == 0 else "—" if step is None else count_text(step)
        if role == Qt.UserRole:
            return nid if col == 0 else -1 if step is None else step
        if role == Qt.TextAlignmentRole and col == 1:
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role == Qt.ToolTipRole and col == 0:
            return ("never differed so far" if step is None else
                    f"first differs at step {count_text(step)}")
        return None
