"""Progress dialogs with Cancel for long work in the window (issue 30): what runs, how far, how
long, and a Cancel that stops the work or says plainly what it cannot stop.

- ``StartupProgress``: while a live session opens its pair in the worker process (a model's
  import, the first kernel compile on a cold cache: up to a minute), the worker's ``progress``
  messages (``core.progress`` events, ``app.live_worker``) drive a non-modal dialog, so the
  window stays usable. Cancel ends the worker's whole process group (the compiler with it);
  the window keeps its session and Start begins again.
- ``run_with_progress``: a load on a thread behind a window-modal dialog (``open_with_progress``:
  a big ``.tape``). The tape reader has no cancel point, so Cancel abandons the load (its
  result is dropped when it ends) and says so; the window is usable at once.
- ``prepare_native``: the window process's own first compile (refmath's C kernels, before the
  first workload opens); Cancel goes on without them (numpy's reference, the same bits) while
  the build finishes in the background for the next run.

``app.qt.onnx_open`` is the ONNX model's own dialog (its executor stops at Cancel between nodes).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEventLoop, QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QProgressDialog

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)
from tapescope.app.qt.live import FAILED, STOPPED
from tapescope.app.session import Session, SessionError, open_path

NEVER_MS = 1 << 30  # QProgressDialog's own show-after timer: never (we show it ourselves)


def _dialog(parent, title: str, label: str, name: str) -> QProgressDialog:
    # NOTE: the label is made empty, then plain: a file's name, a worker's words are never
    # markup (given to the constructor, "<img src=...>" was read as HTML at once; issue 49)
    dlg = QProgressDialog("", "Cancel", 0, 0, parent)
    plain = QLabel(dlg)
    plain.setTextFormat(Qt.PlainText)
    dlg.setLabel(plain)
    dlg.setLabelText(label)
    dlg.setObjectName(name)
    dlg.setWindowTitle(title)
    dlg.setAutoReset(False)
    dlg.setAutoClose(False)
    dlg.setMinimumDuration(NEVER_MS)
    dlg.setMinimumWidth(460)
    dlg.hide()
    return dlg


def _how_far(msg: dict, elapsed: float) -> str:
    done, total = msg.get("done", 0), msg.get("total")
    far = f"{done} of {total} · " if total else (f"{done} done · " if done else "")
    return f"{msg['what']}\n{far}{elapsed:.0f} s"


class StartupProgress(QObject):
    """The live session's opening, shown after ``show_after_ms`` if it is not ready by then."""

    changed = Signal()  # label() says something new (a task began or ended, a second passed)

    def __init__(self, win, live, cancel: Callable[[], None], show_after_ms: int = 500) -> None:
        super().__init__(live)  # goes with the session
        self.win, self.live, self._cancel = win, live, cancel
        self.tasks: dict[str, tuple[dict, float]] = {}  # what -> (last message, when heard)
        self.t0 = time.monotonic()
        self.finished = self.cancelled = False
        name = os.path.basename((live.config.workload or "mlp").split("::")[0])
        self.dialog = _dialog(win, "Starting the live session",
                              f"Opening {name} on {live.config.device}…", "live_progress")
        self.dialog.setWindowModality(Qt.NonModal)  # the graph and tables stay usable
        self.dialog.canceled.connect(self._on_cancel)
        live.progress.connect(self._on_progress)
        live.ready.connect(self.finish)
        live.failed.connect(self.finish)
        live.state_changed.connect(self._on_state)
        self._tick = QTimer(self)
        self._tick.setInterval(200)
        self._tick.timeout.connect(self._refresh)
        self._tick.start()
        QTimer.singleShot(show_after_ms, self, self._show)

    def label(self) -> str:
        """What the dialog says now: the innermost work running, how far, how long."""
        now = time.monotonic()
        if not self.tasks:
            return f"{self.dialog.labelText().splitlines()[0]}\n{now - self.t0:.0f} s"
        running = list(self.tasks.values())
        msg, heard = running[-1]
        text = _how_far(msg, msg.get("elapsed", 0.0) + now - heard)
        if len(running) > 1:  # what it is part of: "opening mlp on host: 14 s"
            outer, heard = running[0]
            text += f" · {outer['what']}: {outer.get('elapsed', 0.0) + now - heard:.0f} s"
        return text

    def _show(self) -> None:
        if not self.finished:
            self._refresh()
            self.dialog.show()

    def _on_progress(self, msg: dict) -> None:
        what = str(msg.get("what", ""))
        if msg.get("event") == "end":
            self.tasks.pop(what, None)
        else:
            self.tasks[what] = (msg, time.monotonic())
        self._refresh()

    def _refresh(self) -> None:
        if self.finished:
            return
        self.dialog.setLabelText(self.label())
        self.changed.emit()
        msg = list(self.tasks.values())[-1][0] if self.tasks else {}
        total = msg.get("total")
        if total:
            self.dialog.setRange(0, int(total))
            self.dialog.setValue(min(int(msg.get("done", 0)), int(total)))
        else:
            self.dialog.setRange(0, 0)  # busy: a compile has no "how far"

    def _on_state(self, state: str) -> None:
        if state in (STOPPED, FAILED):
            self.finish()

    def _on_cancel(self) -> None:
        if self.finished:
            return
        what = self.label().splitlines()[0]
        self.cancelled = True
        self.finish()
        self._cancel()  # ends the worker's process group: a compiler running in it too
        self.win.set_status(f"cancelled: {what} (the worker was ended; Start runs it again, "
                            "and a compile starts over: nothing half-built is used)", 15000)

    def finish(self, *_: Any) -> None:
        """The session is ready, failed or stopped: the dialog goes."""
        if self.finished:
            return
        self.finished = True
        self._tick.stop()
        self.dialog.hide()
        self.dialog.deleteLater()
        self.changed.emit()  # the state label goes back to the session's own state


