"""The single QGraphicsItem that draws a whole laid-out graph, culled and level-of-detail aware.

One item instead of one per node: culling is a numpy range query on y-sorted arrays, so a
10,000-node tape pans and zooms as fast as the few hundred boxes actually on screen.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views.models.graph_model import (
    KIND_CONST,
    KIND_GROUP,
    KIND_LOSS,
    KIND_OP,
    KIND_PARAM,
    KIND_STYLE,
    DisplayGraph,
)
from tapescope.views.models.layout import GAP_Y, NODE_H, NODE_W, Layout, flat_inputs
from tapescope.views.models.plain import cut
from tapescope.views.overlay import EMPTY, ItemColors

# NOTE: red means one thing in this app: bits differ (the parity stripe, amber → red by ulp).
# Everything else has its own colour: NaN/inf alarms violet, the first divergence a black flag,
# breakpoints slate dots, selection blue, the loss indigo.
# fill, border per kind: KIND_STYLE (views.models.graph_model, Qt-free: the report's SVG too)
SELECT_COLOR = QColor("#1d6fe0")
CURRENT_COLOR = QColor("#13a34a")
SEARCH_COLOR = QColor("#c026d3")
FIRST_COLOR = QColor("#111827")  # the first divergence: thick black outline and a flag
KERNEL_COLOR = QColor("#0891b2")  # nodes of the kernel selected in the Kernels dock
FRAME_COLOR = QColor("#0e7490")
FRAME_FILL = QColor(8, 145, 178, 18)
FRAME_MEMBER = QColor(8, 145, 178, 70)
NAN_FILL = QColor("#ddd6fe")  # a NaN/inf alarm: violet box (not red: red is "bits differ")
NAN_BORDER = QColor("#7c3aed")
BREAKPOINT_COLOR = QColor("#334155")
STRIPE_W = 10.0  # the parity stripe at a box's left edge; labels start after it
MUTED_ALPHA = 0.3  # inherited error: the same colour, faded
EDGE_COLOR = QColor(110, 120, 140)
EDGE_HI_COLOR = QColor("#1d6fe0")
LABEL_ALIGN = Qt.AlignLeft | Qt.AlignVCenter
LONG_EDGE = 8 * (NODE_H + 54.0)  # scene units: an edge spanning more ranks is "long"
# NOTE: labels by zoom. From FULL_LABELS a box shows its three lines (op, name, shape) at
# their fonts' sizes; below it the small lines would be under 8 px, so from ONE_LINE a box shows one
# line in a font ONE_LINE_PX high on screen (at most ONE_LINE_FILL of the box): a group's
# name, an op's op. Fit (F) zooms to 0.45 or more (views.graph_view.FIT_READABLE), so a
# fitted graph's boxes are labelled; below ONE_LINE a box is too small to hold a word.
# NOTE: ONE_LINE is where that line is 8 px on screen (NODE_H * ONE_LINE_FILL * 0.22): in the
# real window at 1280x800 the graph is ~250 px tall, and the 10k tape's and torch_cnn's
# coarsest folds fit at 0.24 and 0.27, under the 0.28 this was, so Fit showed no word at all
# (issue 46's Xvfb scenarios, tests/scenarios)
FULL_LABELS = 0.7
ONE_LINE = 0.22
ONE_LINE_PX = 11.0
ONE_LINE_FILL = 0.8
LANE_MARGIN = 6.0  # a routed edge passes a box at least this far from its side
LABEL_ROOM = 1.5 * NODE_W  # a one-line label runs on at most this far right of its box
FLAG_TEXT = "▼ first divergence"
FLAG_H = 18.0  # the flag sits in the gap above its box (GAP_Y 54), clear of every box


def _flags(mask: np.ndarray, items: np.ndarray) -> np.ndarray:
    """``mask[items]``, False past the mask's end."""
    out = np.zeros(items.size, dtype=bool)
    inside = items < mask.size
    out[inside] = mask[items[inside]]
    return out


