"""Progress of long work on a terminal: one updating stderr line (what, how far, how long),
drawn by rich, and only when stderr is a TTY, so logs, pipes and the CLI's one-line error
contract stay clean. ``TAPESCOPE_PROGRESS=0`` turns it off.

    with progress("compiling the kernel library") as p: ...          # spinner + elapsed time
    with progress("parity mlp", total=30) as p: ... p.advance()      # bar, 12/30, elapsed

A ``progress`` inside another (a compile during a parity step) is a second line of the same
display (rich allows one live display at a time).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

_ACTIVE: list[Any] = []  # the rich Progress being shown, if any


class _Silent:
    """What ``progress`` yields when nothing is drawn."""

    def advance(self, n: int = 1) -> None:
        """Nothing to draw."""


class _Task:
    def __init__(self, bar: Any, task: int) -> None:
        self.bar, self.task = bar, task

    def advance(self, n: int = 1) -> None:
        """n more units done."""
        self.bar.advance(self.task, n)


def enabled(stream: TextIO | None = None) -> bool:
    """True when progress is drawn on ``stream`` (default stderr): a terminal, not turned off."""
    stream = sys.stderr if stream is None else stream
    if os.environ.get("TAPESCOPE_PROGRESS", "").strip() == "0":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed, or not a file
        return False


def _same_terminal() -> bool:
    """stdout is the terminal stderr is: rich may then print stdout's lines above the bar."""
    try:
        return sys.stdout.isatty() and os.ttyname(sys.stdout.fileno()) == os.ttyname(
            sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):
        return False


@contextlib.contextmanager
def progress(what: str, total: int | None = None,
             stream: TextIO | None = None) -> Iterator[_Silent | _Task]:
    """Show ``what`` (with a bar when ``total`` is known) while the block runs; gone after."""
    if not enabled(stream):
        yield _Silent()
        return
    try:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
    except ImportError:  # rich is a dependency; a broken install only loses the line
        yield _Silent()
        return
    if _ACTIVE:
        bar = _ACTIVE[-1]
        task = bar.add_task(what, total=total)
        try:
            yield _Task(bar, task)
        finally:
            bar.remove_task(task)
        return
    out = sys.stderr if stream is None else stream
    same = stream is None and _same_terminal()
    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                   MofNCompleteColumn(), TimeElapsedColumn(), console=Console(file=out),
                   transient=True, redirect_stdout=same, redirect_stderr=False)
    with bar:
        _ACTIVE.append(bar)
        try:
            task = bar.add_task(what, total=total)
            yield _Task(bar, task)
        finally:
            _ACTIVE.pop()