class Cancelled(SessionError):
    """The user cancelled a load behind ``run_with_progress``."""


def run_with_progress(parent, title: str, what: str, fn: Callable[[], Any],
                      show_after_ms: int = 300, cannot_stop: str = "",
                      name: str = "load_progress", cancel: threading.Event | None = None,
                      label: Callable[[float], str] | None = None) -> Any:
    """``fn()`` on a thread behind a window-modal dialog with Cancel; its result, or its
    exception. The Qt event loop runs meanwhile.

    Without ``cancel``, ``fn`` has no cancel point: Cancel returns at once with ``Cancelled``
    (saying ``cannot_stop``) and the thread's result is dropped. With it, Cancel sets the event
    and waits for ``fn`` to stop at its next cancel point (``fn`` then raises, and that error is
    what comes back). ``label(elapsed)`` is the dialog's text while it runs."""
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the GUI thread as is
            result["error"] = exc

    dlg = _dialog(parent, title, what, name)
    dlg.setWindowModality(Qt.WindowModal)
    worker = threading.Thread(target=work, name=name, daemon=True)
    loop = QEventLoop()
    t0 = time.perf_counter()
    text = label or (lambda elapsed: f"{what}\n{elapsed:.0f} s")
    dlg.canceled.connect(loop.quit if cancel is None else cancel.set)

    def poll() -> None:
        if not worker.is_alive():
            loop.quit()
            return
        if cancel is not None and dlg.wasCanceled():  # (cancel() on the dialog emits nothing)
            cancel.set()
        if cancel is None or not threading.Event.is_set(cancel):
            elapsed = time.perf_counter() - t0
            dlg.setLabelText(text(elapsed))
            if elapsed * 1000 >= show_after_ms and not dlg.isVisible():
                dlg.show()

    timer = QTimer()
    timer.setInterval(50 if cancel is not None else 100)
    timer.timeout.connect(poll)
    # (no collection runs on the thread, an abandoned one included: the window holds
    # app.qt.gui_gc, and cyclic garbage is collected on the GUI thread only)
    worker.start()
    timer.start()
    loop.exec()
    timer.stop()
    if cancel is not None:
        worker.join()
    cancelled = worker.is_alive()
    dlg.hide()
    dlg.deleteLater()
    if cancelled:
        raise Cancelled(f"cancelled: {what}" + (f" ({cannot_stop})" if cannot_stop else ""))
    if "error" in result:
        raise result["error"]
    return result["value"]


def prepare_native(parent, show_after_ms: int = 500) -> bool:
    """Load refmath's native kernels (``core.native``), building them first on a cold cache
    (a minute of gcc on a busy machine, before the window could open anything), on a thread
    behind a dialog. False when cancelled: this session then runs numpy's reference (the same
    bits, slower) while the build finishes in the background and is cached for the next."""
    from tapescope.core import native

    def build() -> None:
        native.library()
        native.refmath_ext()

    try:
        run_with_progress(parent, "Preparing tapescope",
                          "Compiling refmath's C kernels (first run only, cached after)", build,
                          show_after_ms, name="native_progress")
    except Cancelled:
        native.defer()
        if parent is not None and hasattr(parent, "set_status"):
            parent.set_status("refmath's C kernels compile in the background for the next run; "
                              "this session uses numpy's reference (the same bits, slower)",
                              15000)
        return False
    return True


def open_with_progress(parent, path: str | os.PathLike) -> Session:
    """``app.session.open_path``; a ``.tape`` (read and differentiated) on a thread behind a
    progress dialog. Other files open as ``open_path`` opens them."""
    low = os.fspath(path).lower()
    if not low.endswith((".tape", ".npz")):
        return open_path(path)
    from tapescope.core.progress import file_label

    def load() -> Session:
        s = open_path(path)
        s.ensure_gradients()  # the backward pass of a big tape is part of opening it
        return s

    return run_with_progress(
        parent, "Opening tape", file_label("Loading", path), load,
        cannot_stop="the tape reader cannot be stopped midway: it finishes in the background "
                    "and its result is dropped; the open session is kept")
