"""The Inspector dock: one node's op, inputs, stats, value/gradient drawings, histograms."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QSize, Qt, Signal, Slot
from PySide6.QtGui import QColor, QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views.array_view import ArrayView, HistogramView
from tapescope.views.element_view import ElementView, ulp_map
from tapescope.views.models.array_stats import array_stats, format_number, numpy_text
from tapescope.views.models.graph_model import shape_text
from tapescope.views.models.node_details import NodeDetails  # noqa: F401  (plain data; app builds it Qt-free)
from tapescope.views.models.numbers import count_text, ulp_text
from tapescope.views.models.plain import MAX_TIP, html, tip

STAT_KEYS = ("min", "max", "mean", "std", "nan", "inf")
EMPTY_TEXT = ("<b>Inspector</b> — select a node in the graph or the parity table (or find one: "
              "Ctrl+F): its op, inputs, value and gradient statistics, drawings and histograms, "
              "and in a live session both sides and the elements that differ, show here.")
NONFINITE_COLOR = "#7c3aed"  # violet: a NaN/inf (red means "bits differ" everywhere)
MAX_COPY = 1 << 20  # elements: beyond this the text would be tens of megabytes
MAX_ATTRS = 32  # attributes listed in the header (the rest counted); each cut (views.models.plain)
MAX_LINKS = 64  # inputs listed as links (the rest counted)


def _attr_text(v, limit: int = 64) -> str:
    # NOTE: an attribute from a file may hold millions of values or a 2 MB string: only the
    # first ``limit`` values are formatted, and no text longer than a tooltip is kept (the
    # header cuts further, to views.models.plain.MAX_SHOWN)
    if isinstance(v, (list, tuple)):
        more = f", … ({len(v):,} values)" if len(v) > limit else ""
        return ", ".join(_attr_text(x) for x in v[:limit]) + more
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)[:MAX_TIP]


def _items(d: dict, limit: int) -> tuple[list, str]:
    items = list(d.items())
    more = f" · … {len(items) - limit:,} more" if len(items) > limit else ""
    return items[:limit], more


def onnx_html(info: dict | None) -> str:
    """The imported-from ONNX node as rich text: op type and name, then its attributes as
    written in the file, as Netron lists them (``kernel_shape 7, 7 · strides 2, 2 · pads 3, 3,
    3, 3 · group 1``). Names and values from the file are cut and escaped (views.models.plain)."""
    if not info:
        return ""
    span = ""
    if info.get("stop", 0) - info.get("first", 0) > 1:
        span = f" (tape nodes #{info['first']}–#{info['stop'] - 1})"
    items, more = _items(info.get("attributes") or {}, MAX_ATTRS)
    attrs = " · ".join(f"<span style='color:#6b7280'>{html(k)}</span> "
                       f"<code>{html(_attr_text(v))}</code>" for k, v in items) + more
    return (f"<br>ONNX <b>{html(info.get('op_type', ''))}</b> "
            f"<code>{html(info.get('name', ''))}</code>{span}"
            + (f": {attrs}" if attrs else ""))


def full_text(d: NodeDetails) -> str:
    """The header's tooltip: the node's name and attributes in full (up to views.models.plain's
    MAX_TIP), where the header shows them cut."""
    lines = [f"#{d.id} {d.op} {d.name or '(unnamed)'}"]
    for k, v in list((d.attrs or {}).items())[:MAX_ATTRS]:
        lines.append(f"{k} = {_attr_text(v)}")
    if d.onnx:
        lines.append(f"ONNX {d.onnx.get('op_type', '')} {d.onnx.get('name', '')}")
        for k, v in list((d.onnx.get("attributes") or {}).items())[:MAX_ATTRS]:
            lines.append(f"{k} = {_attr_text(v)}")
    return "\n".join(lines)


class StatsTable(QTableWidget):
    """One column per array (value, gradient; both sides in a live session), one row per
    statistic: min, max, mean, std, and NaN / inf counts."""

    ROWS = ("min", "max", "mean", "std", "NaN / inf")

    def __init__(self, parent=None):
        super().__init__(len(self.ROWS), 0, parent)
        self.setVerticalHeaderLabels(list(self.ROWS))
        # NOTE: arrays as columns, statistics as rows: six statistics across a ~460 px dock
        # put NaN and inf behind a horizontal scroll bar even at 1920x1080 (issue 25); four
        # arrays across fit. Sized to their contents, never elided: "-7.2526…" for
        # -7.25265e-05 reads as another number; a narrower dock scrolls instead
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.horizontalHeader().setStretchLastSection(True)
        self.setTextElideMode(Qt.ElideNone)
        self.verticalHeader().setDefaultSectionSize(20)
        self.setEditTriggers(QTableWidget.NoEditTriggers)
        self.stats: dict[str, dict] = {}

    def set_rows(self, rows: dict[str, np.ndarray | None]) -> None:
        """One column per named array (None arrays are skipped)."""
        self.stats = {k: array_stats(a) for k, a in rows.items() if a is not None}
        self.setColumnCount(len(self.stats))
        self.setHorizontalHeaderLabels(list(self.stats))
        for c, st in enumerate(self.stats.values()):
            for r, key in enumerate(STAT_KEYS[:4]):
                it = QTableWidgetItem(format_number(st[key]))
                it.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                self.setItem(r, c, it)
            it = QTableWidgetItem(f"{st['nan']:,} / {st['inf']:,}")
            it.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
            if st["nan"] or st["inf"]:
                it.setForeground(QColor(NONFINITE_COLOR))
            self.setItem(4, c, it)
        self._fit_height()

    def _fit_height(self) -> None:
        # every row on screen, plus the horizontal scroll bar only while the numbers need it
        h = (24 + 21 * len(self.ROWS)) if self.stats else 24
        sb = self.horizontalScrollBar()
        if sb.maximum() > 0:
            h += sb.sizeHint().height()
        if h != self.height():
            self.setFixedHeight(h)

    def resizeEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(ev)
        self._fit_height()


def _comparable(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # NOTE: two dtypes (a float64 reference beside a float32 device) are compared in the
    # narrower one, rounded to nearest: the same rule as the parity summaries (app.runs)
    if a.dtype == b.dtype:
        return a, b
    dt = min(a.dtype, b.dtype, key=lambda d: d.itemsize)
    return a.astype(dt), b.astype(dt)


class DeviceCompareView(QWidget):
    """Reference and device side by side (value or gradient), and the ulp map between them."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.cpu_view = ArrayView("cpu", self)
        self.dev_view = ArrayView("device", self)
        self.ulp_view = ArrayView("ulp", self)
        self.ulp_view.use_ulp_scale()  # the graph stripe's colours, the Elements map's
        self.ulp: np.ndarray | None = None
        self.pairs: dict[str, tuple] = {"value": (None, None), "grad": (None, None)}
        self.which_box = QComboBox(self)
        self.which_box.addItem("value", "value")
        self.which_box.addItem("gradient", "grad")
        self.which_box.currentIndexChanged.connect(self._show)
        self.summary = QLabel("", self)
        self.summary.setWordWrap(True)
        self.ref_title, self.dev_title = QLabel("CPU", self), QLabel("device", self)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        top.addWidget(self.which_box)
        self.slice_label = QLabel("", self)
        top.addWidget(self.slice_label)
        self.slice_lay = QHBoxLayout()
        self.spins: list[QSpinBox] = []
        top.addLayout(self.slice_lay)
        top.addWidget(self.summary, 1)
        lay.addLayout(top)
        sides = QWidget(self)
        row = QHBoxLayout(sides)
        row.setContentsMargins(0, 0, 0, 0)
        for title, v in ((self.ref_title, self.cpu_view), (self.dev_title, self.dev_view)):
            col = QVBoxLayout()
            col.addWidget(title)
            col.addWidget(v, 1)
            row.addLayout(col, 1)
        # NOTE: a splitter: the maps were ~45 px tall in a live dock; drag it, or double-click
        # a map to open it large (views.array_window)
        self.split = QSplitter(Qt.Vertical, self)
        self.split.addWidget(sides)
        self.split.addWidget(self.ulp_view)
        self.split.setChildrenCollapsible(False)
        lay.addWidget(self.split, 1)

    def set_titles(self, reference: str = "CPU", candidate: str = "device",
                   tips: tuple[str, str] = ("", "")) -> None:
        """Name the two sides; ``tips``: their full run labels, on hover."""
        for label, text, hover in ((self.ref_title, reference, tips[0]),
                                   (self.dev_title, candidate, tips[1])):
            label.setText(f"<b>{html(text)}</b>")
            label.setToolTip(tip(hover))
        self.cpu_view.title, self.dev_view.title = reference, candidate  # (their large views)

    def set_arrays(self, cpu: np.ndarray | None, dev: np.ndarray | None) -> None:
        """Show one value pair (either may be None)."""
        self.set_pairs((cpu, dev), (None, None))

    def set_pairs(self, value: tuple, grad: tuple) -> None:
        """(reference, device) of the value and of the gradient; the box picks which shows."""
        self.pairs = {"value": value, "grad": grad}
        self._show()

    def which(self) -> str:
        """``value`` or ``grad``: the pair on screen."""
        return self.which_box.currentData()

    def show_which(self, which: str) -> None:
        """Show the value or the gradient pair."""
        self.which_box.setCurrentIndex(max(0, self.which_box.findData(which)))

    @Slot()
    def _show(self) -> None:
        cpu, dev = self.pairs[self.which()]
        self.cpu_view.set_array(cpu)
        self.dev_view.set_array(dev)
        ok = cpu is not None and dev is not None and np.shape(cpu) == np.shape(dev)
        self.ulp = ulp_map(*_comparable(np.asarray(cpu), np.asarray(dev))) if ok else None
        self.ulp_view.set_array(self.ulp)
        self.summary.setText(_summary(self.ulp))
        self._make_spins(np.shape(cpu) if ok else ())

    def _make_spins(self, shape: tuple) -> None:
        # one set of slice boxes drives all three drawings: the same slice, side by side
        if shape and len(self.spins) == len(shape) - 2 and all(
                sp.maximum() == n - 1 for sp, n in zip(self.spins, shape, strict=False)):
            for d, sp in enumerate(self.spins):  # same shape (value ↔ gradient): same slice
                self._slice_moved(d, sp.value())
            for v in (self.cpu_view, self.dev_view, self.ulp_view):
                v.slice_row.hide()
            return
        for sp in self.spins:
            self.slice_lay.removeWidget(sp)
            sp.deleteLater()
        self.spins = []
        for d in range(max(0, len(shape) - 2)):
            sp = QSpinBox(self)
            sp.setRange(0, shape[d] - 1)
            sp.setPrefix(f"dim{d}=")
            sp.valueChanged.connect(lambda v, d=d: self._slice_moved(d, v))
            self.slice_lay.addWidget(sp)
            self.spins.append(sp)
        for v in (self.cpu_view, self.dev_view, self.ulp_view):
            if self.spins:
                v.slice_row.hide()
        self.slice_label.setVisible(bool(self.spins))
        if self.spins:
            self.slice_label.setText(f"slice of {len(shape)}-D:")

    def _slice_moved(self, d: int, value: int) -> None:
        for v in (self.cpu_view, self.dev_view, self.ulp_view):
            if d < len(v.spins):
                v.spins[d].setValue(value)


