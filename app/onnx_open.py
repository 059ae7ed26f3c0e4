"""Open an ONNX model behind a progress dialog with Cancel (the Qt side of ``app.onnx_view``).

Apart from ``app.onnx_view`` (Qt-free, used by ``app.session``) so that neither imports the
other's importer: ``app.session`` → ``app.onnx_view``, and this module → ``app.session``.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from PySide6.QtCore import QEventLoop, Qt, QTimer
from PySide6.QtWidgets import QProgressDialog

import views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from app.session import SessionError, open_onnx_file


class _CountingCancel(threading.Event):
    """A cancel event that counts how often the executor asked (once per node and per loop
    iteration): the progress dialog shows that count, the executor needs nothing more."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def is_set(self) -> bool:
        self.steps += 1
        return super().is_set()


def open_onnx_with_progress(parent, path: str | os.PathLike, show_after_ms: int = 300,
                            limits: Any = None):
    """Open an ONNX model on a worker thread behind a progress dialog with Cancel.

    Cancel stops the executor between nodes and loop iterations; the result is the
    ``app.session.Session``, or a ``SessionError`` (also for a cancelled open: "cancelled").
    The Qt event loop keeps running meanwhile, so the window stays responsive. ``limits``
    (core.onnx.Limits) raises or lowers the executor's budgets for this model.
    """
    cancel = _CountingCancel()
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["session"] = open_onnx_file(path, cancel=cancel, limits=limits)
        except BaseException as exc:  # noqa: BLE001 - handed to the GUI thread as is
            result["error"] = exc

    name = os.path.basename(os.fspath(path))
    dlg = QProgressDialog(f"Running {name}…", "Cancel", 0, 0, parent)
    dlg.setObjectName("onnx_progress")
    dlg.setWindowTitle("Opening ONNX model")
    dlg.setWindowModality(Qt.WindowModal)
    dlg.setMinimumDuration(show_after_ms)
    dlg.canceled.connect(cancel.set)
    dlg.setValue(0)  # starts the show-after timer
    worker = threading.Thread(target=work, name="onnx-open", daemon=True)
    loop = QEventLoop()
    t0 = time.perf_counter()

    def poll() -> None:
        if not worker.is_alive():
            loop.quit()
        elif dlg.wasCanceled():  # (cancel() called on the dialog emits no canceled signal)
            cancel.set()
        elif not threading.Event.is_set(cancel):  # (not counted as a step)
            dlg.setLabelText(f"Running {name}… {cancel.steps} nodes and iterations, "
                             f"{time.perf_counter() - t0:.1f} s")

    timer = QTimer()
    timer.setInterval(50)
    timer.timeout.connect(poll)
    worker.start()
    timer.start()
    loop.exec()
    timer.stop()
    worker.join()
    dlg.reset()
    dlg.deleteLater()
    if "error" in result:
        err = result["error"]
        if isinstance(err, SessionError):
            raise err
        raise SessionError(f"{path}: {type(err).__name__}: {err}") from None
    return result["session"]
