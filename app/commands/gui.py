"""``tapescope gui``: the desktop inspector (also what ``tapescope`` alone runs)."""

from __future__ import annotations

import argparse
import os
import sys

SCREENSHOT_STEPS = 30  # a live --screenshot without --steps: steps before the picture


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``gui`` subcommand."""
    p = sub.add_parser("gui", help="open the desktop inspector (the default command)")
    p.add_argument("file", nargs="?", help="a .tape file or .onnx model to open")
    from tapescope.resources import EXAMPLES

    p.add_argument("--example", choices=list(EXAMPLES), default=None,
                   help="open a shipped example: " + ", ".join(
                       f"{k} ({v.rsplit('/', 1)[-1]})" for k, v in EXAMPLES.items()))
    p.add_argument("--workload", default=None,
                   help="mlp | transformer | PATH.py (default: mlp when no file is given)")
    p.add_argument("--screenshot", metavar="OUT.png", default=None,
                   help="render the loaded window to a PNG and exit (works offscreen)")
    p.add_argument("--size", default="1440x900", help="window size for --screenshot, WxH")
    from tapescope.app.commands.model_args import add_model_args

    # --model M.onnx [--reinit]; `gui M.onnx --live` trains the file itself (its --max-*
    # flags are _limit_flags' below)
    add_model_args(p, limits=False)
    live = p.add_argument_group("live session (the Live toolbar sets the same)")
    live.add_argument("--live", action="store_true",
                      help="start a live session: the workload on the CPU tape and on a device")
    from tapescope.app.commands.argtypes import add_candidate_args

    # --device (a replay or torch), the torch settings, --explain (the Inspector names why a
    # node introduced error)
    add_candidate_args(live, device_default="host", kernel=False)
    live.add_argument("--fuse", action="store_true", help="replay the fused plan")
    live.add_argument("--math", default="refmath", choices=["refmath", "platform"],
                      help="the candidate's math (the reference is always refmath)")
    live.add_argument("--dtype", default=None,
                      choices=["float64", "float32", "float16", "bfloat16"],
                      help="default: a model's own precision, else float64")
    from tapescope.app.commands.model_args import add_amp_args

    add_amp_args(live)
    live.add_argument("--compare", default="cpu-device",
                      choices=["cpu-device", "cpu-platform", "unfused-fused", "f64-device"])
    live.add_argument("--worker", metavar="CMD", default=None,
                      help="run the device side through this command, e.g. \"ssh gpu-box "
                           "tapescope worker\" (split like a shell line, never run by a shell)")
    from tapescope.app.commands.worker import add_timeout_flags

    add_timeout_flags(live)
    live.add_argument("--steps", type=int, default=None,
                      help="a live session trains this many steps, then stops (its results "
                           "stay); default: until Stop (with --screenshot: 30, then the "
                           "picture)")
    from tapescope.app.commands.onnx_cmd import _limit_flags

    _limit_flags(p)  # an .onnx opened in the window runs under the same budgets as `onnx`
    p.set_defaults(func=run)


def _parse_size(text: str) -> tuple[int, int] | str:
    """(w, h) from ``WxH``, or the one-line reason it is not usable."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        return f"--size {text!r} is not WxH (e.g. 1440x900)"
    if w < 1280 or h < 800:
        return f"--size {text} is below the 1280x800 minimum"
    return w, h


def _fail(message: str) -> int:
    """One line on stderr and exit status 2 (bad input or setup)."""
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    print(f"tapescope gui: {first}", file=sys.stderr)
    return 2


def start_platform(screenshot: bool = False) -> str | None:
    """Choose the Qt platform before any QApplication exists; the one-line error if none can
    start (no display, missing xcb libraries), else None (QT_QPA_PLATFORM set as chosen)."""
    from tapescope.app import platform_check

    choice = platform_check.choose_platform(os.environ, screenshot=screenshot)
    if choice.error:
        return choice.error
    platform_check.apply(choice)
    return None

def run(args: argparse.Namespace) -> int:
    """Start the app; with ``--screenshot`` render once, save, and exit 0 (2 on bad input)."""
    size = _parse_size(args.size) if args.screenshot else None
    if isinstance(size, str):
        return _fail(size)
    if args.steps is not None and args.steps < 1:
        return _fail(f"--steps {args.steps}: a live session runs at least 1 step")
    if args.steps is None and args.screenshot:
        args.steps = SCREENSHOT_STEPS
    if args.screenshot:  # before the window and the run: a bad place costs nothing
        from tapescope.core.atomic import check_writable

        try:
            check_writable(args.screenshot, "--screenshot")
        except OSError as e:
            return _fail(str(e))
    if args.example:
        if args.file:
            return _fail(f"give a FILE or --example, not both ({args.file!r} and --example "
                         f"{args.example})")
        from tapescope.resources import example_path

        try:
            args.file = str(example_path(args.example))
        except FileNotFoundError as e:
            return _fail(str(e))
    # the model's arguments are checked before any window exists (issue 45: a bad one raised
    # after the window was made; its teardown then segfaulted, exit 139, after the line).
    # `gui M.onnx --input/--shape/--weights` names the model as --live and --reinit do
    model_flags = any(getattr(args, d, None) for d in (
        "model_inputs", "model_shapes", "model_weights"))
    if (args.file and args.file.lower().endswith(".onnx") and not args.model
            and (args.live or args.reinit or model_flags)):
        args.model, args.file = args.file, None  # the model trains: it is the workload
    from tapescope.app.commands.model_args import resolve_workload

    try:
        workload = resolve_workload(args, default=None)
    except ValueError as e:
        return _fail(str(e))
    session = None
    if workload and args.model:  # the model is opened with its --input/--shape/--weights here,
        # headless, so a wrong shape or an unknown input name is this command's one line and
        # exit 2, not an error box in a window that then stays up
        from tapescope.app.session import SessionError, open_workload

        try:
            session = open_workload(workload)
        except SessionError as e:
            return _fail(str(e))
    problem = start_platform(screenshot=bool(args.screenshot))
    if problem:
        return _fail(problem)
    from tapescope.app.qt.gui import launch  # the window: Qt from here on (app/qt)

    got = launch(args, size, workload, session)
    return _fail(got) if isinstance(got, str) else got
