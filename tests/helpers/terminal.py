"""A pseudo-terminal for the progress line's tests: open one of a given width, read what was
written to it (tests/core/test_progress.py, tests/app/test_cli_progress.py)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import termios
import time


def open_pty(cols: int = 160) -> tuple[int, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    return master, slave


def drain_pty(master: int, until=lambda: True, timeout: float = 120.0) -> str:
    """Everything written to the pty until ``until()`` is true and nothing more arrives."""
    out = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other side closed
                break
            if not chunk:
                break
            out += chunk
        elif until():
            break
    return out.decode("utf-8", "replace")
