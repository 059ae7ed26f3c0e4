"""``tapescope gui``: the desktop inspector (also what ``tapescope`` alone runs)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``gui`` subcommand."""
    p = sub.add_parser("gui", help="open the desktop inspector (the default command)")
    p.add_argument("file", nargs="?", help="a .tape file or .onnx model to open")
    p.add_argument("--workload", default=None,
                   help="mlp | transformer | PATH.py (default: mlp when no file is given)")
    p.add_argument("--screenshot", metavar="OUT.png", default=None,
                   help="render the loaded window to a PNG and exit (works offscreen)")
    p.add_argument("--size", default="1440x900", help="window size for --screenshot, WxH")
    live = p.add_argument_group("live session (the Live toolbar sets the same)")
    live.add_argument("--live", action="store_true",
                      help="start a live session: the workload on the CPU tape and on a device")
    live.add_argument("--device", default="host", choices=["host", "cuda", "auto"])
    live.add_argument("--fuse", action="store_true", help="replay the fused plan")
    live.add_argument("--math", default="refmath", choices=["refmath", "platform"],
                      help="the candidate's math (the reference is always refmath)")
    live.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    live.add_argument("--compare", default="cpu-device",
                      choices=["cpu-device", "cpu-platform", "unfused-fused", "f64-device"])
    live.add_argument("--steps", type=int, default=30,
                      help="with --screenshot: steps to run before the picture")
    p.set_defaults(func=run)


def _parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"tapescope gui: --size {text!r} is not WxH (e.g. 1440x900)") from None
    if w < 1280 or h < 800:
        raise SystemExit(f"tapescope gui: --size {text} is below the 1280x800 minimum")
    return w, h


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

    from app.live import FAILED, STOPPED

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


def run(args: argparse.Namespace) -> int:
    """Start the app; with ``--screenshot`` render once, save, and exit 0 (1 on failure)."""
    import os
    import sys

    __import__("views")  # the PySide6 guard (views/__init__.py), before any Qt work
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow

    size = _parse_size(args.size) if args.screenshot else None
    if args.screenshot and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # a picture needs no screen
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("tapescope")
    app.setOrganizationName("tapescope")
    from app.style import apply_style

    apply_style(app)
    win = MainWindow()
    ok = True
    if args.file:
        ok = win.open_file(args.file)
    if args.workload or not args.file:
        ok = win.open_workload(args.workload or "mlp") and ok
    if args.live and ok and win.session is not None and win.session.workload is not None:
        from app.runs import SessionConfig

        cfg = SessionConfig(workload=win.session.meta["workload"], device=args.device,
                            fuse=args.fuse, dtype=args.dtype, math=args.math,
                            compare=args.compare)
        ok = win.live.start(cfg, max_steps=max(1, args.steps) if args.screenshot else None)
    if args.screenshot:
        win.resize(*size)
        win.show()
        if args.live and ok:
            wait_live(win)
        prepare_screenshot(win)
        from PySide6.QtCore import QCoreApplication

        for _ in range(5):
            QCoreApplication.processEvents()
        img = win.grab()
        win.live.close()
        if not ok or win.session is None:
            msg = win.last_error.text() if win.last_error is not None else "nothing to show"
            print(f"tapescope gui: {msg}", file=sys.stderr)
        if not img.save(args.screenshot):
            print(f"tapescope gui: could not write {args.screenshot}", file=sys.stderr)
            return 1
        print(f"wrote {args.screenshot} ({img.width()}x{img.height()})")
        return 0 if ok else 1
    win.show()
    return app.exec()
