"""Draw one array the way people read it: a number, a line/bars, a heatmap, or 2-D slices."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, Slot
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSpinBox, QStackedWidget, QVBoxLayout, QWidget

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.core import precision
from tapescope.views import theme

pg.setConfigOptions(imageAxisOrder="row-major", antialias=False)

PAGE_EMPTY, PAGE_NUMBER, PAGE_PLOT, PAGE_IMAGE = range(4)


def _finite_levels(a: np.ndarray) -> tuple[float, float]:
    fin = a[np.isfinite(a)]
    if fin.size == 0:
        return (0.0, 1.0)
    lo, hi = float(fin.min()), float(fin.max())
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    if lo < 0 < hi:  # diverging data: keep zero in the middle of the colour map
        m = max(-lo, hi)
        lo, hi = -m, m
    return lo, hi


class ArrayView(QWidget):
    """Shows one ndarray; rank ≥ 3 gets spin boxes choosing the leading indices."""

    def __init__(self, title: str = "", parent=None):
        super().__init__(parent)
        self.title = title  # what a larger view (double-click) is called
        self.large = None  # the ArrayWindow a double-click opened last
        self.array: np.ndarray | None = None
        self.stack = QStackedWidget(self)
        self.empty = QLabel("—", self)
        self.empty.setAlignment(Qt.AlignCenter)
        self.number = QLabel(self)
        self.number.setAlignment(Qt.AlignCenter)
        self.number.setTextInteractionFlags(Qt.TextSelectableByMouse)
        f = QFont()
        f.setPointSize(18)
        self.number.setFont(f)
        self.plot = pg.PlotWidget(self)
        self.plot.setBackground(theme.current().plot_bg)
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.image_plot = pg.PlotWidget(self)
        self.image_plot.setBackground(theme.current().plot_bg)
        self.image_plot.invertY(True)
        self.image_plot.setAspectLocked(False)
        self.image = pg.ImageItem()
        self.image_plot.addItem(self.image)
        self.colorbar = pg.ColorBarItem(colorMap=pg.colormap.get("CET-D1"), interactive=False,
                                        width=12)
        self.colorbar.setImageItem(self.image, insert_in=self.image_plot.getPlotItem())
        self.ulp_scale = False  # use_ulp_scale: drawn in the window's one ulp colour scale
        for w in (self.plot, self.image_plot):  # a double-click opens the drawing large
            w.viewport().installEventFilter(self)  # (the scene's own click signal misses it
            # while the view box holds the mouse)
        self.setToolTip("Double-click to open this drawing in a window of its own")
        for w in (self.empty, self.number, self.plot, self.image_plot):
            self.stack.addWidget(w)
        self.slice_row = QWidget(self)
        self.slice_lay = QHBoxLayout(self.slice_row)
        self.slice_lay.setContentsMargins(0, 0, 0, 0)
        self.slice_label = QLabel("slice", self.slice_row)
        self.slice_lay.addWidget(self.slice_label)
        self.spins: list[QSpinBox] = []
        self.slice_lay.addStretch(1)
        self.slice_row.hide()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.slice_row)
        lay.addWidget(self.stack, 1)

    def use_ulp_scale(self) -> None:
        """Draw ulp counts (NaN: a NaN against a number) in the one ulp scale of the window
        (views.models.ulp_scale): exact green, amber → red, NaN violet, ticks in ulp."""
        from tapescope.views.models.ulp_scale import HEAT_TICKS, heat_lut

        self.ulp_scale = True
        self.colorbar.setColorMap(pg.ColorMap(np.linspace(0.0, 1.0, 256), heat_lut()))
        self.colorbar.axis.setTicks([HEAT_TICKS])

    def eventFilter(self, obj, ev) -> bool:  # noqa: N802 (Qt override)
        if ev.type() == QEvent.MouseButtonDblClick and ev.button() == Qt.LeftButton:
            self.open_large()
            return True
        return False

    def open_large(self):
        """Open this drawing in a window of its own (same array, scale and slice)."""
        if self.array is None:
            return None
        from tapescope.views.array_window import ArrayWindow

        self.large = ArrayWindow(self, self.window())
        self.large.show()
        return self.large

    def page(self) -> int:
        """Which drawing is shown: PAGE_EMPTY, PAGE_NUMBER, PAGE_PLOT or PAGE_IMAGE."""
        return self.stack.currentIndex()

    def set_array(self, a: np.ndarray | None) -> None:
        """Show ``a`` (None clears)."""
        self.array = None if a is None else np.asarray(a)
        self._make_spins()
        self._draw()

    def _make_spins(self) -> None:
        for s in self.spins:
            s.hide()
            self.slice_lay.removeWidget(s)
            s.deleteLater()
        self.spins = []
        a = self.array
        if a is None or a.ndim < 3:
            self.slice_row.hide()
            return
        for d in range(a.ndim - 2):
            s = QSpinBox(self.slice_row)
            s.setRange(0, a.shape[d] - 1)
            s.setPrefix(f"dim{d}=")
            s.valueChanged.connect(self._draw)
            self.slice_lay.insertWidget(1 + d, s)
            self.spins.append(s)
        self.slice_label.setText(f"slice of {a.ndim}-D:")
        self.slice_row.show()

    def current_slice(self) -> np.ndarray | None:
        """The 2-D (or lower) part on screen."""
        a = self.array
        if a is None:
            return None
        if a.ndim >= 3:
            return a[tuple(s.value() for s in self.spins)]
        return a

    @Slot()
    def _draw(self) -> None:
        a = self.current_slice()
        if a is None:
            self.stack.setCurrentIndex(PAGE_EMPTY)
            return
        a = precision.widen(a)  # float16 / bfloat16 drawn as their (exact) float32 values
        if a.dtype.kind not in "fiub":
            self.empty.setText(f"dtype {a.dtype} not drawn")
            self.stack.setCurrentIndex(PAGE_EMPTY)
            return
        af = a.astype(np.float64, copy=False)
        if af.ndim >= 2 and sum(d > 1 for d in af.shape) <= 1:
            af = af.reshape(-1)  # a (1, n) row reads better as a line than a one-row heatmap
        if af.size == 1:
            v = float(af.reshape(()))
            self.number.setText(repr(v) if a.dtype.kind == "f" else str(int(v)))
            self.stack.setCurrentIndex(PAGE_NUMBER)
        elif af.ndim == 1:
            self.plot.clear()
            xs = np.arange(af.size)
            ys = np.where(np.isfinite(af), af, np.nan)
            if af.size <= 64:  # few values read best as bars
                self.plot.addItem(pg.BarGraphItem(x=xs, height=np.nan_to_num(ys), width=0.8,
                                                  brush="#5b7db1"))
            else:
                self.plot.plot(xs, ys, pen=pg.mkPen("#1d4ed8", width=1.5), connect="finite")
            bad = np.flatnonzero(~np.isfinite(af))
            if bad.size:
                self.plot.plot(bad, np.zeros(bad.size), pen=None, symbol="x",
                               symbolBrush="#7c3aed", symbolPen="#7c3aed")  # NaN/inf: violet
            self.stack.setCurrentIndex(PAGE_PLOT)
        elif self.ulp_scale:
            from tapescope.views.models.ulp_scale import heat_levels

            self.image.setImage(heat_levels(af), autoLevels=False)
            self.colorbar.setLevels((0.0, 255.0))
            self.image_plot.getPlotItem().getViewBox().autoRange(padding=0.02)
            self.stack.setCurrentIndex(PAGE_IMAGE)
        else:
            lo, hi = _finite_levels(af)
            self.image.setImage(af, autoLevels=False)
            self.colorbar.setLevels((lo, hi))
            self.image_plot.getPlotItem().getViewBox().autoRange(padding=0.02)
            self.stack.setCurrentIndex(PAGE_IMAGE)


class HistogramView(pg.PlotWidget):
    """Histograms of the finite elements of the value and the gradient, overlaid."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setBackground(theme.current().plot_bg)
        self.addLegend(offset=(-10, 10))
        self.counts: dict[str, np.ndarray] = {}

    def set_arrays(self, value: np.ndarray | None, grad: np.ndarray | None) -> None:
        """Redraw both histograms (either may be None)."""
        self.clear()
        self.counts = {}
        for name, a, color in (("value", value, (29, 78, 216, 110)),
                               ("gradient", grad, (13, 148, 136, 110))):  # teal: red = bits differ
            if a is not None:
                a = precision.widen(np.asarray(a))
            if a is None or a.dtype.kind not in "fiu":
                continue
            fin = np.asarray(a, dtype=np.float64).ravel()
            fin = fin[np.isfinite(fin)]
            if fin.size == 0:
                continue
            bins = int(min(64, max(4, np.sqrt(fin.size))))
            if fin.min() == fin.max():
                edges = np.array([fin.min() - 0.5, fin.min() + 0.5])
                counts = np.array([fin.size])
            else:
                counts, edges = np.histogram(fin, bins=bins)
            self.counts[name] = counts
            self.plot(edges, counts, stepMode="center", fillLevel=0, brush=color,
                      pen=pg.mkPen(color[:3]), name=name)
