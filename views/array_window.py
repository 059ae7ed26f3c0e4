"""A drawing of the Inspector opened large: double-click a heatmap, a line or bars.

The Inspector's drawings share a ~600 px dock with the statistics and the tabs; the reference /
candidate maps of a live node were ~45 px tall, their axis and colour-bar labels overprinted
(issue 25). Double-click one and it opens here, in its own resizable window, with the same
array, the same colour scale and the same slice; the dock keeps its layout.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QLabel, QVBoxLayout

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.views.models.plain import html

SIZE = (900, 700)


class ArrayWindow(QDialog):
    """One array, large: its own ArrayView over a copy of the small one's state."""

    def __init__(self, source, parent=None):
        super().__init__(parent)
        self.setAttribute(Qt.WA_DeleteOnClose, True)
        title = source.title or "array"
        shape = "×".join(str(d) for d in source.array.shape) if source.array is not None else ""
        self.setWindowTitle(f"tapescope — {title} {shape}".rstrip())
        self.view = type(source)(title, self)  # an ArrayView (not imported: no cycle)
        if source.ulp_scale:
            self.view.use_ulp_scale()
        self.view.set_array(source.array)
        for mine, theirs in zip(self.view.spins, source.spins, strict=True):
            mine.setValue(theirs.value())  # the slice the small one shows
        self.caption = QLabel(f"<b>{html(title)}</b> {shape}", self)
        lay = QVBoxLayout(self)
        lay.addWidget(self.caption)
        lay.addWidget(self.view, 1)
        self.resize(*SIZE)
