"""The graph's minimap (overview): the whole layout in a corner, the visible area as a frame.

A deep tape (ranks closer than 1/20 px) is drawn as bands, one per run of whole name scopes
(``views.models.scope_runs``, the heatmap's rows): each band spans the pixel rows where its items
lie and is coloured by its worst parity stripe, so a 100,000-node tape reads as a few dozen scopes
and where it differs shows at a glance. A click on a band goes to its worst node; a drag pans.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, Slot
from PySide6.QtGui import QColor, QImage, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QToolTip, QWidget

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views import theme
from tapescope.views.graph_canvas import FIRST_COLOR, KIND_STYLE, NAN_BORDER
from tapescope.views.graph_view import NAN_COLOR, GraphView
from tapescope.views.models.graph_model import KIND_GROUP, KIND_OP
from tapescope.views.models.plain import tip
from tapescope.views.models.scope_runs import run_label, scope_runs
from tapescope.views.models.ulp_scale import EXACT_COLOR

BAND_PX = 6  # the thinnest band, pixels: a band and its 1 px gap stay visible
GREY = QColor("#9aa3b2")  # nothing compared in this band
FRAME = QColor("#1d4ed8")
EXACT = EXACT_COLOR  # the bit-exact stripe (views.models.ulp_scale)
FRAME_MIN_PX = 8.0  # the view's frame is never drawn thinner (at 100k nodes it is 0.03 px)


class Bands:
    """The band layout of one display graph at one minimap height: which band each item is
    in, which band each pixel row shows, and each band's pixel span."""

    def __init__(self, graph, ys: np.ndarray, h: int):
        m = len(graph)
        names = [lab[1] + "/" if g is not None else lab[1]  # a collapsed scope: its scope
                 for lab, g in zip(graph.labels, graph.item_group, strict=True)]
        self.names = names
        self.members = np.bincount(np.asarray(graph.node_item, dtype=np.int64), minlength=m)
        starts = scope_runs(names, m, max(1, h // BAND_PX))
        if starts is None:
            starts = np.arange(m)
        self.starts = starts
        nb = starts.size
        self.band_of = np.searchsorted(starts, np.arange(m), side="right") - 1
        # each pixel row shows the band most of its items belong to; rows without items take
        # the band above (bands then tile the height without holes)
        counts = np.zeros((h, nb), dtype=np.int64)
        np.add.at(counts, (ys, self.band_of), 1)
        row = np.where(counts.any(axis=1), counts.argmax(axis=1), -1)
        filled = np.maximum.accumulate(np.where(row >= 0, np.arange(h), 0))
        row = np.where(row >= 0, row, row[filled])
        first = np.flatnonzero(row >= 0)
        if first.size:
            row[: first[0]] = row[first[0]]
        self.row_band = row
        edges = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        self.spans = [(int(a), int(b), int(row[a])) for a, b in
                      zip(edges.tolist(), np.r_[edges[1:], h].tolist(), strict=True)]

    def label(self, band: int) -> str:
        """The scopes a band stands for."""
        lo = int(self.starts[band])
        hi = int(self.starts[band + 1]) if band + 1 < self.starts.size else len(self.names)
        return run_label(self.names, lo, hi)

    def size(self, band: int) -> int:
        """Tape nodes in a band (a collapsed scope counts its members)."""
        return int(self.members[self.band_of == band].sum())


class Overview(QWidget):
    """A minimap: every node as a dot (a deep tape: bands by scope), the visible area as a
    frame; click or drag to go there."""

    def __init__(self, view: GraphView, parent=None):
        super().__init__(parent)
        self.view = view
        self.setFixedSize(110, 150)
        self._image: QImage | None = None
        self.bands = False  # drawn as bands by scope (a deep tape), not as dots
        self._bands: Bands | None = None
        self._bands_key = None
        self.band_color: dict[int, QColor] = {}  # band -> its worst stripe (compared bands)
        self.band_worst: dict[int, int] = {}  # band -> its worst item
        view.layout_ready.connect(self.rebuild)
        view.marks_changed.connect(self.rebuild)
        view.view_changed.connect(self.update)

    def _scale(self) -> tuple[float, float]:
        r = self.view.canvas.boundingRect()
        # NOTE: independent x/y scales: a deep tape is hundreds of times taller than wide
        return self.width() / max(r.width(), 1.0), self.height() / max(r.height(), 1.0)

    def band_layout(self) -> Bands | None:
        """The bands of the graph on screen (None when it is drawn as dots)."""
        return self._bands if self.bands else None

    @Slot()
    def rebuild(self) -> None:
        """Re-render after a new layout (or new colours and marks)."""
        c = self.view.canvas
        if c.layout is None:
            return
        img = QImage(self.size(), QImage.Format_ARGB32_Premultiplied)
        img.fill(theme.current().overlay_bg)
        p = QPainter(img)
        sx, sy = self._scale()
        r = c.boundingRect()
        xs = ((c.layout.x - r.left()) * sx).astype(int)
        ys = np.clip(((c.layout.y - r.top()) * sy).astype(int), 0, self.height() - 1)
        self.bands = sy * 20 < 1.0  # ranks closer than 1/20 px: dots would be barcode stripes
        if self.bands:
            self._paint_bands(p, c, ys)
        else:
            self._paint_dots(p, c, xs, ys)
        for items, color in ((c.nan_items, NAN_BORDER), (c.first_items, FIRST_COLOR)):
            p.setPen(QPen(color, 1.5))  # marks: one line each, whatever the scale
            for i in items:
                p.drawLine(0, int(ys[i]), self.width(), int(ys[i]))
        p.end()
        self._image = img
        self.update()

    def _paint_dots(self, p: QPainter, c, xs: np.ndarray, ys: np.ndarray) -> None:
        """Each item a dot: in its parity stripe's colour where it was compared (a 3x3 square,
        worst drawn last so a red node is never hidden under green ones), else a point in its
        kind's border colour."""
        ov = c.overlay
        code = np.full(len(xs), -1, dtype=np.int64)
        k = min(len(xs), ov.code.size)
        code[:k] = ov.code[:k]
        kinds = np.asarray(c.graph.kinds)
        for kind, (_, border) in KIND_STYLE.items():
            p.setPen(QColor(border))
            at = np.flatnonzero((kinds == kind) & (code < 0))
            p.drawPoints([QPointF(x, y) for x, y in zip(xs[at].tolist(), ys[at].tolist(),
                                                        strict=True)])
        p.setPen(Qt.NoPen)
        shown = np.flatnonzero(code >= 0)
        # worst drawn last (a stable sort: equally severe ones in item order)
        shown = shown[np.argsort(ov.sev[code[shown]], kind="stable")]
        for x, y, col in zip(xs[shown].tolist(), ys[shown].tolist(), code[shown].tolist(),
                             strict=True):
            p.fillRect(QRectF(x - 1, y - 1, 3, 3), ov.palette[col])

    def _paint_bands(self, p: QPainter, c, ys: np.ndarray) -> None:
        """One tile per band, coloured by the worst parity stripe of its items (NaN violet,
        then least green; grey where nothing is compared), a 1 px gap between bands."""
        h, w = self.height(), self.width()
        key = (id(c.graph), c.graph.key, h)
        if self._bands_key != key:
            self._bands, self._bands_key = Bands(c.graph, ys, h), key
        b = self._bands
        self.band_color, self.band_worst = {}, {}
        ov = c.overlay
        if len(ov):
            its = ov.items_colored()
            its = its[its < b.band_of.size]
            sev = ov.sev[ov.code[its]]
            band = b.band_of[its]
            # per band its worst item (the lowest of the worst): items ascend, so do their
            # bands (runs of items), and one key per item, largest the worst, picks it
            m = b.band_of.size
            key = sev * m + (m - 1 - its)
            edges = np.flatnonzero(np.r_[True, band[1:] != band[:-1]]) if its.size else its
            best = np.maximum.reduceat(key, edges) if its.size else key
            worst = m - 1 - best % m
            for bd, it in zip(band[edges].tolist(), worst.tolist(), strict=True):
                self.band_color[bd] = ov.palette[int(ov.code[it])]
                self.band_worst[bd] = it
        # a band nothing in was compared takes the colour of the kind most of its items are, as
        # the graph draws their borders (ops blue, parameters amber): grey bands on ResNet-50
        # said nothing (issue 25); parity, once there is any, is drawn over it
        nk = len(KIND_STYLE)
        votes = np.bincount(b.band_of * nk + np.asarray(c.graph.kinds, dtype=np.int64),
                            minlength=b.starts.size * nk).reshape(-1, nk)
        # (a collapsed group's border is green: here it would read as bit-exact; drawn as ops)
        kind_col = [QColor(KIND_STYLE[KIND_OP if k == KIND_GROUP else k][1]).lighter(115)
                    for k in sorted(KIND_STYLE)]
        most = votes.argmax(axis=1).tolist()
        for y0, y1, band in b.spans:
            gap = 1 if y1 - y0 >= 3 else 0
            col = self.band_color.get(band)
            if col is None:
                col = kind_col[most[band]] if not len(ov) else GREY
            p.fillRect(QRectF(4, y0, w - 8, y1 - y0 - gap), col)

    def band_at(self, y: float) -> int:
        """The band drawn at pixel row ``y`` (-1: none, or not drawn as bands)."""
        b = self.band_layout()
        if b is None or not 0 <= int(y) < b.row_band.size:
            return -1
        return int(b.row_band[int(y)])

    def frame_rect(self) -> QRectF:
        """The visible area in minimap pixels (as thin as it really is)."""
        r = self.view.canvas.boundingRect()
        v = self.view.visible_scene_rect()
        sx, sy = self._scale()
        return QRectF((v.left() - r.left()) * sx, (v.top() - r.top()) * sy,
                      v.width() * sx, v.height() * sy)

    def paintEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        p = QPainter(self)
        p.fillRect(self.rect(), theme.current().overlay_bg)
        if self._image is not None:
            p.drawImage(0, 0, self._image)
        if not self.view.canvas.boundingRect().isEmpty():
            self._paint_frame(p)
        p.setPen(GREY)
        p.setBrush(Qt.NoBrush)
        p.drawRect(self.rect().adjusted(0, 0, -1, -1))

    def _paint_frame(self, p: QPainter) -> None:
        # NOTE: at 100k nodes the visible area is a few hundredths of a pixel tall: drawn at
        # least FRAME_MIN_PX tall about its centre, a white halo under a dark blue line (it
        # stays visible on red, green and violet bands), and a notch at both edges
        f = self.frame_rect().intersected(QRectF(self.rect()).adjusted(1, 1, -1, -1))
        if f.isEmpty():
            f = self.frame_rect()
        cy = f.center().y()
        if f.height() < FRAME_MIN_PX:
            # kept whole inside the minimap at the top and bottom ends of the tape
            top = min(max(cy - FRAME_MIN_PX / 2, 2.0), self.height() - 2.0 - FRAME_MIN_PX)
            f = QRectF(f.left(), top, f.width(), FRAME_MIN_PX)
            cy = f.center().y()
        f = f.adjusted(1, 0, -1, 0) if f.width() > 4 else f
        p.setRenderHint(QPainter.Antialiasing, True)
        p.setBrush(Qt.NoBrush)
        p.setPen(QPen(QColor(255, 255, 255, 235), 4.0))
        p.drawRect(f)
        p.setPen(QPen(FRAME, 2.0))
        p.setBrush(QColor(29, 78, 216, 45))
        p.drawRect(f)
        w = self.width()
        for x0, d in ((0.0, 1.0), (float(w), -1.0)):  # notches pointing at the frame
            tri = QPainterPath(QPointF(x0, cy - 5))
            tri.lineTo(x0 + 6 * d, cy)
            tri.lineTo(x0, cy + 5)
            tri.closeSubpath()
            p.setPen(QPen(QColor(255, 255, 255), 1.0))
            p.setBrush(FRAME)
            p.drawPath(tri)
        p.setRenderHint(QPainter.Antialiasing, False)

    def event(self, ev) -> bool:
        if ev.type() == QEvent.ToolTip:
            band = self.band_at(ev.pos().y())
            if band >= 0:
                self._band_tip(ev.globalPos(), band)
                return True
        return super().event(ev)

    def band_tip(self, band: int) -> str:
        """The text a band's tooltip shows: its scopes, size and worst parity."""
        b = self._bands
        col = self.band_color.get(band)
        worst = ("nothing compared" if col is None else "NaN ≠" if col.name() == NAN_COLOR
                 else "bit-exact" if col.name() == EXACT else "bits differ")
        return f"{b.label(band)}\n{b.size(band):,} nodes · {worst}"

    def _band_tip(self, at, band: int) -> None:
        QToolTip.showText(at, tip(self.band_tip(band)), self)  # scope names: escaped

    def mousePressEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        band = self.band_at(ev.position().y())
        it = self.band_worst.get(band, -1)
        if it >= 0 and self.band_color[band].name() != EXACT:
            # a band with an error: go to its worst node (where the colour came from)
            self.view.centerOn(self.view.canvas.item_rect(it).center())
            self.update()
            return
        self._go(ev.position())

    def mouseMoveEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        self._go(ev.position())

    def _go(self, pos) -> None:
        r = self.view.canvas.boundingRect()
        sx, sy = self._scale()
        self.view.centerOn(QPointF(r.left() + pos.x() / sx, r.top() + pos.y() / sy))
        self.update()