def _summary(ulp: np.ndarray | None) -> str:
    if ulp is None:
        return "bit difference: nothing to compare"
    nan = int(np.isnan(ulp).sum())
    n = int(np.count_nonzero(ulp))  # NaN counts as nonzero: a NaN mismatch differs too
    if n == 0:
        return (f"bit difference (ulp per element): all {count_text(ulp.size)} elements "
                "bit-identical")
    worst = np.nanmax(ulp) if nan < ulp.size else float("nan")
    tail = f", {count_text(nan)} NaN mismatches" if nan else ""
    return (f"bit difference (ulp per element): {count_text(n)} of {count_text(ulp.size)} "
            f"differ · max {ulp_text(worst)} ulp{tail}")


TAB_FRAME = 4  # px a QTabWidget adds around its page (2 a side, Fusion and the style sheet)


class InspectorPanel(QWidget):
    """Shows a NodeDetails; clicking an input emits ``node_selected``."""

    node_selected = Signal(int)
    jump_first_nan = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.details: NodeDetails | None = None
        self.header = QLabel(EMPTY_TEXT, self)
        self.header.setTextFormat(Qt.RichText)
        self.header.setWordWrap(True)
        self.inputs = QLabel("", self)
        self.inputs.setTextFormat(Qt.RichText)
        self.inputs.setWordWrap(True)
        self.inputs.linkActivated.connect(self._input_clicked)
        # NOTE: a name cut to 120 characters is still ~900 px without a space to wrap at: the
        # two labels take the dock's width and clip (the tooltip has it all), never widen it
        for label in (self.header, self.inputs):
            label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.stats = StatsTable(self)
        self.value_view = ArrayView("value", self)
        self.grad_view = ArrayView("gradient", self)
        self.hist = HistogramView(self)
        self.tabs = QTabWidget(self)
        # NOTE: short titles, never elided: five tabs in a 600 px dock came out "Ele" (issue 25)
        self.tabs.setElideMode(Qt.ElideNone)
        self.tabs.tabBar().setExpanding(False)
        self.tabs.addTab(self.value_view, "Value")
        self.tabs.addTab(self.grad_view, "Gradient")
        self.tabs.addTab(self.hist, "Histogram")
        self.device_view = DeviceCompareView(self)  # a tab only while a device run exists
        self.device_view.hide()
        self.element_view = ElementView(self)  # the same: worst elements, ulp map, repro
        self.element_view.hide()
        self.repro_requested = self.element_view.repro_requested
        self.device_view.which_box.currentIndexChanged.connect(self._show_elements)
        self.prefer_compare = True  # the compare tab comes back to the front until left
        self.tabs.currentChanged.connect(self._tab_changed)
        self.note = QLabel("", self)
        self.note.setTextFormat(Qt.PlainText)  # (run labels, causes: words from outside)
        self.note.setWordWrap(True)
        self.note.hide()
        # what the note offers to do about it (time travel: "Re-run to step 7 …"); hidden
        # unless a caller sets one (set_action)
        self.action_button = QPushButton("", self)
        self.action_button.hide()
        self._action = None
        self.action_button.clicked.connect(self._run_action)
        self.copy_value = QPushButton("Copy value as numpy", self)
        self.copy_grad = QPushButton("Copy gradient as numpy", self)
        self.nan_button = QPushButton("Jump to first NaN", self)
        self.copy_value.clicked.connect(lambda: self.copy_as_numpy("value"))
        self.copy_grad.clicked.connect(lambda: self.copy_as_numpy("grad"))
        self.nan_button.clicked.connect(self.jump_first_nan)
        buttons = QHBoxLayout()
        for b in (self.copy_value, self.copy_grad):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.nan_button)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.addWidget(self.header)
        lay.addWidget(self.inputs)
        lay.addWidget(self.note)
        act = QHBoxLayout()
        act.addWidget(self.action_button)
        act.addStretch(1)
        lay.addLayout(act)
        lay.addWidget(self.stats)
        lay.addWidget(self.tabs, 1)
        self.filler = QWidget(self)  # takes the tabs' room while they are hidden
        lay.addWidget(self.filler, 1)
        lay.addLayout(buttons)
        self._set_enabled(False)
        self._show_arrays(False)  # nothing selected yet: the header says what will be here

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        # NOTE: the Compare and Elements tabs come and go with the selection (a node with
        # device arrays, one without, a fetch under way): the room they need is kept while
        # they are away, so selecting a node never widens the dock (issue 46)
        hint = super().minimumSizeHint()
        if self.tabs.indexOf(self.element_view) < 0:
            m = self.layout().contentsMargins()
            need = (max(self.element_view.minimumSizeHint().width(),
                        self.device_view.minimumSizeHint().width())
                    + TAB_FRAME + m.left() + m.right())
            hint.setWidth(max(hint.width(), need))
        return hint

    def set_note(self, text: str) -> None:
        """A line under the header (e.g. "fetching device values…"); empty hides it."""
        self.note.setText(text)
        self.note.setVisible(bool(text))

    def set_action(self, text: str = "", tip: str = "", fn=None) -> None:
        """A button under the note that runs ``fn`` (None: shown disabled, ``tip`` says why);
        an empty ``text`` hides it."""
        self._action = fn
        self.action_button.setText(text)
        self.action_button.setToolTip(tip)
        self.action_button.setEnabled(fn is not None)
        self.action_button.setVisible(bool(text))

    @Slot()
    def _run_action(self) -> None:
        if self._action is not None:
            self._action()

    @Slot(int)
    def _tab_changed(self, _index: int) -> None:
        if self.tabs.indexOf(self.device_view) >= 0:
            self.prefer_compare = self.tabs.currentWidget() is self.device_view

    def _show_arrays(self, on: bool) -> None:
        self.stats.setVisible(on)
        self.tabs.setVisible(on)
        self.filler.setVisible(not on)

    def _set_enabled(self, on: bool) -> None:
        self.copy_value.setEnabled(on and self.details is not None
                                   and self.details.value is not None)
        self.copy_grad.setEnabled(on and self.details is not None and self.details.grad is not None)

    def show_details(self, d: NodeDetails | None) -> None:
        """Show one node (None clears the panel)."""
        self.details = d
        self.set_note(d.note if d is not None else "")
        self.set_action()  # an offer belongs to the details it was made for
        if d is None:  # what will be here and how to get it, not an empty table and axes
            self._show_arrays(False)
            self._drop_compare_tab()
            self.header.setText(EMPTY_TEXT)
            self.header.setToolTip("")
            self.inputs.setText("")
            self.stats.set_rows({})
            self.value_view.set_array(None)
            self.grad_view.set_array(None)
            self.hist.set_arrays(None, None)
            self._set_enabled(False)
            return
        # NOTE: rich text (bold, links), so every name and value from the file goes in cut
        # and escaped (views.models.plain.html): a name is data, never markup (issue 49)
        name = html(d.name) if d.name else "(unnamed)"
        attrs = ""
        if d.attrs:
            items, more = _items(d.attrs, MAX_ATTRS)
            attrs = " · " + ", ".join(f"{html(k)}={html(_attr_text(v))}" for k, v in items) + more
        self.header.setText(
            f"<b style='font-size:13pt'>#{d.id} {html(d.op)}</b> &nbsp; <code>{name}</code><br>"
            f"shape {shape_text(d.shape)} · {html(d.dtype)}{attrs}{onnx_html(d.onnx)}")
        self.header.setToolTip(tip(full_text(d)))  # the name and attributes in full
        if d.inputs:
            items, more = _items(dict(enumerate(d.inputs)), MAX_LINKS)
            links = ", ".join(f"<a href='node:{int(i)}'>#{int(i)} {html(text)}</a>"
                              for _, (i, text) in items) + more
            self.inputs.setText(f"inputs: {links}")
        else:
            self.inputs.setText("inputs: none (leaf)")
        has_dev = d.device_value is not None or d.device_grad is not None
        # a step's summary alone (time travel, its tensors gone): no empty table and plots
        arrays = has_dev or d.value is not None or d.grad is not None
        self._show_arrays(arrays)
        if d.sides is not None:  # a live session: reference and candidate, named
            rows = {"ref value": d.value, "ref grad": d.grad,
                    "cand value": d.device_value, "cand grad": d.device_grad}
        else:
            rows = {"value": d.value, "gradient": d.grad}
            if has_dev:
                rows.update({"device value": d.device_value, "device grad": d.device_grad})
        self.stats.set_rows(rows)
        self.value_view.set_array(d.value)
        self.grad_view.set_array(d.grad)
        self.hist.set_arrays(d.value, d.grad)
        if has_dev:
            if d.sides is not None:  # the run labels are in the note line and on hover
                at = f" · step {d.step:,}" if d.step is not None else ""  # (issue 46)
                self.device_view.set_titles(f"reference{at}", f"candidate{at}", d.sides)
            else:
                self.device_view.set_titles()
            self.device_view.set_pairs((d.value, d.device_value), (d.grad, d.device_grad))
            if self.tabs.indexOf(self.device_view) < 0:
                self.tabs.blockSignals(True)  # adding is not the user leaving the tab
                self.tabs.addTab(self.device_view, "Compare")
                self.tabs.setTabToolTip(self.tabs.indexOf(self.device_view),
                                        "reference vs candidate, side by side, and the ulp "
                                        "map between them" if d.sides else "CPU vs device")
                self.tabs.addTab(self.element_view, "Elements")
                self.tabs.blockSignals(False)
            self._show_elements()
            if self.prefer_compare:
                self.tabs.setCurrentWidget(self.device_view)
        else:
            self._drop_compare_tab()
        self._set_enabled(True)

    def _drop_compare_tab(self) -> None:
        i = self.tabs.indexOf(self.device_view)
        if i >= 0:
            self.tabs.blockSignals(True)  # removing is not the user leaving the tab
            self.tabs.removeTab(i)
            self.tabs.removeTab(self.tabs.indexOf(self.element_view))
            self.tabs.blockSignals(False)
            self.device_view.hide()
            self.element_view.hide()

    @Slot()
    def _show_elements(self) -> None:
        """The element view follows the compare tab's value/gradient choice."""
        d = self.details
        if d is None:
            return
        which = self.device_view.which()
        ref, cand = (d.value, d.device_value) if which == "value" else (d.grad, d.device_grad)
        at = f" at step {d.step}" if d.step is not None else ""
        side = "value" if which == "value" else "gradient"
        self.element_view.set_pair(ref, cand, f"#{d.id} {d.op} {side}{at}")

    def show_elements(self) -> None:
        """Bring the Elements tab to the front (when a comparison is shown)."""
        if self.tabs.indexOf(self.element_view) >= 0:
            self.tabs.setCurrentWidget(self.element_view)

    @Slot(str)
    def _input_clicked(self, link: str) -> None:
        if link.startswith("node:"):
            self.node_selected.emit(int(link[5:]))

    def copy_as_numpy(self, which: str) -> str:
        """Put the value (or gradient) on the clipboard as exact numpy source; returns it."""
        if self.details is None:
            return ""
        a = self.details.value if which == "value" else self.details.grad
        if a is None:
            return ""
        if a.size > MAX_COPY:
            self.header.setToolTip(f"not copied: {a.size} elements (the limit is {MAX_COPY}); "
                                   "save the tape and load it with core.tapefile instead")
            return ""
        text = numpy_text(a)
        QGuiApplication.clipboard().setText(text)
        return text
