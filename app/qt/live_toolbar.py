"""The Live toolbar: the session's settings (device, dtype, math, compare, fuse) and actions.

A widget only: it shows a ``SessionConfig`` (``show_config``), reads one back
(``choices``), and enables its actions for a session state (``update_actions``). What the
actions do is the ``LiveController``'s (the callables it passes in).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QCheckBox, QComboBox, QLabel, QStyle, QToolBar

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.app.qt.live import PAUSED, RUNNING
from tapescope.app.runs import COMPARES, SessionConfig

# (attribute, icon, text) of the toolbar's actions, in order; None: a separator
ACTIONS = (("start", QStyle.SP_MediaPlay, "Start"), ("pause", QStyle.SP_MediaPause, "Pause"),
           ("step", QStyle.SP_MediaSkipForward, "Step"),
           ("resume", QStyle.SP_MediaSeekForward, "Resume"), ("stop", QStyle.SP_MediaStop, "Stop"),
           None, ("first", QStyle.SP_ArrowDown, "First divergence"),
           ("export", None, "Export report…"))


class LiveToolbar(QToolBar):
    """Settings boxes and the live actions (``act_<name>`` for each name in ACTIONS)."""

    def __init__(self, slots: dict[str, Callable[[], None]], parent=None) -> None:
        super().__init__("Live", parent)
        self.setObjectName("live_toolbar")
        import os

        from tapescope.app.torch_run import torch_available  # (finds torch without importing it)

        devices = {"host": "host", "cuda": "cuda", "auto": "auto"}
        if torch_available():  # PyTorch eager as the candidate (app.torch_run)
            devices["torch"] = "torch"  # PyTorch eager on the CPU (the tooltip says so)
            # NOTE: an NVIDIA driver, not torch.cuda: importing torch here would cost the
            # window seconds; the live worker says in one line when torch has no CUDA
            if os.path.exists("/proc/driver/nvidia"):
                devices["torch:cuda"] = "torch:cuda"
        self.device_box = self._combo(devices, "The candidate: tapescope's replay on a "
                                               "device backend, or PyTorch eager on the CPU "
                                               "(torch)")
        # "amp X": mixed precision (float32 masters, X computes; docs/reference-order.md)
        self.dtype_box = self._combo({"float64": "float64", "float32": "float32",
                                      "float16": "float16", "bfloat16": "bfloat16",
                                      "amp float16": "amp f16",  # short: the toolbar
                                      "amp bfloat16": "amp bf16"},  # fits 1280 px
                                     "dtype (stored; half types compute in float32), or mixed "
                                     "precision (amp)")
        self.math_box = self._combo({"refmath": "refmath", "platform": "platform libm"},
                                    "Math of the candidate (the reference is always refmath)")
        self.compare_box = self._combo(COMPARES, "Which two runs of the episode to compare")
        # NOTE: the boxes as wide as a short name (their lists show the whole text): at full
        # width the row overflowed a 1280 px window and hid Export report (issue 25)
        for box, chars in ((self.compare_box, 12), (self.math_box, 9)):
            box.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
            box.setMinimumContentsLength(chars)
            box.view().setMinimumWidth(box.view().sizeHintForColumn(0) + 24)
        self.fuse_box = QCheckBox("Fuse", self)
        self.fuse_box.setToolTip("Replay the fused plan (gpu.fusion)")
        # a torch candidate runs PyTorch's own ops: no fused plan, no libm choice
        self.device_box.currentIndexChanged.connect(self._device_changed)
        for label, w in (("Device", self.device_box), (None, self.fuse_box),
                         ("dtype", self.dtype_box), ("math", self.math_box),
                         ("compare", self.compare_box)):
            if label:
                # one space before, none after: styled (Fusion + style.qss, as the app runs) the
                # row measured 1297 px with both and hid Export report at 1280 (the tests ran
                # unstyled until a test left the app styled: issue 46 item 5); 1274 now
                self.addWidget(QLabel(f" {label}", self))
            self.addWidget(w)
        self.addSeparator()
        self.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        st = QApplication.style()
        for entry in ACTIONS:
            if entry is None:
                self.addSeparator()
                continue
            name, icon, text = entry
            a = (self.addAction(text, slots[name]) if icon is None else
                 self.addAction(st.standardIcon(icon), text, slots[name]))
            setattr(self, f"act_{name}", a)
        self.act_start.setToolTip("Start (or restart) a live session with these settings")
        self.act_first.setToolTip("Select the first node whose bits differ (tape order)")
        self.state_label = QLabel("no live session")  # the controller puts it in the status bar
        # (the first divergence names a node from the file: plain text, never markup)
        self.state_label.setTextFormat(Qt.PlainText)

    def is_torch(self) -> bool:
        """The device box names a PyTorch candidate."""
        return str(self.device_box.currentData()).startswith("torch")

    def _device_changed(self) -> None:
        torch = self.is_torch()
        self.fuse_box.setEnabled(not torch)
        self.math_box.setEnabled(not torch)

    def _combo(self, items: dict[str, str], tip: str) -> QComboBox:
        c = QComboBox(self)
        for key, text in items.items():
            c.addItem(text, key)
        c.setToolTip(tip)
        return c

    def show_config(self, c: SessionConfig) -> None:
        """Set the boxes to ``c``'s settings."""
        dt = f"amp {c.amp}" if c.amp else c.dtype
        for box, v in ((self.device_box, c.device), (self.dtype_box, dt),
                       (self.math_box, c.math), (self.compare_box, c.compare)):
            box.setCurrentIndex(max(0, box.findData(v)))
        self.fuse_box.setChecked(c.fuse)

    def choices(self) -> dict:
        """The boxes' settings, as ``SessionConfig.with_`` keywords (a torch candidate: no
        fuse, refmath; a replay: no torch settings)."""
        torch = self.is_torch()
        dt = self.dtype_box.currentData()
        amp = dt[4:] if dt.startswith("amp ") else None  # "amp X": mixed precision
        out = {"device": self.device_box.currentData(), "dtype": amp or dt, "amp": amp,
               "loss_scale": None,
               "math": "refmath" if torch else self.math_box.currentData(),
               "compare": self.compare_box.currentData(),
               "fuse": self.fuse_box.isChecked() and not torch}
        if not torch:
            out.update(torch_threads=None, tf32=None, deterministic=False,
                       torch_optimizer="tape")
        return out

    def update_actions(self, live: bool, state: str, exportable: bool) -> None:
        """Enable what a session in ``state`` can do (``live``: a session exists)."""
        live = live and state in (RUNNING, PAUSED)
        self.act_pause.setEnabled(live and state == RUNNING)
        self.act_step.setEnabled(live and state == PAUSED)
        self.act_resume.setEnabled(live and state == PAUSED)
        self.act_stop.setEnabled(live)
        self.act_export.setEnabled(exportable)
