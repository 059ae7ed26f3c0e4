"""Open an ONNX model behind a progress dialog with Cancel (the Qt side of ``app.onnx_view``).

Apart from ``app.onnx_view`` (Qt-free, used by ``app.session``) so that neither imports the
other's importer: ``app.session`` → ``app.onnx_view``, and this module → ``app.session``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.app.qt.progress_dialog import run_with_progress
from tapescope.app.session import SessionError, open_onnx_file


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
    """Open an ONNX model on a worker thread behind a progress dialog with Cancel
    (``app.qt.progress_dialog.run_with_progress``).

    Cancel stops the executor between nodes and loop iterations; the result is the
    ``app.session.Session``, or a ``SessionError`` (also for a cancelled open: "cancelled").
    The Qt event loop keeps running meanwhile, so the window stays responsive. ``limits``
    (core.onnx.Limits) raises or lowers the executor's budgets for this model.
    """
    cancel = _CountingCancel()
    name = os.path.basename(os.fspath(path))
    try:
        return run_with_progress(
            parent, "Opening ONNX model", f"Running {name}…",
            lambda: open_onnx_file(path, cancel=cancel, limits=limits), show_after_ms,
            name="onnx_progress", cancel=cancel,
            label=lambda elapsed: (f"Running {name}… {cancel.steps} nodes and iterations, "
                                   f"{elapsed:.1f} s"))
    except SessionError:
        raise
    except Exception as err:  # noqa: BLE001 - any failure of the open is the file's error
        raise SessionError(f"{path}: {type(err).__name__}: {err}") from None
