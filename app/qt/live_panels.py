"""Two small pieces of the live session's GUI: the watchdog bar and the worker's log window.

``WatchdogBar`` sits in the status bar, hidden until the worker owes an answer and has said
nothing for a while ("no answer from the worker for N s"), with Stop (after the step, if it
ever ends) and Kill (its whole process group, now). ``LogWindow`` shows what the workload wrote
to fd 1 and fd 2 (a bounded tail; Live ▸ Worker log).
"""

from __future__ import annotations

from PySide6.QtCore import Slot
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)

LOG_BLOCKS = 5000  # lines the log window keeps (the session keeps its own bounded tail)


class WatchdogBar(QWidget):
    """"no answer from the worker for N s" with Stop and Kill; hidden while the worker answers."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.label = QLabel(self)
        self.label.setStyleSheet("color: #b35900; font-weight: bold")
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setToolTip("Stop after the step in flight (if it ever returns)")
        self.kill_button = QPushButton("Kill", self)
        self.kill_button.setToolTip("End the worker process and everything it started, now")
        for w in (self.label, self.stop_button, self.kill_button):
            lay.addWidget(w)
        self.hide()

    @Slot(float)
    def silent_for(self, seconds: float) -> None:
        """Show (or update) the warning."""
        self.label.setText(f"no answer from the worker for {seconds:.0f} s")
        self.show()


class LogWindow(QDialog):
    """What the live worker's workload printed (fd 1 and fd 2), newest last."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Worker log")
        self.resize(760, 420)
        self.text = QPlainTextEdit(self)
        self.text.setReadOnly(True)
        self.text.setMaximumBlockCount(LOG_BLOCKS)
        self.text.setFont(QFont("monospace"))
        self.text.setPlaceholderText("Nothing printed by the live worker yet.")
        lay = QVBoxLayout(self)
        lay.addWidget(self.text)
        self.lines = 0

    @Slot(list)
    def append(self, lines: list) -> None:
        """Add lines (each already cut to a bounded length by the session)."""
        if lines:
            self.text.appendPlainText("\n".join(lines))
            self.lines += len(lines)

    def clear(self) -> None:
        """A new session: start empty."""
        self.text.clear()
        self.lines = 0
