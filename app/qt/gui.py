"""The desktop window of ``tapescope gui`` (app/qt: Qt from here on): the QApplication and its
MainWindow, the live session's start, ``--screenshot``, Ctrl-C in the terminal and the teardown.
``app.commands.gui`` parses and checks the arguments and chooses the Qt platform without Qt, then
calls ``launch``."""

from __future__ import annotations

import argparse
import os
import sys


def make_window(argv0: str = "tapescope", debug: bool = False):
    """The QApplication (styled) and a MainWindow, for ``run`` and the desktop smoke test."""
    __import__("tapescope.views")  # the PySide6 guard (views/__init__.py), before any Qt work
    from PySide6.QtWidgets import QApplication

    from tapescope.app.qt.messages import quiet_qt

    quiet_qt(debug)  # no "propagateSizeHints()" on every run (issue 25)

    from tapescope.app.qt.main_window import MainWindow
    from tapescope.app.qt.style import apply_style

    app = QApplication.instance() or QApplication([argv0])
    app.setApplicationName("tapescope")
    app.setOrganizationName("tapescope")
    apply_style(app)
    return app, MainWindow()


def prepare_screenshot(win) -> None:
    """Pick a view worth looking at: a 2-D node selected, a few backward steps taken."""
    s = win.session
    if s is None:
        return
    win.wait_until_ready()
    nodes = s.tape.nodes
    pick = next((n.id for n in nodes if n.op in ("bmm", "matmul") and len(n.shape) >= 2
                 and min(n.shape[-2:]) > 1), None)
    if pick is None:  # e.g. an ONNX model: the first computed 2-D (or higher) tensor
        pick = next((n.id for n in nodes if n.inputs and len(n.shape) >= 2
                     and min(n.shape[-2:]) > 1), s.loss_id or 0)
    for _ in range(3):
        win.stepper_panel.step()
    live = win.live.live
    if live is not None and live.first is not None:
        pick = int(live.first["node"])  # a live session: show where the bits first differ
    win.select_node(pick)


def wait_live(win, timeout_s: float = 120.0) -> None:
    """Process events until the live session has run its steps (or failed)."""
    import time

    from PySide6.QtCore import QCoreApplication

    from tapescope.app.qt.live import FAILED, STOPPED

    end = time.monotonic() + timeout_s
    live = win.live.live
    while time.monotonic() < end and not (
            live.state == FAILED or (live.state == STOPPED and win.live.last is not None
                                     and win.live.last.extra["steps_done"] >= live.steps_done)):
        QCoreApplication.processEvents()
        time.sleep(0.01)
    if live.state == FAILED:
        return
    win.wait_until_ready()



def launch(args: argparse.Namespace, size: tuple[int, int] | None, workload,
           session=None) -> int | str:
    """The window for ``tapescope gui`` once its arguments are checked and the Qt platform is
    chosen (``app.commands.gui.run``): its exit status, or the one-line error (exit 2) as a
    string. ``session``: the workload already opened (a model, opened before the window)."""
    if args.file and not args.live:
        from tapescope.core.capture.file import is_capture

        if is_capture(args.file):  # a capture (`tapescope capture`): its own window
            __import__("tapescope.views")  # the PySide6 guard, before any Qt work
            from tapescope.app.qt.capture_window import run_window

            return run_window(args, size, sys.modules[__name__])
    irq = Interrupts() if not args.screenshot else None
    app, win = make_window(sys.argv[0] if sys.argv else "tapescope",
                           debug=bool(getattr(args, "debug", False)))
    if args.screenshot:
        win.window_layout.persist = False  # a picture shows the default layout, saves nothing
        win.window_layout.reset()
    ok = True
    from tapescope.app.commands.onnx_cmd import limits_from

    win.onnx_limits = limits_from(args)
    from tapescope.app.qt.progress_dialog import prepare_native

    prepare_native(win)  # a cold cache: refmath's C kernels compile behind a dialog with Cancel
    if args.file:
        ok = win.open_file(args.file)
    if session is not None:
        win.set_session(session)
    elif workload or not args.file:
        ok = win.open_workload(workload or "mlp") and ok
    if args.live and ok and win.session is not None and win.session.workload is not None:
        from tapescope.app.commands.model_args import amp_kwargs, resolve_dtype
        from tapescope.app.commands.worker import timeouts as worker_timeouts
        from tapescope.app.runs import SessionConfig

        spec = win.session.meta["workload"]
        from tapescope.app.commands.argtypes import candidate_config

        cfg = SessionConfig(workload=spec,
                            fuse=args.fuse, dtype=resolve_dtype(args.dtype, spec), math=args.math,
                            compare=args.compare, worker=getattr(args, "worker", None),
                            **worker_timeouts(args), **candidate_config(args),
                            **amp_kwargs(args))
        # --steps bounds the session with or without --screenshot (issue 46: `--steps 20`
        # ran on past 4,000 steps in a window)
        ok = win.live.start(cfg, max_steps=args.steps)
    if args.screenshot:
        return _screenshot(win, args, size, ok)
    win.show()
    return exec_until_interrupted(app, win, irq)


