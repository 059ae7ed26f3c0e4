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
    win.select_node(pick)


def run(args: argparse.Namespace) -> int:
    """Start the app; with ``--screenshot`` render once, save, and exit 0 (1 on failure)."""
    import sys

    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow

    size = _parse_size(args.size) if args.screenshot else None
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
    if args.screenshot:
        win.resize(*size)
        win.show()
        prepare_screenshot(win)
        from PySide6.QtCore import QCoreApplication

        for _ in range(5):
            QCoreApplication.processEvents()
        img = win.grab()
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
