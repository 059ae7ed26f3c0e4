"""The Training dock: loss of both runs, max ulp per step, a nodes × steps parity heatmap.

Fed plain numbers (``add_steps``); the history is bounded (``MAX_POINTS`` loss points, the last
``HEAT_STEPS`` heatmap columns), so a session of any length keeps a flat memory footprint.
"""

from __future__ import annotations

import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

MAX_POINTS = 20_000
HEAT_STEPS = 300
REDRAW_S = 0.5
REF_PEN = pg.mkPen("#2563eb", width=2)
CAND_PEN = pg.mkPen("#ea580c", width=1.5, style=Qt.DashLine)
ULP_PEN = pg.mkPen("#b91c1c", width=1.5)


def heat_lut() -> np.ndarray:
    """Colour table for log2(ulp)+1 levels: 0 exact green, then amber → red; NaN purple last."""
    lut = np.zeros((256, 4), dtype=np.ubyte)
    lut[:, 3] = 255
    t = np.linspace(0.0, 1.0, 254)
    lut[0] = (22, 163, 74, 255)
    lut[1:255, 0] = (245 - 25 * t).astype(np.ubyte)
    lut[1:255, 1] = (158 * (1 - t)).astype(np.ubyte)
    lut[1:255, 2] = 11
    lut[255] = (124, 58, 237, 255)
    return lut


def heat_levels(col: np.ndarray) -> np.ndarray:
    """Per-node worst ulp (−1: NaN) → heatmap level 0..255 (log scale, 2**20 ulp saturates)."""
    c = np.asarray(col, dtype=np.float64)
    out = np.zeros(c.shape, dtype=np.float64)
    pos = c > 0
    # NOTE: log2 so 1 ulp and 1e6 ulp both stay visible; 1 + ... keeps "1 ulp" off the exact colour
    out[pos] = np.minimum(1 + np.log2(c[pos]) * (253 / 20.0), 254)
    out[c < 0] = 255
    return out


class TrainingPanel(QWidget):
    """Loss curves, parity timeline and heatmap; ``add_steps`` appends, ``reset`` clears."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.glw = pg.GraphicsLayoutWidget(self)
        self.glw.setBackground("w")
        self.loss_plot = self.glw.addPlot(row=0, col=0, title="loss")
        self.loss_plot.addLegend(offset=(-5, 5), labelTextSize="8pt")
        self.loss_plot.showGrid(x=True, y=True, alpha=0.2)
        self.ref_curve = self.loss_plot.plot(pen=REF_PEN, name="reference")
        self.cand_curve = self.loss_plot.plot(pen=CAND_PEN, name="candidate")
        self.ulp_plot = self.glw.addPlot(row=0, col=1, title="max ulp per step: log2(1 + ulp)")
        self.ulp_plot.showGrid(x=True, y=True, alpha=0.2)
        self.ulp_plot.setXLink(self.loss_plot)
        self.ulp_curve = self.ulp_plot.plot(pen=ULP_PEN, stepMode=None)
        self.heat_plot = self.glw.addPlot(row=1, col=0, colspan=2,
                                          title="parity per node × step")
        self.heat_plot.setLabel("left", "node")
        self.heat = pg.ImageItem(axisOrder="row-major")
        self.heat.setLookupTable(heat_lut())
        self.heat_plot.addItem(self.heat)
        self.heat_plot.invertY(True)
        self.rate = QLabel("—", self)
        self.rate.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.addWidget(self.rate)
        lay.addWidget(self.glw, 1)
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
        self.setToolTip(f"ref: {ref_label}\ncand: {cand_label}")
        for c in (self.ref_curve, self.cand_curve, self.ulp_curve):
            c.setData([], [])
        self.heat.clear()
        for plot in (self.loss_plot, self.ulp_plot, self.heat_plot):
            plot.setRange(xRange=(0, 10), yRange=(0, 1), padding=0.02)
            plot.enableAutoRange()
        self.heat_plot.hide()  # empty, its axes would auto-range to nonsense
        self.rate.setText("No live session yet: press Start on the Live toolbar (or gui --live)")

    def add_steps(self, steps: list[tuple], columns: list[np.ndarray], steps_per_s: float,
                  worst: list[float] | None = None) -> None:
        """Append steps ``(step, loss_ref, loss_cand, seconds, exact)`` and per-node ulp columns
        (of the last ``len(columns)`` steps; ``worst`` per step when columns are fewer)."""
        if not steps:
            return
        a = np.array([s[:3] for s in steps], dtype=np.float64)
        if worst is None:
            worst = [_worst(c) for c in columns]
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
        if self.columns:
            img = np.stack(self.columns, axis=1)
            self.heat.setImage(img, levels=(0, 255), autoLevels=False)
            x0 = self.col_steps[0]
            self.heat.setRect(x0 - 0.5, -0.5, img.shape[1], img.shape[0])
            self.heat_plot.show()
            self.heat_plot.enableAutoRange()
        last = self.max_ulp[-1] if self.max_ulp.size else 0
        last_txt = "NaN" if last < 0 else f"{last:g} ulp"
        self.rate.setText(f"{self.total_steps} steps · {self.steps_per_s:.1f} steps/s · "
                          f"{self.exact_steps} bit-exact · last step max {last_txt}")


def _worst(col: np.ndarray) -> float:
    c = np.asarray(col)
    if c.size and (c < 0).any():
        return -1.0
    return float(c.max()) if c.size else 0.0
