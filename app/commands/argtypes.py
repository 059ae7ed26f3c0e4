"""argparse types the commands share (a helper module: no ``register``).

Here, not in app.cli: app.cli imports the commands, so a command importing app.cli closed a
cycle (tests/test_import_cycles.py).
"""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (``--steps``)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n
