"""The tape DAG view: zoom, pan, fit, selection, collapse of groups, layout off the GUI thread."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

import numpy as np
from PySide6.QtCore import (
    QEvent,
    QObject,
    QPointF,
    QRectF,
    QRunnable,
    Qt,
    QThreadPool,
    Signal,
    Slot,
)
from PySide6.QtGui import QAction, QColor, QPainter
from PySide6.QtWidgets import QFrame, QGraphicsScene, QGraphicsView, QMenu, QToolTip

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.core.gcpause import gc_paused
from tapescope.views import theme
from tapescope.views.graph_canvas import GraphCanvas
from tapescope.views.models.graph_model import DisplayGraph, GraphModel
from tapescope.views.models.layout import CACHE, Layout
from tapescope.views.models.plain import cut, tip
from tapescope.views.overlay import EMPTY, NAN_COLOR, NodeColors, item_mask, severity

__all__ = ["NAN_COLOR", "GraphView", "severity"]  # (NAN_COLOR, severity: views.overlay's)

# NOTE: the zoom at which Fit (F) shows a graph whole with its boxes' one-line labels
# readable (the canvas draws them at >= 9 px from a zoom of 0.26; at 0.45 a box is 76 px
# wide, room for ~12 characters): a graph that fits only smaller is folded to the finest
# level of its group tree that fits (Model Explorer's behaviour), never a one-pixel line
FIT_READABLE = 0.45
FIT_PAD = 80.0  # the canvas's margin around the layout, both sides (GraphCanvas: 40 each)

def _ids(node_ids) -> np.ndarray:
    """Node ids as an int64 array (an array as it is; None: none)."""
    if isinstance(node_ids, np.ndarray):
        return node_ids.astype(np.int64, copy=False).ravel()
    return np.fromiter(map(int, node_ids or ()), dtype=np.int64)


def _menu_text(name: str) -> str:
    """A scope name in a menu entry: cut (views.models.plain), ``&`` doubled (no shortcut key)."""
    return cut(name).replace("&", "&&")


class _LayoutSignals(QObject):
    done = Signal(int, int, object, object)  # view token, generation, DisplayGraph, Layout


# One signals object for every view, made in the GUI thread and never destroyed. A job in the
# pool thread must not hold the last reference to a QObject: if its view went away meanwhile,
# the object would be destroyed in the pool thread (a crash in the GUI's garbage collection).
_SIGNALS: _LayoutSignals | None = None
_TOKENS = itertools.count(1)


def _layout_signals() -> _LayoutSignals:
    global _SIGNALS
    if _SIGNALS is None:
        _SIGNALS = _LayoutSignals()
    return _SIGNALS


class _LayoutJob(QRunnable):
    """Computes (or fetches from the cache) one layout in the thread pool."""

    def __init__(self, token: int, gen: int, graph: DisplayGraph):
        super().__init__()
        self.token, self.gen, self.graph = token, gen, graph

    def run(self) -> None:
        lay = CACHE.get_or_compute(self.graph.key, self.graph.inputs, self.graph.order_key)
        _layout_signals().done.emit(self.token, self.gen, self.graph, lay)


class GraphView(QGraphicsView):
    """Shows a GraphModel; emits ``node_selected`` when the user clicks a node."""

    node_selected = Signal(int)
    layout_ready = Signal()
    view_changed = Signal()
    marks_changed = Signal()  # colours or marks changed (the minimap redraws)
    breakpoint_toggled = Signal(int)
    run_to_requested = Signal(int)
    navigate_requested = Signal(int)  # the mouse's back (-1) / forward (+1) buttons

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setScene(QGraphicsScene(self))
        self.canvas = GraphCanvas()
        self.scene().addItem(self.canvas)
        self.setDragMode(QGraphicsView.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.AnchorUnderMouse)
        self.setViewportUpdateMode(QGraphicsView.FullViewportUpdate)
        self.setOptimizationFlag(QGraphicsView.DontSavePainterState, True)
        self.setFrameShape(QFrame.NoFrame)
        self.setBackgroundBrush(QColor(theme.current().graph_bg))
        self.setRenderHint(QPainter.TextAntialiasing, True)
        self.model: GraphModel | None = None
        self.display: DisplayGraph | None = None
        self._gen = 0
        self._token = next(_TOKENS)  # which layouts are this view's
        self._signals = _layout_signals()
        self._signals.done.connect(self._on_layout)
        self._pending_select: int | None = None
        self._press_pos = None
        self._clicked = -1  # the node a click on the view itself selects (while it fans out)
        self.selected_node = -1
        self._marks: dict[str, set[int]] = {"nan": set(), "bp": set(), "search": set(),
                                            "first": set(), "kernel": set()}
        self._frames: dict[str, list[int]] = {}
        self._current_node = -1
        self._overlay: tuple[NodeColors | None, np.ndarray, np.ndarray] = (None, _ids(()),
                                                                            _ids(()))
        self._user_moved = False  # until the user pans or zooms, resizes keep the graph fitted
        # NOTE: how a resize re-fits: readable (the width, from the top) after opening, the
        # whole graph after View ▸ Fit graph. Fit used to clear _user_moved only; the scroll
        # bars it removed resized the viewport and resizeEvent re-fitted "readable", so the
        # view snapped back to 0.75 one event-loop pass later (issue 25)
        self._fit_whole = False
        # the hover text of a node's box (the window gives one with the node's parity, in the
        # parity table's words and numbers); None: its op, name and shape
        self.node_tip: Callable[[int], str] | None = None
        self.horizontalScrollBar().valueChanged.connect(self.view_changed)
        self.verticalScrollBar().valueChanged.connect(self.view_changed)

    # ---- model ------------------------------------------------------------------------------
    def set_model(self, model: GraphModel, wait: bool = False) -> None:
        """Show ``model``; the layout is computed in the thread pool (or now, when ``wait``)."""
        self.model = model
        self.relayout(wait=wait, fit=None)

    def relayout(self, wait: bool = False, fit: bool | str | None = False) -> None:
        """Re-derive the display graph (after collapse/expand) and lay it out.

        ``fit=None`` fits only when the structure changed: a new episode of the same tape keeps
        the user's zoom and position (and its layout comes from the cache); ``"whole"`` shows
        all of it (Fit graph after folding to a level).
        """
        if self.model is None:
            return
        self._gen += 1
        self._fit_next = fit
        graph = self.model.display()
        job = _LayoutJob(self._token, self._gen, graph)
        if wait:
            job.run()  # synchronous: the queued signal is delivered below
            from PySide6.QtCore import QCoreApplication
            QCoreApplication.sendPostedEvents(self._signals)
        else:
            QThreadPool.globalInstance().start(job)

    @Slot(int, int, object, object)
    def _on_layout(self, token: int, gen: int, graph: DisplayGraph, layout: Layout) -> None:
        if token != self._token or gen != self._gen:
            return  # another view's layout, or a newer one was requested meanwhile
        same = self.display is not None and self.display.key == graph.key
        keep = self.visible_scene_rect().center() if same else None
        self.display = graph
        self.canvas.set_graph(graph, layout)
        r = self.canvas.boundingRect()
        self.scene().setSceneRect(r)
        self._apply_marks()
        self._apply_overlay()  # the stripes follow the items of the new layout
        if self._fit_next == "whole":
            self._fit_all()
        elif self._fit_next or (self._fit_next is None and not same):
            self.fit(readable=True)
            self._user_moved = self._fit_whole = False
        elif keep is not None:
            self.centerOn(keep)
        if self._pending_select is not None:
            nid, self._pending_select = self._pending_select, None
            self.select_node(nid)
        self.layout_ready.emit()
        self.viewport().update()

    def is_ready(self) -> bool:
        """True when the current model's layout is on screen."""
        return self.display is not None and self.canvas.graph is self.display

    # ---- marks ------------------------------------------------------------------------------
    def _items(self, node_ids) -> set[int]:
        if self.display is None:
            return set()
        ni = self.display.node_item
        ids = np.fromiter(map(int, node_ids), dtype=np.int64)
        return set(ni[ids[(ids >= 0) & (ids < ni.shape[0])]].tolist())

    def _apply_marks(self) -> None:
        c = self.canvas
        c.nan_items = self._items(self._marks["nan"])
        c.breakpoint_items = self._items(self._marks["bp"])
        c.search_items = self._items(self._marks["search"])
        c.first_items = self._items(self._marks["first"])
        c.kernel_items = self._items(self._marks["kernel"])
        c.frames = [(label, sorted(self._items(ids))) for label, ids in self._frames.items()]
        c.selected_item = next(iter(self._items([self.selected_node])), -1)
        c.current_item = next(iter(self._items([self._current_node])), -1)
        c.update()

    def set_marks(self, kind: str, node_ids) -> None:
        """Mark nodes: ``nan`` (red), ``bp`` (breakpoint dots), ``search`` (outlined),
        ``first`` (the first divergence, flagged) or ``kernel`` (a selected kernel's nodes)."""
        self._marks[kind] = {int(i) for i in node_ids}
        self._apply_marks()
        if kind in ("nan", "first"):  # drawn on the minimap too (selection and search are not)
            self.marks_changed.emit()

    def set_frames(self, frames: dict[str, list[int]]) -> None:
        """Labelled frames around node sets drawn while expanded (fused segments)."""
        self._frames = {k: list(v) for k, v in frames.items()}
        self._apply_marks()

    def set_overlay(self, colors: NodeColors | Mapping | None, muted=None,
                    introduced=None) -> None:
        """A colour stripe per node (parity overlays): ``NodeColors`` (arrays: what a live
        step hands over) or ``{node id: colour}``; None clears it. ``muted`` node ids are
        drawn faded (their error is only inherited), ``introduced`` ones outlined in it (id
        iterables or int arrays)."""
        if colors is None or not len(colors):
            colors = None
        elif not isinstance(colors, NodeColors):
            colors = NodeColors.from_mapping(colors)
        self._overlay = (colors, _ids(muted), _ids(introduced))
        self._apply_overlay()

    def _apply_overlay(self) -> None:
        colors, muted, intro = self._overlay
        d = self.display
        ni = d.node_item if d is not None else None
        m = len(d) if d is not None else 0
        # NOTE: arrays end to end, a code per node: a dict of 100k colours per snapshot cost
        # ~70 ms of the GUI thread at 100k nodes (issue 29 target 4)
        self.canvas.overlay = (colors.to_items(ni, m) if colors is not None and ni is not None
                               else EMPTY)
        self.canvas.muted = item_mask(ni, m, muted)
        self.canvas.introduced = item_mask(ni, m, intro)
        self.canvas.update()
        self.marks_changed.emit()

    @Slot(int)
    def set_current(self, node_id: int) -> None:
        """Highlight the backward stepper's current node (-1 for none)."""
        self._current_node = node_id
        self._apply_marks()

    # ---- selection --------------------------------------------------------------------------
    @Slot(int)
    def select_node(self, node_id: int, center: bool = True) -> None:
        """Select a node from elsewhere (table, inspector, search, stepper): highlight it and
        bring it into view, unfolding the collapsed groups that hide it (a click on a
        collapsed box selects its first node and leaves the box folded)."""
        if not self.is_ready():
            self._pending_select = node_id
            self.selected_node = node_id
            return
        if (node_id != self._clicked and self.model is not None
                and 0 <= node_id < len(self.model.nodes) and self.model.reveal(node_id)):
            self._pending_select = node_id  # selected (and centred) once laid out again
            self.selected_node = node_id
            self.relayout()
            return
        self.selected_node = node_id
        self._apply_marks()
        item = self.canvas.selected_item
        if center and item >= 0:
            r = self.canvas.item_rect(item)
            if not self.mapToScene(self.viewport().rect()).boundingRect().contains(r):
                self.centerOn(r.center())

    def mousePressEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        if ev.button() in (Qt.BackButton, Qt.ForwardButton):
            self.navigate_requested.emit(-1 if ev.button() == Qt.BackButton else 1)
            ev.accept()
            return
        self._press_pos = ev.position()
        super().mousePressEvent(ev)

    def mouseReleaseEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        super().mouseReleaseEvent(ev)
        if ev.button() != Qt.LeftButton or self._press_pos is None or self.display is None:
            return
        if (ev.position() - self._press_pos).manhattanLength() > 4:
            self._user_moved = True
            return  # it was a drag (pan), not a click
        item = self.canvas.item_at(self.mapToScene(ev.position().toPoint()))
        if item < 0:
            return
        nid = self.display.item_node[item]
        if nid < 0:  # a collapsed group: its first node (an ONNX op's box: its output)
            nid = self.model.pick(self.display.item_group[item])
        self.selected_node = nid
        self._apply_marks()
        self._clicked = nid  # the window's select_node comes back here: no reveal
        try:
            self.node_selected.emit(nid)
        finally:
            self._clicked = -1

    def tip_at(self, scene_pos: QPointF) -> str:
        """The hover text of the box at ``scene_pos`` ("" where there is none)."""
        if self.display is None:
            return ""
        item = self.canvas.item_at(scene_pos)
        if item < 0:
            return ""
        nid = int(self.display.item_node[item])
        if nid < 0:  # a folded group
            g = self.display.item_group[item]
            size = self.display.labels[item][2]  # "1,190 nodes"
            return f"{g}\n{size} (folded: double-click to unfold)" if g else ""
        if self.node_tip is not None:
            return self.node_tip(nid)
        nd = self.model.nodes[nid] if self.model is not None else None
        return "" if nd is None else f"#{nid} {nd.op} {nd.name or ''}"

    def viewportEvent(self, ev) -> bool:  # noqa: N802 (Qt override)
        if ev.type() == QEvent.ToolTip:
            text = self.tip_at(self.mapToScene(ev.pos()))
            if text:  # names from a file: escaped (Qt reads a tooltip as HTML)
                QToolTip.showText(ev.globalPos(), tip(text), self.viewport())
            else:
                QToolTip.hideText()
            return True
        if ev.type() == QEvent.Paint:
            # no garbage collection while this view paints: a cycle collected mid-frame can
            # hold a closed view's Qt objects, and deleting them under a live QPainter crashed
            # the suite (a segfault in GraphCanvas.paint, about once in five full runs)
            with gc_paused():
                return super().viewportEvent(ev)
        return super().viewportEvent(ev)

    def mouseDoubleClickEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        if self.display is None:
            return
        item = self.canvas.item_at(self.mapToScene(ev.position().toPoint()))
        if item < 0:
            return
        g = self.display.item_group[item]
        if g is not None:
            self.toggle_group(g, False)
        else:
            scope = self.model.innermost_scope(self.display.item_node[item])
            if scope:
                self.toggle_group(scope, True)

    def contextMenuEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        if self.display is None:
            return
        item = self.canvas.item_at(self.mapToScene(ev.pos()))
        if item < 0:
            return
        menu = QMenu(self)
        g = self.display.item_group[item]
        if g is not None:
            menu.addAction(f"Expand {_menu_text(g)}", lambda: self.toggle_group(g, False))
            up = self.model.parent_group(g)
            if up:  # one level up: the group this box nests in
                menu.addAction(f"Collapse {_menu_text(up)}", lambda: self.toggle_group(up, True))
        else:
            nid = self.display.item_node[item]
            scope = self.model.innermost_scope(nid)
            if scope:
                menu.addAction(f"Collapse {_menu_text(scope)}",
                               lambda: self.toggle_group(scope, True))
            menu.addAction("Toggle breakpoint", lambda: self.breakpoint_toggled.emit(nid))
            menu.addAction("Run backward to here", lambda: self.run_to_requested.emit(nid))
        menu.exec(ev.globalPos())

    def toggle_group(self, group: str, collapsed: bool) -> None:
        """Fold/unfold a group and re-lay out, keeping the view where it was."""
        self.model.set_collapsed(group, collapsed)
        self.relayout()

    def collapse_all(self, collapsed: bool = True) -> None:
        """Fold every top-level scope (or unfold everything)."""
        if self.model is None:
            return
        self.model.collapsed = ({g for g in self.model.groups if "/" not in g}
                                if collapsed else set())
        self.relayout(fit=True)

    # ---- zoom / pan -------------------------------------------------------------------------
    def scale_factor(self) -> float:
        """Current zoom (1.0 = one scene unit per pixel)."""
        return float(self.transform().m11())

    def fit(self, readable: bool = False) -> None:
        """Show the whole graph; ``readable`` keeps labels legible (fit the width, from the top).

        View ▸ Fit graph (``readable`` False) always shows all of it, however tall."""
        r = self.canvas.boundingRect()
        if r.isEmpty():
            return
        if not readable:
            if not self._fold_to_fit():
                self._fit_all()
            return
        vp = self.viewport().rect()
        sx, sy = vp.width() / r.width(), vp.height() / r.height()
        s = min(sx, sy)
        floor = 0.75 if readable else 0.2 * sx
        if s < 0.2 and s < floor or readable and s < floor:
            # NOTE: a 5,000-rank tape fitted whole is a one-pixel line; fit the width instead
            s = min(sx, 1.0) if not readable else min(max(s, min(sx, floor)), 1.0)
            self.resetTransform()
            self.scale(s, s)
            self.centerOn(QPointF(r.center().x(), r.top() + vp.height() / (2 * s)))
        else:
            self.fitInView(r, Qt.KeepAspectRatio)
        self.view_changed.emit()

    def _fit_all(self) -> None:
        self.fitInView(self.canvas.boundingRect(), Qt.KeepAspectRatio)
        self._user_moved, self._fit_whole = False, True
        self.view_changed.emit()

    def _fit_scale(self, width: float, height: float) -> float:
        vp = self.viewport().rect()
        return min(vp.width() / (width + FIT_PAD), vp.height() / (height + FIT_PAD))

    def _fold_to_fit(self) -> bool:
        """Fold to the finest level of the group tree whose graph fits the view at
        ``FIT_READABLE`` or more (the coarsest when none does), when the graph as shown does
        not; True when that re-lays out (the fit follows the layout)."""
        m, lay = self.model, self.canvas.layout
        if m is None or lay is None or self._fit_scale(lay.width, lay.height) >= FIT_READABLE:
            return False
        levels = m.fold_levels()
        if not levels:
            return False
        vp = self.viewport().rect()
        area = vp.width() * vp.height() / FIT_READABLE ** 2  # scene units the view holds
        choice = levels[0]
        for cand in levels:
            g = m.display(cand)
            if len(g) * 200.0 * 100.0 > area:  # (a box and its gaps): cannot fit, no layout
                break
            lay = CACHE.get_or_compute(g.key, g.inputs, g.order_key)
            if self._fit_scale(lay.width, lay.height) < FIT_READABLE:
                break
            choice = cand
        if choice == m.collapsed:
            return False
        m.collapsed = set(choice)
        self.relayout(fit="whole")
        return True

    def zoom(self, factor: float, anchor: QPointF | None = None) -> None:
        """Multiply the zoom by ``factor`` (clamped to 0.0005 .. 8)."""
        s = self.scale_factor()
        factor = float(np.clip(s * factor, 0.0005, 8.0) / s)
        self._user_moved = True
        self.scale(factor, factor)
        self.view_changed.emit()

    def wheelEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        self.zoom(1.0015 ** ev.angleDelta().y())  # the wheel zooms about the cursor; drag pans
        ev.accept()

    def resizeEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(ev)
        if not self._user_moved and self.is_ready():
            self.fit(readable=not self._fit_whole)
            item = self.canvas.selected_item
            if item >= 0:  # a resize keeps the selection, and keeps it on screen
                r = self.canvas.item_rect(item)
                if not self.visible_scene_rect().contains(r):
                    self.centerOn(r.center())

    def reserve_bottom(self, px: int) -> None:
        """Keep ``px`` pixels below the viewport for a strip (the legend): what sits there
        never covers a node, the fitted loss node included."""
        m = self.viewportMargins()
        if m.bottom() != px:
            self.setViewportMargins(0, 0, 0, px)

    def visible_scene_rect(self) -> QRectF:
        """The scene rectangle on screen."""
        return self.mapToScene(self.viewport().rect()).boundingRect()

    def actions_for_menu(self) -> list[QAction]:
        """View actions (fit, zoom, collapse) for the main window's menus and toolbar."""
        acts = []
        for text, key, fn in (("Fit graph", "F", lambda: self.fit(readable=False)),
                              ("Zoom in", "Ctrl+=", lambda: self.zoom(1.25)),
                              ("Zoom out", "Ctrl+-", lambda: self.zoom(0.8)),
                              ("Collapse all scopes", "", lambda: self.collapse_all(True)),
                              ("Expand all scopes", "", lambda: self.collapse_all(False))):
            a = QAction(text, self)
            if key:
                a.setShortcut(key)
            a.triggered.connect(fn)
            acts.append(a)
        return acts
