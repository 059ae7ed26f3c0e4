"""The step scrubber: pick any past step of a live session; the whole window shows that step.

Plain steps in (``set_steps``: the stored step numbers, from 1), ``step_changed`` out. While
"follow" is on the scrubber moves to each new step as it arrives; moving it by hand turns
follow off, and ``End`` (or the ⇥ button) turns it back on.
"""

from __future__ import annotations

import bisect

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSlider, QSpinBox, QToolButton, QWidget

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views.models.numbers import count_text

# NOTE: Alt+PgUp/PgDown, not Alt+Left/Right: those go back and forward through the nodes
# visited, as in a browser, Netron or an IDE (app.qt.main_window)
SHORTCUTS = {"prev": "Alt+PgUp", "next": "Alt+PgDown", "latest": "Alt+End"}


class StepScrubber(QWidget):
    """Slider + spin box over the stored steps; emits ``step_changed(step)``."""

    step_changed = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.steps: list[int] = []
        self.follow = True
        self.current = -1
        # "training step", never bare "step": the Backward stepper walks the nodes of one
        # backward pass (its position is "backward node k"), this picks a step of training
        self.title = QLabel("training step", self)
        self.slider = QSlider(Qt.Horizontal, self)
        # (the row must fit 1280 px, and the label says "training step")
        self.slider.setMinimumWidth(140)
        self.slider.setToolTip("Scrub through the session's steps: the graph, parity table, "
                               "Inspector and Kernels dock all show the chosen step")
        self.spin = QSpinBox(self)
        self.spin.setMinimumWidth(80)
        self.spin.setGroupSeparatorShown(True)  # 4,488 as the status bar writes it (issue 46)
        self.spin.setToolTip("The training step shown (steps count from 1)")
        self.total = QLabel("of 0", self)
        self.actions: dict[str, QAction] = {}
        lay = QHBoxLayout(self)
        lay.setContentsMargins(4, 0, 4, 0)
        lay.addWidget(self.title)
        for key, glyph, text, fn in (
                ("prev", "◀", "Previous training step", self.previous),
                ("next", "▶", "Next training step", self.next),
                ("latest", "⇥", "Latest training step (follow the session)", self.latest)):
            a = QAction(text, self)  # the Live menu says it in words, the button in a glyph
            a.setIconText(glyph)
            tip = text
            a.setShortcut(QKeySequence(SHORTCUTS[key]))
            a.setShortcutContext(Qt.WindowShortcut)
            a.setToolTip(f"{tip} ({SHORTCUTS[key]})")
            a.triggered.connect(fn)
            self.addAction(a)
            self.actions[key] = a
            b = QToolButton(self)
            b.setDefaultAction(a)
            if key == "next":
                lay.addWidget(self.slider, 1)
            lay.addWidget(b)
            if key == "prev":
                lay.addWidget(self.spin)
                lay.addWidget(self.total)
        self.slider.valueChanged.connect(self._slider_moved)
        self.spin.valueChanged.connect(self._spin_moved)
        self.set_steps([])

    def set_steps(self, steps: list[int]) -> None:
        """The steps that can be shown (ascending); follows the latest while ``follow``."""
        self.steps = list(steps)
        n = len(self.steps)
        self.setEnabled(n > 0)
        self.total.setText(f"of {count_text(self.steps[-1] if n else 0)}")
        self._block(True)
        self.slider.setRange(0, max(0, n - 1))
        self.spin.setRange(self.steps[0] if n else 0, self.steps[-1] if n else 0)
        self._block(False)
        if not n:
            self.current = -1
            return
        if self.follow or self._nearest(max(self.current, 0)) != self.current:
            self.show_step(self.steps[-1] if self.follow or self.current < 0
                           else self._nearest(self.current), user=False)

    def _nearest(self, step: int) -> int:
        k = bisect.bisect_left(self.steps, step)  # the steps ascend; 10,000 of them stay cheap
        if k >= len(self.steps):
            return self.steps[-1]
        if k > 0 and step - self.steps[k - 1] <= self.steps[k] - step:
            return self.steps[k - 1]
        return self.steps[k]

    def _index(self, step: int) -> int:
        return bisect.bisect_left(self.steps, step)

    def _block(self, on: bool) -> None:
        self.slider.blockSignals(on)
        self.spin.blockSignals(on)

    def show_step(self, step: int, user: bool = True) -> None:
        """Show ``step`` (the nearest stored one); a user's move stops following the latest."""
        if not self.steps:
            return
        step = self._nearest(step)
        if user:
            self.follow = step == self.steps[-1] and self.follow
        self._block(True)
        self.slider.setValue(self._index(step))
        self.spin.setValue(step)
        self._block(False)
        self.title.setText("training step" if self.follow else "<b>training step</b>")
        if step != self.current:
            self.current = step
            self.step_changed.emit(step)

    @Slot(int)
    def _slider_moved(self, k: int) -> None:
        if 0 <= k < len(self.steps):
            self.follow = False
            self.show_step(self.steps[k])

    @Slot(int)
    def _spin_moved(self, v: int) -> None:
        self.follow = False
        self.show_step(v)

    @Slot()
    def previous(self) -> None:
        """One stored step back."""
        if self.steps and self.current >= 0:
            self.follow = False
            self.show_step(self.steps[max(0, self._index(self.current) - 1)])

    @Slot()
    def next(self) -> None:
        """One stored step on."""
        if self.steps and self.current >= 0:
            k = min(len(self.steps) - 1, self._index(self.current) + 1)
            self.follow = k == len(self.steps) - 1 and self.follow
            self.show_step(self.steps[k])

    @Slot()
    def latest(self) -> None:
        """Jump to the newest step and follow the session again."""
        self.follow = True
        if self.steps:
            self.show_step(self.steps[-1])
