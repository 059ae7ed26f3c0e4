"""``tapescope worker``: the device side of a pair, for ``--worker CMD`` on another machine.

Speaks the worker protocol (``app.remote``, versioned JSON lines, no pickle) on stdin and
stdout, e.g. ``tapescope parity --worker "ssh gpu-box tapescope worker"``. What a workload
prints goes to stderr: the protocol keeps fd 0 and fd 1 to itself.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``worker`` subcommand."""
    p = sub.add_parser("worker", help="serve the device side for --worker (stdin/stdout)",
                       description="Serve the device side of a pair over stdin/stdout for "
                                   "`--worker CMD` (e.g. --worker \"ssh gpu-box tapescope "
                                   "worker\"). Exit 0 when the client quits, 2 on a protocol "
                                   "mismatch or a garbled line.")
    p.set_defaults(func=run)


def _seconds(text: str) -> float:
    from tapescope.app.remote_protocol import seconds

    try:
        return seconds(text, "the value")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_timeout_flags(p: argparse.ArgumentParser) -> None:
    """``--worker-timeout S`` and ``--worker-open-timeout S`` beside a command's ``--worker``."""
    from tapescope.app.remote_protocol import (
        HELLO_TIMEOUT_ENV,
        HELLO_TIMEOUT_S,
        OPEN_TIMEOUT_ENV,
        OPEN_TIMEOUT_S,
        TIMEOUT_ENV,
        TIMEOUT_S,
    )

    p.add_argument("--worker-timeout", metavar="S", type=_seconds, default=None,
                   help=f"with --worker: seconds the worker may take to answer one request "
                        f"(default ${TIMEOUT_ENV} or {TIMEOUT_S:g}); one it misses ends the run")
    p.add_argument("--worker-open-timeout", metavar="S", type=_seconds, default=None,
                   help=f"with --worker: the same for its hello, device and open (the first "
                        f"compile; default ${OPEN_TIMEOUT_ENV} or {OPEN_TIMEOUT_S:g})")
    p.add_argument("--worker-hello-timeout", metavar="S", type=_seconds, default=None,
                   help=f"with --worker: seconds its first answer (hello) may take, at most "
                        f"the open timeout (default ${HELLO_TIMEOUT_ENV} or "
                        f"{HELLO_TIMEOUT_S:g}): a command that never answers is named soon")


def timeouts(args: argparse.Namespace) -> dict:
    """The SessionConfig fields of ``add_timeout_flags``' flags."""
    return {"worker_timeout": getattr(args, "worker_timeout", None),
            "worker_open_timeout": getattr(args, "worker_open_timeout", None),
            "worker_hello_timeout": getattr(args, "worker_hello_timeout", None)}


def run(args: argparse.Namespace) -> int:
    """Serve until the client says quit or closes the pipe."""
    import os

    from tapescope.app.live_worker import die_with_parent, protect_stdio
    from tapescope.app.remote_server import serve

    die_with_parent()  # e.g. an ssh session that drops: no worker left behind on the GPU box
    pin, pout = protect_stdio()
    try:
        return serve(pin, pout)
    finally:
        os.close(pin)
        os.close(pout)
