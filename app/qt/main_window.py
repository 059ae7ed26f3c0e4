"""The main window: graph in the centre, Inspector / Backward stepper / Parity table docks.

Panels never talk to each other directly: each emits ``node_selected`` and the window fans the
selection out (``select_node``), so every panel stays in sync with one source of truth.
"""

from __future__ import annotations

import os
import traceback

from PySide6.QtCore import QSettings, QSize, Qt, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QFrame,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QScrollArea,
    QSizePolicy,
    QToolBar,
)

from tapescope.app.qt import gui_gc
from tapescope.app.qt.menus import build_menus
from tapescope.app.qt.onnx_open import open_onnx_with_progress
from tapescope.app.qt.progress_dialog import open_with_progress
from tapescope.app.session import Session, SessionError, open_workload
from tapescope.core.tapefile import TapeFileError
from tapescope.views.graph_panel import GraphPanel
from tapescope.views.inspector import InspectorPanel
from tapescope.views.models.graph_model import shape_text
from tapescope.views.models.numbers import count_text
from tapescope.views.models.parity_rows import build_rows, parity_line
from tapescope.views.models.plain import cut, html, message, tip
from tapescope.views.models.stepper_model import BackwardStepper
from tapescope.views.parity_table import ParityPanel
from tapescope.views.stepper_view import StepperPanel

DEFAULT_SIZE = (1440, 900)
# what app.qt.live_controller / app.qt.time_travel may use of the window (and nothing else)
LIVE_WINDOW_API = frozenset({
    "session", "selected", "node_selected", "session_changed", "repro_requested",
    "open_workload", "show_error", "set_status", "select_node", "set_comparison",
    "place_live_docks", "dock_toggle", "add_menu", "add_toolbar", "tool_row",
    "add_status_widget", "set_graph_groups", "set_graph_overlay", "set_graph_marks",
    "show_details", "show_own_details", "set_inspector_note", "set_inspector_action",
    "inspector_shows", "walk_backward", "set_stepper_walks",
})
MAX_RECENT = 8


class TallScroll(QScrollArea):
    """Scrolls ``widget`` up and down; as wide as it needs where the dock is that wide (the
    window lays it out so), sideways in a narrower one."""

    MIN_WIDTH = 360  # the dock's own minimum, whatever the widget shows

    def __init__(self, widget, parent=None):
        super().__init__(parent)
        self.setWidget(widget)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAsNeeded)

    def needed_width(self) -> int:
        """The width that shows the widget whole: its minimum, and the vertical scroll bar."""
        return self.widget().minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        # NOTE: a constant, not the widget's minimum: that one moved with the selection (the
        # Compare and Elements tabs come and go) and the dock jumped ~100 px on a click, and
        # the docks' minima summed past 1100 px, so a small screen could not hold the window
        # (issue 46). The window gives the dock needed_width() when it places it
        return QSize(self.MIN_WIDTH, 90)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        return QSize(self.needed_width(), super().sizeHint().height())


