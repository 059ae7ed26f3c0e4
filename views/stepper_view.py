"""The Backward stepper dock: a debugger over ``BackwardStepper`` (views.models.stepper_model)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views.array_view import ArrayView
from tapescope.views.models.array_stats import format_number
from tapescope.views.models.plain import cut, html

# debugger-like keys: F11 step, Shift+F11 step back, F5 continue, Ctrl+F10 run to selected,
# F9 breakpoint on the selected node, Ctrl+Shift+F5 restart
SHORTCUTS = {"step": "F11", "back": "Shift+F11", "continue": "F5", "run_to": "Ctrl+F10",
             "breakpoint": "F9", "restart": "Ctrl+Shift+F5"}


def _summary(a: np.ndarray | None) -> str:
    if a is None:
        return "—"
    a = np.asarray(a)
    if a.size == 1:
        return format_number(float(a.reshape(())))
    # two lines: on one, "Σ -0.09799 · max|·| …" hid the max in a 120 px column (issue 25)
    return f"Σ {float(a.sum()):.4g}\nmax|·| {float(np.abs(a).max()):.3g}"


class StepperPanel(QWidget):
    """Toolbar, current node, incoming gradient and one row per contribution pushed."""

    node_selected = Signal(int)
    current_changed = Signal(int)  # the current node id (-1 before the first step)
    breakpoints_changed = Signal(object)  # set of node ids

    def __init__(self, parent=None):
        super().__init__(parent)
        self.stepper = None
        self.selected_node = -1
        self.toolbar = QToolBar(self)
        self.actions: dict[str, QAction] = {}
        # NOTE: named "backward …", not "Step": the Live toolbar trains one step; these walk
        # one backward pass node by node
        for key, text, tip, fn in (
                ("restart", "⟲ Backward restart", "Backward stepper: start over from the loss",
                 self.restart),
                ("back", "◀ Backward: previous node", "Backward stepper: show the previous node "
                 "again", self.step_back),
                ("step", "Backward: next node ▶", "Backward stepper: one node further back",
                 self.step),
                ("run_to", "Backward: run to selected", "Backward stepper: run until the "
                 "selected node", self.run_to_selected),
                ("continue", "Backward: continue ▶▶", "Backward stepper: run to the next "
                 "breakpoint or the end", self.continue_),
                ("breakpoint", "● Breakpoint", "Backward stepper: toggle a breakpoint on the "
                 "selected node", self.toggle_breakpoint)):
            a = QAction(text, self)
            a.setShortcut(QKeySequence(SHORTCUTS[key]))
            a.setShortcutContext(Qt.WindowShortcut)
            a.setToolTip(f"{tip} ({SHORTCUTS[key]})")
            a.triggered.connect(fn)
            self.toolbar.addAction(a)
            self.actions[key] = a
        self.where = QLabel("Open a tape to step through its backward pass.", self)
        self.where.setTextFormat(Qt.RichText)
        self.where.setWordWrap(True)  # a long node name must not widen the window
        # (nor a name without spaces: the line takes the dock's width and clips)
        self.where.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        # which recording's backward this walks (a live session's steps are not this one)
        self.walks = QLabel("", self)
        self.walks.setWordWrap(True)
        self.walks.setTextFormat(Qt.PlainText)
        self.walks.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.walks.hide()
        self.incoming = ArrayView("incoming gradient", self)
        self.contrib_view = ArrayView("contribution", self)
        self.table = QTableWidget(0, 5, self)
        self.table.setHorizontalHeaderLabels(
            ["input", "contribution", "before", "after", "sum check"])
        # the numbers as wide as they are (never elided), the input's name takes the rest
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(True)
        self.table.verticalHeader().setDefaultSectionSize(2 * self.fontMetrics().height() + 6)
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.currentCellChanged.connect(self._row_changed)
        self.table.cellDoubleClicked.connect(self._row_activated)
        views = QHBoxLayout()
        left, right = QVBoxLayout(), QVBoxLayout()
        left.addWidget(QLabel("incoming gradient (fully accumulated)", self))
        left.addWidget(self.incoming, 1)
        right.addWidget(QLabel("selected contribution", self))
        right.addWidget(self.contrib_view, 1)
        views.addLayout(left, 1)
        views.addLayout(right, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.toolbar)
        lay.addWidget(self.walks)
        lay.addWidget(self.where)
        lay.addWidget(self.table, 1)
        lay.addLayout(views, 2)
        self._labels: dict[int, str] = {}
        self._refresh()

    def set_stepper(self, stepper, labels: dict[int, str]) -> None:
        """Drive a new BackwardStepper; ``labels`` maps node id → "op name" for display."""
        if self.stepper is not None and self._refresh in self.stepper.listeners:
            self.stepper.listeners.remove(self._refresh)
        self.stepper = stepper
        self._labels = labels
        if stepper is not None:
            stepper.listeners.append(self._refresh)
        self._refresh()

    # ---- commands (also the keyboard shortcuts) ---------------------------------------------
    def _run(self, command, *args):
        """Run a stepper command; a failing sweep (e.g. a poisoned tape) is shown, not raised."""
        if self.stepper is None:
            return None
        try:
            return command(*args)
        except Exception as e:  # noqa: BLE001 — the tape's error is the user's information
            self.where.setText(f"<b style='color:#92400e'>backward failed:</b> "
                               f"{html(f'{type(e).__name__}: {e}', 400)}")
            return None

    @Slot()
    def step(self) -> None:
        """One node further back."""
        if self.stepper is not None:
            self._run(self.stepper.step)

    @Slot()
    def step_back(self) -> None:
        """Show the previous node again."""
        if self.stepper is not None:
            self._run(self.stepper.step_back)

    @Slot()
    def restart(self) -> None:
        """Start over from the loss."""
        if self.stepper is not None:
            self._run(self.stepper.restart)

    @Slot()
    def continue_(self) -> None:
        """Run to the next breakpoint or the end."""
        if self.stepper is not None:
            self._run(self.stepper.continue_)

    @Slot()
    def run_to_selected(self) -> None:
        """Run until the node selected elsewhere is the current one."""
        if self.stepper is not None and self.selected_node >= 0:
            if self._run(self.stepper.run_to, self.selected_node) is False:
                self.where.setText(self.where.text() + f"<br><i>#{self.selected_node} pushes no"
                                   " gradient: ran to the end</i>")

    @Slot()
    def toggle_breakpoint(self, node_id: int | None = None) -> None:
        """Toggle a breakpoint on ``node_id`` (default: the selected node)."""
        nid = self.selected_node if node_id is None or node_id is False else node_id
        if self.stepper is not None and nid >= 0:
            self.stepper.toggle_breakpoint(nid)
            self.breakpoints_changed.emit(set(self.stepper.breakpoints))

    @Slot(int)
    def set_walks(self, text: str) -> None:
        """Say which recording's backward the stepper walks (e.g. "the window's own recording,
        step 0 ..., not the live session's step 366"); empty hides the line."""
        self.walks.setText(text)
        self.walks.setToolTip(text)
        self.walks.setVisible(bool(text))

    def set_selected(self, node_id: int) -> None:
        """The node selected in another panel (target of run-to and breakpoints)."""
        self.selected_node = node_id

    # ---- display ----------------------------------------------------------------------------
    def _label(self, i: int) -> str:
        """``#id op name``, the name cut (views.models.plain): for the table's plain cells."""
        return f"#{i} {cut(self._labels.get(i, ''))}"

    def _html_label(self, i: int) -> str:
        """``_label`` escaped, for the rich-text ``where`` line."""
        return f"#{i} {html(self._labels.get(i, ''))}"

    def _refresh(self) -> None:
        s = self.stepper
        ev = s.current if s is not None else None
        for a in self.actions.values():
            a.setEnabled(s is not None)
        if s is None:
            self.where.setText("Nothing to step: this session has no loss (forward only)."
                               if self._labels else
                               "Open a tape to step through its backward pass.")
            self.table.setRowCount(0)
            self.incoming.set_array(None)
            self.current_changed.emit(-1)
            return
        self.actions["back"].setEnabled(s.pos >= 0)
        self.actions["step"].setEnabled(not s.at_end)
        if ev is None:
            self.where.setText(f"Ready: backward from the loss {self._html_label(s.loss_id)}. "
                               f"Press Backward: next node ({SHORTCUTS['step']}).")
            self.table.setRowCount(0)
            self.incoming.set_array(None)
            self.contrib_view.set_array(None)
            self.current_changed.emit(-1)
            return
        bp = " ● breakpoint" if ev.node.id in s.breakpoints else ""
        end = " — <b>backward complete</b>" if s.at_end else ""
        # "backward node k", not "step k": the window's "step" is a training step (scrubber)
        self.where.setText(f"backward node {s.pos + 1:,}: <b>{self._html_label(ev.node.id)}</b>"
                           f"{bp}{end}")
        self.incoming.set_array(ev.grad)
        self.table.setRowCount(len(ev.contributions))
        for r, c in enumerate(ev.contributions):
            before = c.before
            # the fan-out sum must add up bit for bit: after == before + contribution
            expect = (c.value + np.zeros_like(c.value)) if before is None else before + c.value
            ok = np.array_equal(expect, c.after, equal_nan=True)
            cells = [self._label(c.input_id), _summary(c.value),
                     "— (first)" if before is None else _summary(before),
                     _summary(c.after), "✓ adds up" if ok else "✗ differs"]
            for col, text in enumerate(cells):
                it = QTableWidgetItem(text)
                it.setData(Qt.UserRole, c.input_id)
                self.table.setItem(r, col, it)
        if ev.contributions:
            self.table.setCurrentCell(0, 0)
            self.contrib_view.set_array(ev.contributions[0].value)
        else:
            self.contrib_view.set_array(None)
        self.current_changed.emit(ev.node.id)

    @Slot(int, int, int, int)
    def _row_changed(self, row: int, _c: int, _pr: int, _pc: int) -> None:
        s = self.stepper
        if s is None or s.current is None or not (0 <= row < len(s.current.contributions)):
            return
        self.contrib_view.set_array(s.current.contributions[row].value)

    @Slot(int, int)
    def _row_activated(self, row: int, _col: int) -> None:
        it = self.table.item(row, 0)
        if it is not None:
            self.node_selected.emit(int(it.data(Qt.UserRole)))