class _Rects:
    """Each item's box as a QRectF, made on first use (``rects[i]``, ``rects.many(items)``)."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self._x0 = (x - NODE_W / 2).tolist()
        self._y0 = (y - NODE_H / 2).tolist()
        self._made: dict[int, QRectF] = {}

    def __len__(self) -> int:
        return len(self._x0)

    def __getitem__(self, i: int) -> QRectF:
        r = self._made.get(i)
        if r is None:
            r = self._made[i] = QRectF(self._x0[i], self._y0[i], NODE_W, NODE_H)
        return r

    def fresh(self, items: np.ndarray) -> list[QRectF]:
        """New boxes of ``items``, not kept here (for a list the caller keeps)."""
        x0, y0 = np.asarray(self._x0)[items].tolist(), np.asarray(self._y0)[items].tolist()
        return list(map(QRectF, x0, y0, itertools.repeat(NODE_W, len(x0)),
                        itertools.repeat(NODE_H, len(x0))))

    def many(self, items) -> list[QRectF]:
        """The boxes of ``items`` (an index array), for one drawRects."""
        get = self.__getitem__
        return list(map(get, np.asarray(items).tolist()))


class GraphCanvas(QGraphicsItem):
    """Draws nodes, edges and marks of one DisplayGraph laid out by ``Layout``."""

    def __init__(self):
        super().__init__()
        self.setFlag(QGraphicsItem.ItemUsesExtendedStyleOption, True)
        self.graph: DisplayGraph | None = None
        self.layout: Layout | None = None
        self._rect = QRectF()
        self.selected_item = -1
        self.current_item = -1
        self.nan_items: set[int] = set()
        self.breakpoint_items: set[int] = set()
        self.search_items: set[int] = set()
        self.first_items: set[int] = set()
        self.kernel_items: set[int] = set()
        self.frames: list[tuple[str, list[int]]] = []
        self._overlay = EMPTY  # each item's parity colour (views.overlay: codes, a palette)
        self._faded: list[QColor] = []
        # per item (bool arrays): drawn faded (error only inherited), outlined (introduced)
        self.muted = np.zeros(0, dtype=bool)
        self.introduced = np.zeros(0, dtype=bool)
        self.font_op = QFont("Sans Serif", 9)
        self.font_op.setBold(True)
        self.font_small = QFont("Sans Serif", 8)
        self._pens = {k: QPen(QColor(b), 1.4) for k, (_, b) in KIND_STYLE.items()}
        self._pens[KIND_CONST].setStyle(Qt.DashLine)
        self._pens[KIND_LOSS].setWidthF(2.6)
        self._pens[KIND_GROUP].setWidthF(2.2)
        self._brushes = {k: QBrush(QColor(f)) for k, (f, _) in KIND_STYLE.items()}
        self.frames_painted = 0
        self._fonts: dict[int, tuple[QFont, QFontMetricsF]] = {}
        # with record_labels: (text, scene rect, height on screen in px) of each label the
        # last frame drew (tests count readable labels; off, a frame allocates nothing more)
        self.record_labels = False
        self.drawn_labels: list[tuple[str, QRectF, float]] = []

    # ---- data -------------------------------------------------------------------------------
    @property
    def overlay(self) -> ItemColors:
        """Each item's parity stripe colour (reads as ``{item: QColor}``)."""
        return self._overlay

    @overlay.setter
    def overlay(self, colors: ItemColors | Mapping) -> None:
        # (a mapping {item: QColor}, as the report sets it, becomes codes)
        n = len(self.graph) if self.graph is not None else None
        self._overlay = ov = ItemColors.from_mapping(colors or {}, n) if colors else EMPTY
        self._faded = []
        for q in ov.palette:  # inherited error: the same colour, faded (made once a colour)
            f = QColor(q)
            f.setAlphaF(MUTED_ALPHA)
            self._faded.append(f)

    def set_graph(self, graph: DisplayGraph, layout: Layout) -> None:
        """Take a new graph + layout; precomputes culling indices and elided labels."""
        self.prepareGeometryChange()
        self.graph, self.layout = graph, layout
        x, y = layout.x, layout.y
        self._by_y = np.argsort(y, kind="stable")
        self._y_sorted = y[self._by_y]
        src, dst = flat_inputs(graph.inputs)
        self._esrc, self._edst = src, dst
        if src.size:
            ey0 = np.minimum(y[src], y[dst])
            self._ey0 = ey0
            self._ey1 = np.maximum(y[src], y[dst])
            self._ex0 = np.minimum(x[src], x[dst])
            self._ex1 = np.maximum(x[src], x[dst])
            # NOTE: short edges are found by a window on their top end; the few long ones
            # (residuals, parameters used far down) are always tested
            long = (self._ey1 - ey0) > LONG_EDGE
            self._long_edges = np.flatnonzero(long)
            short = np.flatnonzero(~long)
            o = np.argsort(ey0[short], kind="stable")
            self._e_by_y0 = short[o]
            self._ey0_sorted = ey0[self._e_by_y0]
        # NOTE: a box's QRectF is made when it is first drawn, and every box's (and every
        # edge's line) only for a frame that shows nearly all of them (zoomed far out): at
        # 100k nodes making them all here cost ~0.9 s before the first frame (issue 29)
        self._rects = _Rects(x, y)
        self._lines: list[QLineF] | None = None
        self._kind_rects: dict[int, list[QRectF]] | None = None
        # elided when first drawn, not here: at 100k nodes eliding every name cost ~0.4 s of
        # opening, and only the few hundred on screen are ever drawn at a readable zoom
        self._fm_small = QFontMetricsF(self.font_small)
        self._fm_op = QFontMetricsF(self.font_op)
        self._names: dict[int, str] = {}
        self._short: dict[tuple[int, int], tuple[str, float]] = {}  # (item, px) → line, width
        self._room: np.ndarray | None = None
        self._ranked = None  # (rank-major keys, x, rank, key step) of the boxes: made when routing
        self._route_cache: dict[int, list | tuple] = {}  # edge → its lanes (() for a short one)
        self.drawn_labels = []
        pad = 40.0
        self._rect = QRectF(-pad, -pad, layout.width + 2 * pad, layout.height + 2 * pad)
        self.selected_item = self.current_item = -1
        self.nan_items, self.breakpoint_items, self.search_items = set(), set(), set()
        self.first_items, self.kernel_items, self.frames = set(), set(), []
        self.update()

    def elided_name(self, item: int) -> str:
        """The item's name line as drawn (elided in the middle to the box), cached."""
        t = self._names.get(item)
        if t is None:
            t = self._names[item] = self._fm_small.elidedText(
                cut(self.graph.labels[item][1]), Qt.ElideMiddle, NODE_W - STRIPE_W - 10)
        return t

    def boundingRect(self) -> QRectF:  # noqa: N802 (Qt override)
        return self._rect

    def item_at(self, p: QPointF) -> int:
        """The item index under a scene point, or -1."""
        if self.layout is None or len(self.layout) == 0:
            return -1
        hit = np.flatnonzero((np.abs(self.layout.x - p.x()) <= NODE_W / 2)
                             & (np.abs(self.layout.y - p.y()) <= NODE_H / 2))
        return int(hit[0]) if hit.size else -1

    def item_rect(self, item: int) -> QRectF:
        """Scene rectangle of one item."""
        return QRectF(self._rects[item])

    def flag_rect(self, item: int) -> QRectF:
        """Where the first-divergence flag of ``item`` is drawn: in the gap above its box
        (beside it, it covered the next box's title), clear of the box's outline."""
        r = self._rects[item]
        return QRectF(r.left(), r.top() - FLAG_H - 7, NODE_W, FLAG_H)

    # ---- culling ----------------------------------------------------------------------------
    def visible_items(self, r: QRectF) -> np.ndarray:
        """Item indices whose boxes intersect the scene rectangle ``r``."""
        lo = np.searchsorted(self._y_sorted, r.top() - NODE_H / 2, side="left")
        hi = np.searchsorted(self._y_sorted, r.bottom() + NODE_H / 2, side="right")
        cand = self._by_y[lo:hi]
        xs = self.layout.x[cand]
        return cand[(xs + NODE_W / 2 >= r.left()) & (xs - NODE_W / 2 <= r.right())]

    def visible_edges(self, r: QRectF) -> np.ndarray:
        """Edge indices whose bounding boxes intersect ``r``."""
        if self._esrc.size == 0:
            return np.empty(0, dtype=np.int64)
        lo = np.searchsorted(self._ey0_sorted, r.top() - LONG_EDGE - NODE_H, side="left")
        hi = np.searchsorted(self._ey0_sorted, r.bottom() + NODE_H, side="right")
        cand = np.concatenate((self._e_by_y0[lo:hi], self._long_edges))
        keep = ((self._ey1[cand] >= r.top() - NODE_H) & (self._ey0[cand] <= r.bottom() + NODE_H)
                & (self._ex1[cand] >= r.left())
                & (self._ex0[cand] <= r.right()))
        return cand[keep]

    # ---- painting ---------------------------------------------------------------------------
    def paint(self, painter: QPainter, option, widget=None) -> None:
        """Edges, then node boxes, then labels (by zoom), then marks."""
        if self.graph is None:
            return
        self.frames_painted += 1
        t = painter.worldTransform()
        scale = (t.m11() ** 2 + t.m12() ** 2) ** 0.5
        r = option.exposedRect
        vis = self.visible_items(r)
        edges = self.visible_edges(r)
        x, y = self.layout.x, self.layout.y
        detailed = scale >= 0.3
        painter.setRenderHint(QPainter.Antialiasing, detailed and vis.size < 3000)
        if self.frames:
            self._paint_frames(painter, scale)
        self._paint_edges(painter, edges, x, y, detailed)
        kinds = self.graph.kinds[vis]
        rects = self._rects
        everything = vis.size == len(rects)
        if everything and self._kind_rects is None:
            self._kind_rects = {int(k): rects.fresh(np.flatnonzero(self.graph.kinds == k))
                                for k in np.unique(self.graph.kinds)}
        for k in (KIND_OP, KIND_PARAM, KIND_CONST, KIND_LOSS, KIND_GROUP):
            if everything:
                batch = self._kind_rects.get(k, [])
            else:
                batch = rects.many(vis[kinds == k])
            if not batch:
                continue
            painter.setBrush(self._brushes[k])
            painter.setPen(self._pens[k] if scale > 0.08 else Qt.NoPen)
            painter.drawRects(batch)
        vis_set = None
        if self.nan_items:
            vis_set = set(vis.tolist())
            painter.setBrush(NAN_FILL)
            painter.setPen(QPen(NAN_BORDER, 2.5))
            painter.drawRects([rects[i] for i in self.nan_items if i in vis_set])
        ov = self._overlay
        if len(ov):
            code = ov.code
            on = vis[vis < code.size]
            on = on[code[on] >= 0]
            on.sort()  # (in item order, as the mapping reads)
            muted = _flags(self.muted, on)
            pal, faded = ov.palette, self._faded
            for it, c, mu in zip(on.tolist(), code[on].tolist(), muted.tolist(), strict=True):
                rr = rects[it]
                painter.fillRect(QRectF(rr.left(), rr.top(), STRIPE_W, rr.height()),
                                 faded[c] if mu else pal[c])
            outlined = on[_flags(self.introduced, on)]
            if outlined.size:
                painter.setBrush(Qt.NoBrush)
                for it, c in zip(outlined.tolist(), code[outlined].tolist(), strict=True):
                    painter.setPen(QPen(pal[c], 3.0))
                    painter.drawRect(rects[it].adjusted(1.5, 1.5, -1.5, -1.5))
        self.drawn_labels = []
        if vis.size < 4000 and scale >= FULL_LABELS:
            self._paint_labels(painter, vis, 1.0, scale)
        elif vis.size < 4000 and scale >= ONE_LINE:
            self._paint_one_line(painter, vis, scale)
        self._paint_marks(painter, scale)

    def _paint_edges(self, painter, edges, x, y, detailed) -> None:
        if edges.size == 0:
            return
        hi_item = self.selected_item
        pen = QPen(EDGE_COLOR, 1.2 if detailed else 0)
        painter.setPen(pen)
        painter.setBrush(Qt.NoBrush)
        if detailed and edges.size < 2500:
            s, d = self._esrc[edges], self._edst[edges]
            sx, sy = x[s].tolist(), (y[s] + NODE_H / 2).tolist()
            dx, dy = x[d].tolist(), (y[d] - NODE_H / 2).tolist()
            path = QPainterPath()
            hi = QPainterPath()
            routes = self._routes(edges)
            for a, b, c, e, si, di, k in zip(sx, sy, dx, dy, s.tolist(), d.tolist(),
                                             edges.tolist(), strict=True):
                p = hi if hi_item in (si, di) else path
                p.moveTo(a, b)
                for gx, top, bottom in routes.get(k, ()):  # a long edge: down its lanes
                    mid = (b + top) / 2
                    p.cubicTo(a, mid, gx, mid, gx, top)
                    p.lineTo(gx, bottom)
                    a, b = gx, bottom
                mid = (b + e) / 2
                p.cubicTo(a, mid, c, mid, c, e)  # top-down S-curve: leaves down, enters from above
            painter.drawPath(path)
            if not hi.isEmpty():  # (an empty path is an SVG export's empty d="", a warning)
                painter.setPen(QPen(EDGE_HI_COLOR, 2.4))
                painter.drawPath(hi)
        elif edges.size * 2 >= self._esrc.size:  # most of them: every line, made once
            if self._lines is None:
                s, d = self._esrc, self._edst
                self._lines = list(map(QLineF, x[s].tolist(), (y[s] + NODE_H / 2).tolist(),
                                       x[d].tolist(), (y[d] - NODE_H / 2).tolist()))
            lines = self._lines
            painter.drawLines(lines if edges.size == len(lines) else
                              [lines[i] for i in edges.tolist()])
        else:
            s, d = self._esrc[edges], self._edst[edges]
            painter.drawLines(list(map(QLineF, x[s].tolist(), (y[s] + NODE_H / 2).tolist(),
                                       x[d].tolist(), (y[d] - NODE_H / 2).tolist())))

    def _one_line_font(self, scale: float) -> tuple[int, QFont, QFontMetricsF]:
        px = int(round(min(ONE_LINE_PX / scale, NODE_H * ONE_LINE_FILL)))
        got = self._fonts.get(px)
        if got is None:
            f = QFont(self.font_op)
            f.setPixelSize(px)
            got = self._fonts[px] = (f, QFontMetricsF(f))
        return px, got[0], got[1]

    def short_label(self, item: int) -> str:
        """The one line a box shows zoomed out: a group's name (an imported op's type), a
        node's op (a parameter's or constant's name)."""
        op, name, _ = self.graph.labels[item]
        if self.graph.item_node[item] >= 0:
            if self.graph.kinds[item] in (KIND_PARAM, KIND_CONST):  # its colour says the kind
                op = cut(name).rstrip("/") or op  # (the name says which: embed/E, tokens)
            return op if item not in self.nan_items else "⚠ " + op
        return op if op != "▸ group" else "▸ " + cut(name)

    def label_room(self) -> np.ndarray:
        """Per item, the free width right of its box up to the next box of its rank (capped
        at ``LABEL_ROOM``): a one-line label too long for its box runs on into it, never
        onto a box (a fitted chain of ``block0–29`` boxes read ``bloc…``)."""
        if self._room is None:
            lay = self.layout
            n = len(lay)
            room = np.full(n, LABEL_ROOM)
            if n > 1:
                o = np.lexsort((lay.x, lay.rank))
                same = lay.rank[o[1:]] == lay.rank[o[:-1]]
                gap = lay.x[o[1:]] - lay.x[o[:-1]] - NODE_W - 8.0
                room[o[:-1][same]] = np.clip(gap[same], 0.0, LABEL_ROOM)
            self._room = room
        return self._room

    def _paint_one_line(self, painter, vis, scale) -> None:
        px, font, fm = self._one_line_font(scale)
        painter.setFont(font)
        painter.setPen(QColor(20, 24, 32))
        x0 = STRIPE_W + 4
        w = NODE_W - x0 - 6
        short = self._short
        drawn = self.drawn_labels if self.record_labels else None
        on_screen = fm.height() * scale
        room = self.label_room()
        for i in vis.tolist():
            t = short.get((i, px))
            if t is None:
                text = self.short_label(i)
                wide = fm.horizontalAdvance(text)
                wi = w if wide <= w else min(wide + 2, w + 6 + float(room[i]))
                t = short[(i, px)] = (fm.elidedText(text, Qt.ElideRight, wi), wi)
            r = self._rects[i]
            box = QRectF(r.left() + x0, r.top(), t[1], r.height())
            painter.drawText(box, LABEL_ALIGN, t[0])
            if drawn is not None:
                drawn.append((t[0], box, on_screen))

    def _routes(self, edges: np.ndarray) -> dict[int, list[tuple[float, float, float]]]:
        """Edge → its lanes (``()`` for an edge between adjacent ranks), every edge of
        ``edges`` included. The lanes of an edge that spans more than one rank: per rank it
        crosses, (x, top, bottom) of a vertical run through the gap between that rank's boxes
        nearest the straight line (at least ``LANE_MARGIN`` from either box), so it runs
        around the boxes, not through them (torch_cnn's residual, a transformer's). Made for
        the edges a detailed frame draws, when first drawn: nothing at open."""
        if self._ranked is None:
            lay = self.layout
            o = np.lexsort((lay.x, lay.rank))
            step = float(lay.width) + 4 * NODE_W
            self._ranked = (lay.rank[o] * step + lay.x[o], lay.x[o], lay.rank[o], step)
        keys, xs, ranks, step = self._ranked
        rank, x = self.layout.rank, self.layout.x
        todo = [k for k in edges.tolist() if k not in self._route_cache]
        if todo:
            t = np.asarray(todo, dtype=np.int64)
            s, d = self._esrc[t], self._edst[t]
            rs, rd = rank[s], rank[d]
            span = rd - rs
            for k, a, ra, c, n in zip(todo, x[s].tolist(), rs.tolist(), x[d].tolist(),
                                      span.tolist(), strict=True):
                if n < 2:
                    self._route_cache[k] = ()
                    continue
                r = np.arange(ra + 1, ra + n)
                want = a + (c - a) * (r - ra) / n  # the straight line's x at each rank
                p = np.searchsorted(keys, r * step + want)
                half = NODE_W / 2 + LANE_MARGIN
                left = np.where((p > 0) & (ranks[np.maximum(p - 1, 0)] == r),
                                xs[np.maximum(p - 1, 0)] + half, -np.inf)
                pr = np.minimum(p, xs.size - 1)
                right = np.where((p < xs.size) & (ranks[pr] == r), xs[pr] - half, np.inf)
                gx = np.where(left <= right, np.clip(want, left, right), (left + right) / 2)
                y = r * (NODE_H + GAP_Y) + NODE_H / 2
                self._route_cache[k] = list(zip(gx.tolist(), (y - NODE_H / 2 - 4).tolist(),
                                                (y + NODE_H / 2 + 4).tolist(), strict=True))
        return self._route_cache

    def _paint_labels(self, painter, vis, alpha, scale=1.0) -> None:
        labels = self.graph.labels
        col = QColor(20, 24, 32)
        col.setAlphaF(alpha)
        sub = QColor(70, 76, 90)
        sub.setAlphaF(alpha)
        painter.setPen(col)
        painter.setFont(self.font_op)
        x0 = STRIPE_W + 4  # labels start right of the parity stripe, never under it
        nan = self.nan_items
        item_node = self.graph.item_node
        for i in vis.tolist():
            r = self._rects[i]
            # (a folded scope's title is its name, its count below: "▸ block0–29")
            text = (labels[i][0] if item_node[i] >= 0 or labels[i][0] != "▸ group"
                    else self._fm_op.elidedText(self.short_label(i), Qt.ElideMiddle,
                                                r.width() - x0 - 6))
            text = text if i not in nan else "⚠ " + text
            box = QRectF(r.left() + x0, r.top() + 1, r.width() - x0 - 6, 16)
            painter.drawText(box, LABEL_ALIGN, text)
            if self.record_labels:
                self.drawn_labels.append((text, box, self._fm_op.height() * scale))
        painter.setFont(self.font_small)
        painter.setPen(sub)
        for i in vis.tolist():
            r = self._rects[i]
            if item_node[i] < 0 and labels[i][0] == "▸ group":
                painter.drawText(QRectF(r.left() + x0, r.top() + 16, r.width() - x0 - 6, 14),
                                 LABEL_ALIGN, labels[i][2])
                continue
            painter.drawText(QRectF(r.left() + x0, r.top() + 16, r.width() - x0 - 6, 14),
                             LABEL_ALIGN, self.elided_name(i))
            painter.drawText(QRectF(r.left() + x0, r.top() + 29, r.width() - x0 - 6, 14),
                             LABEL_ALIGN, labels[i][2])

    def _paint_frames(self, painter, scale) -> None:
        """Fused segments: a tinted rounded frame around the members' boxes, labelled on top."""
        painter.setFont(self.font_small)
        for label, items in self.frames:
            if not items:
                continue
            r = QRectF(self._rects[items[0]])
            for i in items[1:]:
                r = r.united(self._rects[i])
            r = r.adjusted(-10, -18, 10, 8)
            painter.setPen(QPen(FRAME_COLOR, 1.5 if scale >= 0.3 else 0, Qt.DashLine))
            painter.setBrush(FRAME_FILL)
            painter.drawRoundedRect(r, 8, 8)
            painter.setPen(Qt.NoPen)
            painter.setBrush(FRAME_MEMBER)  # members stand out from non-members the frame spans
            painter.drawRects([self._rects[i].adjusted(-5, -5, 5, 5) for i in items])
            if scale >= 0.3:
                painter.setPen(FRAME_COLOR)
                painter.drawText(QRectF(r.left() + 8, r.top() + 1, r.width() - 16, 15),
                                 LABEL_ALIGN, label)

    def _paint_marks(self, painter, scale) -> None:
        grow = max(3.0, 3.0 / max(scale, 1e-6))  # keep marks visible when zoomed far out
        painter.setBrush(Qt.NoBrush)
        for items, color, width in ((self.search_items, SEARCH_COLOR, 2.5),
                                    (self.kernel_items, KERNEL_COLOR, 3.0),
                                    (self.first_items, FIRST_COLOR, 4.0)):
            if items:
                painter.setPen(QPen(color, width / max(scale, 0.05)))
                painter.drawRects([self._rects[i].adjusted(-grow, -grow, grow, grow)
                                   for i in items])
        if self.first_items and scale >= 0.3:
            painter.setFont(self.font_op)
            painter.setPen(FIRST_COLOR)
            for i in self.first_items:
                painter.drawText(self.flag_rect(i), LABEL_ALIGN, FLAG_TEXT)
        if self.breakpoint_items:
            painter.setPen(Qt.NoPen)
            painter.setBrush(BREAKPOINT_COLOR)
            for i in self.breakpoint_items:
                r = self._rects[i]
                painter.drawEllipse(QPointF(r.left() - 9, r.center().y()), 6, 6)
            painter.setBrush(Qt.NoBrush)
        for item, color in ((self.current_item, CURRENT_COLOR), (self.selected_item, SELECT_COLOR)):
            if item >= 0:
                painter.setPen(QPen(color, 3.5 / max(scale, 0.05) if scale < 1 else 3.5))
                painter.drawRoundedRect(self._rects[item].adjusted(-grow, -grow, grow, grow), 4, 4)