class MainWindow(QMainWindow):
    """Shows one Session at a time; a failed open leaves the current one untouched."""

    node_selected = Signal(int)
    session_changed = Signal()
    repro_requested = Signal()  # the Inspector's "Copy repro" (a live session writes it)

    def __init__(self, settings: QSettings | None = None, parent=None):
        super().__init__(parent)
        gui_gc.hold(self)  # cyclic garbage collected on this thread only while it is open
        self.settings = settings if settings is not None else QSettings("tapescope", "tapescope")
        self.session: Session | None = None
        self.stepper: BackwardStepper | None = None
        self.selected = -1
        self.last_error: QMessageBox | None = None
        self.last_traceback = ""  # of the last failed open (``gui --debug`` prints it)
        self._fanning = False
        self.trail: list[int] = []  # the nodes visited, oldest first (Back / Forward)
        self.trail_pos = -1
        self._walking = False
        self.setWindowTitle("tapescope")
        self.resize(*DEFAULT_SIZE)
        self.setAcceptDrops(True)
        self.setDockNestingEnabled(True)

        self.graph = GraphPanel(self)
        self.setCentralWidget(self.graph)
        self.inspector = InspectorPanel(self)
        self.stepper_panel = StepperPanel(self)
        self.parity = ParityPanel(self)
        self.docks: dict[str, QDockWidget] = {}
        # NOTE: in a scroll area: a live node's Inspector (four stats rows, three drawings) asked
        # for 476 px, and with the stepper below it the window could not be 800 px tall (a
        # 1280x800 window came out 1280x894, issue 25); a short screen scrolls it instead
        self._add_dock("Inspector", TallScroll(self.inspector, self), Qt.RightDockWidgetArea)
        self._add_dock("Backward stepper", self.stepper_panel, Qt.RightDockWidgetArea)
        self._add_dock("Parity table", self.parity, Qt.BottomDockWidgetArea)
        self.setCorner(Qt.BottomRightCorner, Qt.RightDockWidgetArea)
        self.resizeDocks([self.docks["Inspector"], self.docks["Backward stepper"]], [470, 400],
                         Qt.Vertical)
        self.resizeDocks([self.docks["Parity table"]], [230], Qt.Vertical)

        for panel in (self.graph, self.inspector, self.parity, self.stepper_panel):
            panel.node_selected.connect(self.select_node)
        self.inspector.jump_first_nan.connect(self.jump_to_first_nan)
        self.inspector.repro_requested.connect(self.repro_requested)
        self.stepper_panel.current_changed.connect(self._stepper_moved)
        self.stepper_panel.breakpoints_changed.connect(
            lambda ids: self.graph.view.set_marks("bp", ids))
        self.graph.view.breakpoint_toggled.connect(self.stepper_panel.toggle_breakpoint)
        self.graph.view.run_to_requested.connect(self._run_to)
        self.graph.view.navigate_requested.connect(
            lambda d: self.go_back() if d < 0 else self.go_forward())
        self.graph.view.node_tip = self.node_tip

        self.status_label = QLabel("No tape open — File ▸ Open, or drop a .tape file here")
        self.status_label.setTextFormat(Qt.PlainText)  # (file names, errors: never markup)
        self.status_label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)  # (clips)
        self.statusBar().addWidget(self.status_label, 1)
        self.recent_menu = None
        build_menus(self)
        self._refresh_recent()
        from tapescope.app.qt.live_controller import LiveController

        self.onnx_limits = None  # core.onnx.Limits for models opened here (None: the defaults)
        self.live = LiveController(self)  # Live toolbar, Training and Kernels docks
        # the right column as wide as the Inspector's widest content (a live node's Elements
        # table), from the start: no selection has to widen it (issue 46). NOTE: on a laid-out
        # window: before that, resizeDocks left the column at Qt's own guess (445 px)
        self.layout().activate()
        self.resizeDocks([self.docks["Inspector"]],
                         [self.docks["Inspector"].widget().needed_width()], Qt.Horizontal)
        from tapescope.app.qt.window_layout import WindowLayout

        self.window_layout = WindowLayout(self, self.settings)  # after every dock exists
        self.window_layout.restore()

    # ---- docks ------------------------------------------------------------------------------
    def add_dock(self, title: str, widget, area=Qt.RightDockWidgetArea) -> QDockWidget:
        """Add a dock (the Training and Kernels docks use this) and list it in View."""
        return self._add_dock(title, widget, area)

    def _add_dock(self, title: str, widget, area) -> QDockWidget:
        d = QDockWidget(title, self)
        d.setObjectName(title.replace(" ", "_"))
        d.setWidget(widget)
        self.addDockWidget(area, d)
        self.docks[title] = d
        return d

    # ---- opening ----------------------------------------------------------------------------
    def open_file(self, path: str) -> bool:
        """Open a .tape / .onnx / workload .py file; on failure show why and keep the session."""
        try:  # an ONNX model or a tape opens on a worker thread behind a dialog with Cancel
            s = open_onnx_with_progress(self, path, limits=self.onnx_limits) \
                if path.lower().endswith(".onnx") else open_with_progress(self, path)
            s.ensure_gradients()
        except SessionError as e:
            self.last_traceback = e.details or traceback.format_exc()
            self.show_error("Cannot open file", str(e), e.details or None)
            return False
        except Exception as e:  # noqa: BLE001 — a bug must not take the user's session down
            self.show_error("Cannot open file", f"{path}: {type(e).__name__}: {e}",
                            traceback.format_exc())
            return False
        self._add_recent(os.path.abspath(path))
        self.set_session(s)
        return True

    def open_workload(self, spec: str) -> bool:
        """Open a built-in workload (``mlp``, ``transformer``) or a user's ``PATH.py``."""
        try:
            s = open_workload(spec)
        except SessionError as e:
            self.last_traceback = e.details or traceback.format_exc()
            self.show_error("Cannot open workload", str(e), e.details or None)
            return False
        self.set_session(s)
        return True

    @Slot()
    def open_dialog(self) -> None:
        """File ▸ Open…"""
        path, _ = QFileDialog.getOpenFileName(
            self, "Open tape or model", self.settings.value("last_dir", ""),
            "Tapes and models (*.tape *.onnx *.py);;All files (*)")
        if path:
            self.settings.setValue("last_dir", os.path.dirname(path))
            self.open_file(path)

    def save_tape(self, path: str) -> bool:
        """Write the current tape (values, gradients, loss id) to a ``.tape`` file."""
        from tapescope.core import tapefile

        s = self.session
        if s is None or not hasattr(s.tape, "mark"):
            self.show_error("Cannot save", "only a recorded tape can be saved as .tape "
                            "(this session is a read-only ONNX run)")
            return False
        meta = dict(s.meta)
        if s.loss_id is not None:
            meta["loss"] = s.loss_id
        try:
            tapefile.save(s.tape, path, meta=meta)
        except (OSError, TypeError, ValueError) as e:
            self.show_error("Cannot save", f"{path}: {type(e).__name__}: {e}")
            return False
        self._add_recent(os.path.abspath(path))
        self.statusBar().showMessage(f"saved {path}", 5000)
        return True

    @Slot()
    def save_dialog(self) -> None:
        """File ▸ Save tape as…"""
        path, _ = QFileDialog.getSaveFileName(self, "Save tape", self.settings.value(
            "last_dir", ""), "Tapes (*.tape)")
        if path:
            self.save_tape(path if path.endswith(".tape") else path + ".tape")

    def set_session(self, s: Session) -> None:
        """Show a new session in every panel."""
        self.session = s
        self.setWindowTitle(f"tapescope — {s.title}")
        self.selected = -1
        self.trail, self.trail_pos = [], -1  # another tape: its own trail
        self.graph.set_model(s.graph)
        self.parity.set_rows(build_rows(s.tape.nodes, s.comparison))
        # one search index for the graph and the table, built when first searched
        self.parity.set_search(lambda g=s.graph: g.searcher)
        self.inspector.show_details(None)
        self.stepper = BackwardStepper(s.tape, s.loss_id) if s.loss_id is not None else None
        self.stepper_panel.set_stepper(self.stepper, s.labels())
        self.stepper_panel.set_walks("")  # its own recording (a live session says otherwise)
        alarms = self.alarms()  # one batched NaN/inf scan (Session.nonfinite_flags), kept
        self.graph.view.set_marks("nan", alarms)
        self.graph.view.set_marks("bp", ())
        self._status(alarms)
        self.session_changed.emit()

    def set_comparison(self, comparison: list[dict] | None, overlay: bool = True) -> None:
        """Attach a parity comparison (per-node dicts) to the current session's table and, with
        ``overlay``, its colours to the graph (time travel sets them itself, with its marks)."""
        if self.session is None:
            return
        try:
            rows = build_rows(self.session.tape.nodes, comparison)
        except ValueError as e:
            self.show_error("Bad comparison", str(e))
            return
        self.session.comparison = comparison
        self.parity.set_rows(rows)
        if overlay:
            self.graph.view.set_overlay(self.session.parity_colors())

    def show_error(self, title: str, text: str, details: str | None = None) -> QMessageBox:
        """A non-blocking error dialog; the session stays as it was."""
        # NOTE: the text often quotes a file (a node name, an attribute): plain and cut, never
        # read as HTML (views.models.plain; issue 49)
        text = message(text)
        box = QMessageBox(QMessageBox.Warning, title, text, QMessageBox.Ok, self)
        box.setTextFormat(Qt.PlainText)
        if details:
            box.setDetailedText(message(details, 1 << 16))  # (a QTextEdit: plain already)
        box.setAttribute(Qt.WA_DeleteOnClose, False)
        box.open()
        self.last_error = box
        if self.session is None:  # nothing else to say there: the error replaces "No tape open"
            self.status_label.setText(f"{title}: {text}")
        else:  # (a temporary message over a label not yet shown would be drawn on top of it)
            self.statusBar().showMessage(f"{title}: {text}", 10000)
        return box

    # ---- the live controller's interface ----------------------------------------------------
    # app.qt.live_controller and app.qt.time_travel reach the window only through LIVE_WINDOW_API
    # (the read-only ``session``/``selected``, the signals, and the methods below);
    # tests/app/test_live_interface.py drives them with a window that has nothing else.
    def place_live_docks(self, training, kernels) -> None:
        """Add the Training and Kernels docks and fit them beside the window's own."""
        self.add_dock("Training", training, Qt.BottomDockWidgetArea)
        self.add_dock("Kernels", kernels, Qt.RightDockWidgetArea)
        d = self.docks
        self.tabifyDockWidget(d["Backward stepper"], d["Kernels"])
        d["Backward stepper"].raise_()
        self.splitDockWidget(d["Parity table"], d["Training"], Qt.Horizontal)
        self.resizeDocks([d["Parity table"]], [330], Qt.Vertical)
        self.resizeDocks([d["Parity table"], d["Training"]], [560, 560], Qt.Horizontal)
        # a live session's Inspector holds both sides, the compare maps and the Elements table:
        # it gets two thirds of the right column (issue 25: the worst elements showed one row)
        self.resizeDocks([d["Inspector"], d["Backward stepper"]], [620, 300], Qt.Vertical)

    def walk_backward(self, tape, loss_id: int | None) -> bool:
        """The Backward stepper walks ``tape`` from ``loss_id`` (a live step's replayed
        reference, app.qt.live_stepper); ``tape`` None: the window's own recording again. False
        (nothing changes) when ``tape``'s nodes are not the ones the graph shows."""
        s = self.session
        if s is None:
            return False
        if tape is None:
            tape, loss_id = s.tape, s.loss_id
        elif len(tape) != len(s.tape) or any(
                a.op != b.op or a.shape != b.shape for a, b in zip(tape.nodes, s.tape.nodes,
                                                                   strict=True)):
            return False
        self.stepper = BackwardStepper(tape, loss_id) if loss_id is not None else None
        self.stepper_panel.set_stepper(self.stepper, s.labels())
        return True

    def set_stepper_walks(self, text: str) -> None:
        """The Backward stepper's first line: which step's backward it walks (empty: none)."""
        self.stepper_panel.set_walks(text)

    def dock_toggle(self, title: str) -> QAction:
        """The show/hide action of the dock ``title`` (for a menu)."""
        return self.docks[title].toggleViewAction()

    def add_menu(self, title: str) -> QMenu:
        """A new top-level menu."""
        return self.menuBar().addMenu(title)

    def add_toolbar(self, toolbar: QToolBar, new_row: bool = False) -> None:
        """Show ``toolbar`` at the top (``new_row``: below the toolbars already there)."""
        if new_row:
            self.addToolBarBreak()
        self.addToolBar(toolbar)

    def tool_row(self) -> QToolBar:
        """The main toolbar, where the step scrubber sits (the window must fit 900 px)."""
        return self.main_toolbar

    def add_status_widget(self, widget) -> None:
        """A permanent widget at the right of the status bar."""
        self.statusBar().addPermanentWidget(widget)

    def set_status(self, text: str, ms: int = 5000) -> None:
        """A temporary status-bar message."""
        self.statusBar().showMessage(text, ms)

    def set_graph_groups(self, groups: dict[str, list[int]]) -> None:
        """Frame these named node groups in the graph (fused segments) and lay it out again."""
        if self.session is None:
            return
        self.session.graph.set_extra_groups(groups)
        self.graph.view.set_frames(groups)
        self.graph.view.relayout()

    def set_graph_overlay(self, colors, muted=(), introduced=()) -> None:
        """Parity colours on the graph (``muted``: faded; ``introduced``: outlined)."""
        self.graph.view.set_overlay(colors, muted=muted, introduced=introduced)

    def set_graph_marks(self, kind: str, ids) -> None:
        """Mark these nodes in the graph (``nan``, ``first``, ``kernel``, ``bp``)."""
        self.graph.view.set_marks(kind, ids)

    def show_details(self, details) -> None:
        """Show ``details`` (a NodeDetails, e.g. both sides of a live node) in the Inspector."""
        self.inspector.show_details(details)

    def show_own_details(self) -> None:
        """The Inspector back to the open tape's own arrays of the selection."""
        s = self.session
        if s is not None and 0 <= self.selected < len(s.tape):
            self.inspector.show_details(s.details(self.selected))

    def set_inspector_note(self, text: str) -> None:
        """A one-line note in the Inspector (e.g. "fetching node #3 …")."""
        self.inspector.set_note(text)

    def inspector_shows(self) -> tuple[int, int | None] | None:
        """(node id, step) of the arrays the Inspector shows now (step None: the window's own
        recording), or None when it shows no node's details."""
        d = self.inspector.details
        return None if d is None else (d.id, d.step)

    def set_inspector_action(self, text: str = "", tip: str = "", fn=None) -> None:
        """A button under the Inspector's note (``fn`` None: disabled, ``tip`` says why)."""
        self.inspector.set_action(text, tip, fn)

    # ---- recent files -----------------------------------------------------------------------
    def recent_files(self) -> list[str]:
        """Most recent first."""
        v = self.settings.value("recent", [])
        if isinstance(v, str):
            v = [v]
        return [str(p) for p in (v or [])]

    def _add_recent(self, path: str) -> None:
        items = [path] + [p for p in self.recent_files() if p != path]
        self.settings.setValue("recent", items[:MAX_RECENT])
        self._refresh_recent()

    def _refresh_recent(self) -> None:
        if self.recent_menu is None:
            return
        self.recent_menu.clear()
        for p in self.recent_files():
            a = QAction(p, self.recent_menu)
            a.triggered.connect(lambda _=False, p=p: self.open_file(p))
            self.recent_menu.addAction(a)
        self.recent_menu.setEnabled(bool(self.recent_files()))

    def closeEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        self.live.close()  # the worker process ends with the window
        self.window_layout.save()
        super().closeEvent(ev)
        gui_gc.release(self)

    # ---- drag and drop ----------------------------------------------------------------------
    def dragEnterEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        if ev.mimeData().hasUrls() and any(u.isLocalFile() for u in ev.mimeData().urls()):
            ev.acceptProposedAction()

    def dropEvent(self, ev) -> None:  # noqa: N802 (Qt override)
        for u in ev.mimeData().urls():
            if u.isLocalFile():
                self.open_file(u.toLocalFile())
                ev.acceptProposedAction()
                return

    # ---- selection --------------------------------------------------------------------------
    @Slot(int)
    def select_node(self, node_id: int) -> None:
        """Make ``node_id`` the selection in every panel."""
        if self.session is None or self._fanning or not (0 <= node_id < len(self.session.tape)):
            return
        self._fanning = True
        if not self._walking and (self.trail_pos < 0 or self.trail[self.trail_pos] != node_id):
            del self.trail[self.trail_pos + 1:]  # a new visit drops the forward part
            self.trail.append(node_id)
            self.trail_pos = len(self.trail) - 1
        try:
            self.selected = node_id
            self.graph.view.select_node(node_id)
            self.parity.select_node(node_id)
            self.stepper_panel.set_selected(node_id)
            try:
                details = self.session.details(node_id)
            except TapeFileError as e:  # a block of a lazily read tape failed its check
                self.show_error("Cannot read the tape", str(e))
                details = None
            self.inspector.show_details(details)
        finally:
            self._fanning = False
        self.node_selected.emit(node_id)

    def node_tip(self, node_id: int) -> str:
        """A graph box's hover text: the node, and its parity row in the table's numbers."""
        s = self.session
        if s is None or not 0 <= node_id < len(s.tape):
            return ""
        nd = s.tape.nodes[node_id]
        text = f"#{node_id} {nd.op} {nd.name or ''}\nshape {shape_text(nd.shape)}"
        row = self.parity.model.row_of(node_id)
        line = parity_line(self.parity.model.row_data(row)) if row >= 0 else ""
        return f"{text}\n{line}" if line else text

    def go_back(self) -> bool:
        """Select the node visited before this one (Alt+Left, the mouse's back button)."""
        return self._walk(-1)

    def go_forward(self) -> bool:
        """Select the node visited after this one again (Alt+Right, the forward button)."""
        return self._walk(1)

    def _walk(self, step: int) -> bool:
        k = self.trail_pos + step
        if not 0 <= k < len(self.trail):
            return False
        self.trail_pos = k
        self._walking = True
        try:
            self.select_node(self.trail[k])
        finally:
            self._walking = False
        return True

    def alarms(self) -> list[int]:
        """NaN/inf alarms, tape order: in a live session those of the shown step (a non-finite
        only one side holds, or one a node produced), else the nodes of the open tape that
        produced a NaN/inf from finite inputs. An infinity passed along (the causal mask) is
        data, not an alarm (app.step_history.produced_nonfinite)."""
        travel = getattr(getattr(self, "live", None), "travel", None)
        if travel is not None and travel.history is not None and travel.view_step > 0:
            return travel.history.alarms(travel.view_step)
        s = self.session
        return [] if s is None else s.produced_nonfinite()

    @Slot()
    def jump_to_first_nan(self) -> None:
        """Select the first NaN/inf alarm: the first node that produced one (tape order)."""
        if self.session is None:
            return
        bad = self.alarms()
        if not bad:
            held = self.session.first_nonfinite()
            self.statusBar().showMessage(
                "No NaN/inf alarm: nothing produced one" + (
                    f" (node #{held} holds an inf or NaN both sides agree on, or one it was "
                    "given: data, such as a mask)" if held is not None else ""), 5000)
            return
        self.select_node(bad[0])
        self.statusBar().showMessage(f"First NaN/inf produced: node #{bad[0]}", 5000)

    @Slot(int)
    def _run_to(self, node_id: int) -> None:
        self.select_node(node_id)
        self.stepper_panel.run_to_selected()

    @Slot(int)
    def _stepper_moved(self, node_id: int) -> None:
        # the stepper's node becomes the one selection (it used to move the graph's outline
        # only, so the Inspector and the table still showed the node clicked before, issue 25)
        self.graph.view.set_current(node_id)
        if node_id >= 0:
            self.select_node(node_id)

    def _status(self, alarms: list[int] | None = None) -> None:
        s = self.session
        if s is None:
            return
        bad = len(s.nonfinite())
        loss = f"loss #{s.loss_id}" if s.loss_id is not None else "no loss (forward only)"
        why = s.meta.get("import_error")
        hover = ""
        if why and s.loss_id is None:  # an ONNX model with an op that has no tape form
            short = str(why).split(": ", 1)[1] if str(why).startswith(f"{s.source}: ") else why
            loss = f"forward only, cannot train: {cut(short, 240)}"
            hover = (f"{why}\n\nStill works: every node's forward value (select a node; "
                     "Inspector, histograms, NaN search). Needs a tape form for every op: "
                     "gradients, the backward stepper, live training and parity "
                     "(docs/onnx-coverage.md).")
            # (a rich-text label; the reason holds names from a file: cut and escaped)
            self.stepper_panel.where.setText(f"Nothing to step: cannot train ({html(short, 240)}). "
                                             "Forward values are shown for every node.")
        self.status_label.setToolTip(tip(hover))
        # what produced one, not what holds one
        made = len(self.alarms() if alarms is None else alarms) if bad else 0
        finite = (f"⚠ {count_text(made)} NaN/inf alarm{'s' if made != 1 else ''} "
                  f"({count_text(bad)} nodes hold one)" if made else
                  f"{count_text(bad)} nodes hold an inf/NaN they were given (data)" if bad
                  else "all finite")
        poisoned = "" if getattr(s.tape, "ok", True) else f" · ⚠ poisoned: {cut(s.tape.error, 240)}"
        self.status_label.setText(f"{s.source} · {count_text(len(s.tape))} nodes · "
                                  f"{count_text(len(s.tape.params()))} params · {loss} · "
                                  f"{finite}{poisoned}")

    # ---- screenshot -------------------------------------------------------------------------
    def wait_until_ready(self, timeout_s: float = 10.0) -> bool:
        """Process events until the graph layout is on screen and a live session's node
        requests are answered (for screenshots and tests)."""
        import time

        from PySide6.QtCore import QCoreApplication

        def ready() -> bool:
            lv = self.live.live
            return self.graph.view.is_ready() and not (lv is not None and lv.pending)

        end = time.monotonic() + timeout_s
        while not ready() and time.monotonic() < end:
            QCoreApplication.processEvents()
            time.sleep(0.002)
        QCoreApplication.processEvents()
        return ready()
