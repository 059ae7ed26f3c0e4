"""The Graph dock: the DAG view with a search bar (Ctrl+F) and an overview map in the corner."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views import theme
from tapescope.views.graph_view import GraphView
from tapescope.views.minimap import Overview
from tapescope.views.models.graph_model import GraphModel
from tapescope.views.models.ulp_scale import HEAT_TICKS, faded_color, level_color

DEBOUNCE_MS = 120  # a pause in typing this long runs the search
DEBOUNCE_FROM = 2000  # nodes: smaller tapes search on every keystroke


def _chip(fill: str, text: str, border: str = "") -> str:
    b = f";border:1px solid {border}" if border else ""
    # dark words on a light chip in either theme (a white chip word is set with <font>)
    return f"<span style='background:{fill};color:#1f2937{b}'>&nbsp;{text}&nbsp;</span>"


# one meaning per colour (red: bits differ, nothing else)
LEGEND = " ".join([
    _chip("#e8eef7", "op", "#5b7db1"), _chip("#fde3b5", "param"), _chip("#ececec", "const"),
    _chip("#e0e7ff", "loss", "#3730a3"), _chip("#dcefdc", "group"),
    # the window's one ulp scale (views.models.ulp_scale): the stripe, the heatmap and the maps
    "&nbsp;ulp:", _chip(level_color(0), "<font color=white>exact</font>"),
    *(_chip(level_color(lv), f"<font color={'black' if lv < 128 else 'white'}>{t}</font>")
      for lv, t in [(1.0, "1")] + [(lv, t.replace(" ulp", "")) for lv, t in HEAT_TICKS[1:5]]),
    _chip(level_color(255), "<font color=white>NaN ≠</font>"),
    _chip(faded_color(254), "inherited"),  # faded: the error came from the inputs
    _chip("#ddd6fe", "⚠ NaN/inf alarm", "#7c3aed"),
    "<b style='color:#111827'>▭ first divergence</b>"])
LEGEND_TIP = (
    "Boxes: node kinds. The stripe at a box's left edge is its parity at the shown step, in the "
    "one ulp scale the Training heatmap and the Compare and Elements maps use too: green "
    "bit-exact, amber (1 ulp) to red (2^20 ulp and more) where bits differ, violet a NaN "
    "against a number. A node that introduced error has its box outlined in that colour; a "
    "faded stripe means the error was only inherited from its inputs. Violet boxes with ⚠: a "
    "NaN/inf only one side holds, or one the node produced from finite inputs (an infinity "
    "both sides hold with the same bits, such as a causal mask, is data). Black outline: the "
    "first divergence; slate dots: breakpoints; blue: the selection.")



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
        t = theme.current()  # the chips keep their colours; the words follow the theme
        self.legend.setText(LEGEND.replace("color:#111827", f"color:{t.on_background}"))
        self.legend.setToolTip(LEGEND_TIP)
        self.legend.setWordWrap(True)  # (in a narrow dock its chips wrap, never cut off)
        bg = t.overlay_bg
        self.legend.setStyleSheet(f"background: rgba({bg.red()},{bg.green()},{bg.blue()},"
                                  f"{bg.alpha()}); color: {t.plot_fg}; padding: 3px;")
        self.view.node_selected.connect(self.node_selected)
        self._margin_timer = QTimer(self)
        self._margin_timer.setSingleShot(True)
        self._margin_timer.setInterval(0)
        self._margin_timer.timeout.connect(self._reserve_legend_strip)
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
        # NOTE: the legend sits in a strip below the viewport (its margin), not over the
        # graph: over it, it covered the loss node of a fitted graph (issue 46)
        w = max(120, at.width() - 8)
        self.legend.setMaximumWidth(w)
        self.legend.resize(w, self.legend.heightForWidth(w))  # (adjustSize wraps it narrow)
        self.legend.move(at.left() + 4, at.bottom() + 3)
        if self.view.viewportMargins().bottom() != self.legend.height() + 4:
            # (after this event: the viewport is not resized inside its own Resize; the
            # Resize the new margin sends places the legend again)
            self._margin_timer.start()

    @Slot()
    def _reserve_legend_strip(self) -> None:
        self.view.reserve_bottom(self.legend.height() + 4)