def _delete_window(win) -> None:
    """Delete the window now, while the QApplication lives. NOTE: left to the interpreter's
    exit, Python freed the plots' items in its own order and a plot's axis, told of a range
    change mid-teardown, touched a deleted label: a traceback, then a segfault (exit -11)."""
    import pyqtgraph as pg
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QGraphicsView

    for view in win.findChildren(QGraphicsView):  # each plot's items go while all are alive
        scene = view.scene()
        if scene is None:
            continue
        for item in scene.items():
            if isinstance(item, pg.AxisItem):
                item.unlinkFromView()
        scene.clear()
    win.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.DeferredDelete)


class Interrupts:
    """Ctrl-C for ``tapescope gui``: installed before any Qt work, so one pressed while the
    window is still being built is not a KeyboardInterrupt thrown through Qt's set-up (the
    interpreter then tore half-made widgets down and segfaulted); once the window runs, it
    closes the window (its live worker with it) and the event loop ends."""

    def __init__(self) -> None:
        import signal

        self.got = False
        self.app = self.win = None
        self._old = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, _sig, _frame) -> None:
        self.got = True
        if self.app is not None:
            self.win.close()
            self.app.quit()

    def restore(self) -> None:
        """Python's own Ctrl-C handling back."""
        import signal

        signal.signal(signal.SIGINT, self._old)


def exec_until_interrupted(app, win, interrupts: Interrupts | None = None) -> int:
    """``app.exec()``; Ctrl-C in the terminal closes the window (its live worker with it) and
    exits 130. NOTE: Python runs a signal handler only between bytecodes, and the Qt event loop
    runs none while idle: a KeyboardInterrupt surfaced later inside some slot, printed its
    traceback and the window (and its worker) kept running. A timer lets Python look in."""
    from PySide6.QtCore import QTimer

    irq = interrupts or Interrupts()
    rc = 0
    if not irq.got:  # (pressed while the window was being built: no loop at all)
        irq.app, irq.win = app, win
        tick = QTimer()
        tick.timeout.connect(lambda: None)
        tick.start(200)
        try:
            rc = app.exec()
        finally:
            tick.stop()
    irq.restore()
    if irq.got:
        win.close()
    _delete_window(win)
    if irq.got:
        print("tapescope gui: interrupted", file=sys.stderr)
        return 130
    return rc


def _screenshot(win, args: argparse.Namespace, size: tuple[int, int],
                ok: bool) -> int | str:
    from PySide6.QtCore import QCoreApplication

    from tapescope.app.qt.live import FAILED

    win.resize(*size)
    win.show()
    if args.live and ok:
        wait_live(win)
        ok = win.live.live is not None and win.live.live.state != FAILED
    prepare_screenshot(win)
    for _ in range(5):
        QCoreApplication.processEvents()
    img = win.grab()
    win.close()  # its live worker ends; its hold on app.qt.gui_gc too (main() may run again)
    saved = _save_picture(img, args.screenshot)  # on failure too: the picture shows the error
    if not ok or win.session is None:
        box = win.last_error
        trace = (box.detailedText() if box is not None else "") or win.last_traceback
        if trace and getattr(args, "debug", False):
            print(trace.rstrip(), file=sys.stderr)  # the traceback, when asked
        return box.text() if box is not None else "nothing to show"
    if saved is not None:
        return saved
    print(f"wrote {args.screenshot} ({img.width()}x{img.height()})")
    return 0


def _save_picture(img, path: str) -> str | None:
    """Write the window's picture whole or not at all (core.atomic); the error, or None."""
    from tapescope.app.qt.report_render import png_bytes
    from tapescope.core.atomic import write_atomic

    fmt = os.path.splitext(path)[1].lstrip(".").upper() or "PNG"
    try:
        write_atomic(path, png_bytes(img.toImage(), "JPEG" if fmt == "JPG" else fmt))
    except OSError as e:
        return f"{e} ({path})" if path not in str(e) else str(e)
    return None
