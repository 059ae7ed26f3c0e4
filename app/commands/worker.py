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


def run(args: argparse.Namespace) -> int:
    """Serve until the client says quit or closes the pipe."""
    import os

    from app.live_worker import die_with_parent, protect_stdio
    from app.remote import serve

    die_with_parent()  # e.g. an ssh session that drops: no worker left behind on the GPU box
    pin, pout = protect_stdio()
    with os.fdopen(pin, "rb") as fin, os.fdopen(pout, "wb") as fout:
        return serve(fin, fout)
