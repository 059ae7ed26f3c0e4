"""The Graph dock: the DAG view with a search bar (Ctrl+F) and an overview map in the corner."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QColor, QImage, QPainter, QPen
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from views.graph_canvas import FIRST_COLOR, KIND_STYLE, NAN_BORDER
from views.graph_model import GraphModel
from views.graph_view import GraphView, severity

DEBOUNCE_MS = 120  # a pause in typing this long runs the search
DEBOUNCE_FROM = 2000  # nodes: smaller tapes search on every keystroke


def _chip(fill: str, text: str, border: str = "") -> str:
    b = f";border:1px solid {border}" if border else ""
    return f"<span style='background:{fill}{b}'>&nbsp;{text}&nbsp;</span>"


# one meaning per colour (red: bits differ, nothing else)
LEGEND = " ".join([
    _chip("#e8eef7", "op", "#5b7db1"), _chip("#fde3b5", "param"), _chip("#ececec", "const"),
    _chip("#e0e7ff", "loss", "#3730a3"), _chip("#dcefdc", "group"),
    "&nbsp;stripe:", _chip("#16a34a", "<font color=white>exact</font>"),
    _chip("#f59e0b", "1 ulp"), _chip("#dc2626", "<font color=white>bits differ</font>"),
    _chip("#7c3aed", "<font color=white>NaN ≠</font>"),
    _chip("#ddd6fe", "⚠ NaN/inf alarm", "#7c3aed"),
    "<b style='color:#111827'>▭ first divergence</b>"])
LEGEND_TIP = (
    "Boxes: node kinds. The stripe at a box's left edge is its parity at the shown step: green "
    "bit-exact, amber (1 ulp) to red (2^20 ulp and more) where bits differ, violet a NaN "
    "against a number. A node that introduced error has its box outlined in that colour; a "
    "faded stripe means the error was only inherited from its inputs. Violet boxes with ⚠: a "
    "NaN/inf only one side holds, or one the node produced from finite inputs (an infinity "
    "both sides hold with the same bits, such as a causal mask, is data). Black outline: the "
    "first divergence; slate dots: breakpoints; blue: the selection.")



class Overview(QWidget):
    """A minimap: every node as a dot, the visible area as a frame; click or drag to go there."""

    def __init__(self, view: GraphView, parent=None):
        super().__init__(parent)
        self.view = view
        self.setFixedSize(110, 150)
        self._image: QImage | None = None
        self.bands = False  # drawn as a silhouette of bands (a deep tape), not as dots
        view.layout_ready.connect(self.rebuild)
        view.marks_changed.connect(self.rebuild)
        view.view_changed.connect(self.update)

    def _scale(self) -> tuple[float, float]:
        r = self.view.canvas.boundingRect()
        # NOTE: independent x/y scales: a deep tape is hundreds of times taller than wide
        return self.width() / max(r.width(), 1.0), self.height() / max(r.height(), 1.0)

    @Slot()
    def rebuild(self) -> None:
        """Re-render after a new layout (or new colours and marks)."""
        c = self.view.canvas
        if c.layout is None:
            return
        img = QImage(self.size(), QImage.Format_ARGB32_Premultiplied)
        img.fill(QColor(255, 255, 255, 225))
        p = QPainter(img)
        sx, sy = self._scale()
        r = c.boundingRect()
        xs = ((c.layout.x - r.left()) * sx).astype(int)
        ys = ((c.layout.y - r.top()) * sy).astype(int)
        self.bands = sy * 20 < 1.0  # ranks closer than 1/20 px: dots would be barcode stripes
        if self.bands:
            self._paint_bands(p, c, ys)
        else:
            kinds = c.graph.kinds.tolist()
            for k, (_, border) in KIND_STYLE.items():
                p.setPen(QColor(border))
                p.drawPoints([QPointF(x, y) for x, y, kk in zip(
                    xs.tolist(), ys.tolist(), kinds, strict=True) if kk == k])
        p.setPen(QPen(NAN_BORDER, 1))  # marks: one line each, whatever the scale
        for items, color in ((c.nan_items, NAN_BORDER), (c.first_items, FIRST_COLOR)):
            p.setPen(QPen(color, 1.5))
            for i in items:
                p.drawLine(0, int(ys[i]), self.width(), int(ys[i]))
        p.end()
        self._image = img
        self.update()

    def _paint_bands(self, p: QPainter, c, ys) -> None:
        """A deep tape as its silhouette: per pixel row, a bar as wide as the share of nodes in
        that band, coloured by the worst parity stripe in it (grey where nothing is compared),
        so where a 10,000-node tape differs shows at a glance."""
        h, w = self.height(), self.width()
        ys = np.clip(ys, 0, h - 1)
        counts = np.bincount(ys, minlength=h)
        worst: dict[int, QColor] = {}
        if c.overlay:  # the worst colour per pixel row: NaN violet, then least green
            its = np.fromiter(c.overlay.keys(), dtype=np.int64, count=len(c.overlay))
            cols = list(c.overlay.values())
            names = [q.name() for q in cols]
            pal = {nm: q for nm, q in zip(names, cols, strict=True)}
            order = sorted(pal, key=lambda nm: severity(pal[nm]))  # best first
            code = {nm: i for i, nm in enumerate(order)}
            sev = np.fromiter((code[nm] for nm in names), dtype=np.int64, count=len(names))
            top_sev = np.full(h, -1, dtype=np.int64)
            np.maximum.at(top_sev, ys[its], sev)
            for y in np.flatnonzero(top_sev >= 0).tolist():
                worst[y] = pal[order[top_sev[y]]]
        top = max(1, int(counts.max()))
        grey = QColor("#9aa3b2")
        for y in np.flatnonzero(counts).tolist():
            bw = max(2, int((w - 8) * counts[y] / top))
            p.fillRect(QRectF((w - bw) / 2, y, bw, 1), worst.get(y, grey))

    def paintEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(255, 255, 255, 200))
        if self._image is not None:
            p.drawImage(0, 0, self._image)
        r = self.view.canvas.boundingRect()
        if not r.isEmpty():
            v = self.view.visible_scene_rect()
            sx, sy = self._scale()
            frame = QRectF((v.left() - r.left()) * sx, (v.top() - r.top()) * sy,
                           v.width() * sx, v.height() * sy)
            p.setPen(QPen(QColor("#1d6fe0"), 1.5))
            p.setBrush(QColor(29, 111, 224, 40))
            p.drawRect(frame.adjusted(0, 0, -1, -1).intersected(QRectF(self.rect())).adjusted(
                0, 0, 0, max(0.0, 3 - frame.height())))
        p.setPen(QColor("#9aa3b2"))
        p.setBrush(Qt.NoBrush)
        p.drawRect(self.rect().adjusted(0, 0, -1, -1))

    def mousePressEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        self._go(ev.position())

    def mouseMoveEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        self._go(ev.position())

    def _go(self, pos) -> None:
        r = self.view.canvas.boundingRect()
        sx, sy = self._scale()
        self.view.centerOn(QPointF(r.left() + pos.x() / sx, r.top() + pos.y() / sy))
        self.update()


class SearchBar(QWidget):
    """Find nodes by id, op or name; Enter walks through the hits."""

    hit_changed = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(4, 2, 4, 2)
        self.edit = QLineEdit(self)
        self.edit.setPlaceholderText("Find node: id (#12), op (matmul) or name (attn/q)")
        self.edit.setClearButtonEnabled(True)
        self.status = QLabel("", self)
        close = QToolButton(self)
        close.setText("✕")
        close.clicked.connect(self.hide)
        lay.addWidget(self.edit, 1)
        lay.addWidget(self.status)
        lay.addWidget(close)
        self.model: GraphModel | None = None
        self.hits: list[int] = []
        self.index = -1
        self.searches = 0  # searches run (the debounce test counts them)
        # NOTE: on a big tape each keystroke restarts a short timer and only the last text is
        # searched; a small tape searches at once (sub-millisecond, and tests type then look)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DEBOUNCE_MS)
        self._timer.timeout.connect(self._run_search)
        self.edit.textChanged.connect(self._text_changed)
        self.edit.returnPressed.connect(self._return)

    @Slot(str)
    def _text_changed(self, text: str) -> None:
        if self.model is not None and len(self.model.nodes) >= DEBOUNCE_FROM:
            self._timer.start()
        else:
            self._search(text)

    @Slot()
    def _run_search(self) -> None:
        self._search(self.edit.text())

    @Slot()
    def _return(self) -> None:
        if self._timer.isActive():  # Enter searches the text typed so far at once
            self._timer.stop()
            self._run_search()
        self.next_hit()

    def _search(self, text: str) -> None:
        self.searches += 1
        self.hits = self.model.search(text) if self.model is not None else []
        self.index = -1
        self.status.setText(f"{len(self.hits)} found" if text else "")
        self.hits_changed()

    def hits_changed(self) -> None:
        """Overridden by the panel to mark the hits in the graph."""

    @Slot()
    def next_hit(self) -> None:
        """Go to the next hit (wrapping)."""
        if not self.hits:
            return
        self.index = (self.index + 1) % len(self.hits)
        self.status.setText(f"{self.index + 1} of {len(self.hits)}")
        self.hit_changed.emit(self.hits[self.index])

    def keyPressEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        if ev.key() == Qt.Key_Escape:
            self.hide()
        else:
            super().keyPressEvent(ev)


class GraphPanel(QWidget):
    """Search bar + graph view + overview; re-emits the view's ``node_selected``."""

    node_selected = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.view = GraphView(self)
        self.search = SearchBar(self)
        self.search.hide()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.search)
        lay.addWidget(self.view, 1)
        self.overview = Overview(self.view, self.view)
        self.legend = QLabel(self.view)
        self.legend.setText(LEGEND)
        self.legend.setToolTip(LEGEND_TIP)
        self.legend.setStyleSheet("background: rgba(255,255,255,210); padding: 3px;")
        self.view.node_selected.connect(self.node_selected)
        # the viewport, not the view: its size is final when its Resize arrives (the view's
        # own Resize came before the scroll bars settled, and the overlays ended off screen)
        self.view.viewport().installEventFilter(self)
        self.search.hit_changed.connect(self._go_to_hit)
        self.search.hits_changed = lambda: self.view.set_marks("search", self.search.hits)

    def set_model(self, model: GraphModel, wait: bool = False) -> None:
        """Show a new tape structure."""
        self.search.model = model
        self.view.set_model(model, wait=wait)

    @Slot()
    def open_search(self) -> None:
        """Show and focus the search bar (Ctrl+F)."""
        self.search.show()
        self.search.edit.setFocus()
        self.search.edit.selectAll()

    @Slot(int)
    def _go_to_hit(self, node_id: int) -> None:
        self.view.select_node(node_id)
        self.node_selected.emit(node_id)

    def eventFilter(self, obj, ev) -> bool:  # noqa: N802 (Qt override)
        if obj is self.view.viewport() and ev.type() in (QEvent.Resize, QEvent.Show):
            self._place_overlays()
        return False

    def _place_overlays(self) -> None:
        vp = self.view.viewport()
        at = vp.geometry()  # in the view's coordinates (the overlays are the view's children)
        self.overview.move(max(0, at.right() - self.overview.width() - 8), at.top() + 8)
        self.legend.setMaximumWidth(max(120, at.width() - 16))
        self.legend.adjustSize()
        self.legend.move(at.left() + 8, max(0, at.bottom() - self.legend.height() - 8))
