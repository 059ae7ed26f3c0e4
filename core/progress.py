"""Progress of long work on a terminal: one updating stderr line (what, how far, how long),
drawn by rich, and only when stderr is a TTY, so logs, pipes and the CLI's one-line error
contract stay clean. ``TAPESCOPE_PROGRESS=0`` turns it off.

    with progress("compiling the kernel library") as p: ...          # spinner + elapsed time
    with progress("parity mlp", total=30) as p: ... p.advance()      # bar, 12/30, elapsed

A ``progress`` inside another (a compile during a parity step) is a second line of the same
display (rich allows one live display at a time).

``listening(fn)`` also hands every start, advance and end to ``fn`` (a dict: ``event``, ``what``,
``done``, ``total``, ``elapsed``), terminal or not: the live worker sends them to the GUI, whose
progress dialog (``app.qt.progress_dialog``) shows the first kernel compile with a Cancel button.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

_ACTIVE: list[Any] = []  # the rich Progress being shown, if any
_LISTENERS: list[Callable[[dict], None]] = []  # listening(fn)'s, in the order they came
_LOCK = threading.Lock()


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


class _Notify:
    """Hands each step of one ``progress`` to the listeners, besides what ``inner`` draws."""

    def __init__(self, inner: _Silent | _Task, what: str, total: int | None) -> None:
        self.inner, self.what, self.total = inner, what, total
        self.done, self.t0 = 0, time.monotonic()

    def tell(self, event: str) -> None:
        msg = {"event": event, "what": self.what, "done": self.done, "total": self.total,
               "elapsed": round(time.monotonic() - self.t0, 3)}
        with _LOCK:
            fns = list(_LISTENERS)
        for fn in fns:
            fn(msg)

    def advance(self, n: int = 1) -> None:
        """n more units done."""
        self.done += n
        self.inner.advance(n)
        self.tell("advance")


@contextlib.contextmanager
def listening(fn: Callable[[dict], None]) -> Iterator[None]:
    """Hand every ``progress``'s start, advance and end to ``fn`` while the block runs (from
    whatever thread the work runs in; ``fn`` must be quick and must not raise)."""
    with _LOCK:
        _LISTENERS.append(fn)
    try:
        yield
    finally:
        with _LOCK:
            _LISTENERS.remove(fn)


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
             stream: TextIO | None = None) -> Iterator[_Silent | _Task | _Notify]:
    """Show ``what`` (with a bar when ``total`` is known) while the block runs; gone after."""
    if not _LISTENERS:
        with _drawn(what, total, stream) as inner:
            yield inner
        return
    with _drawn(what, total, stream) as inner:
        note = _Notify(inner, what, total)
        note.tell("start")
        try:
            yield note
        finally:
            note.tell("end")


@contextlib.contextmanager
def _drawn(what: str, total: int | None, stream: TextIO | None) -> Iterator[_Silent | _Task]:
    """The terminal's line (or nothing, off a terminal)."""
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


def file_label(verb: str, path: str | os.PathLike) -> str:
    """``"loading big.tape (812.3 MB)"``: what a load of ``path`` is, with its size."""
    name = os.path.basename(os.fspath(path))
    try:
        size = os.stat(path).st_size
    except OSError:
        return f"{verb} {name}"
    return f"{verb} {name} ({size / 1e6:.1f} MB)" if size >= 100_000 else \
        f"{verb} {name} ({size / 1e3:.1f} kB)"


class Ticks:
    """A cancel flag (``is_set()``, as the ONNX executor asks between nodes and loop
    iterations) that counts each question as one unit done on ``bar``, and answers what
    ``cancel`` (a ``threading.Event``, or None: never) says."""

    def __init__(self, bar: Any, cancel: Any = None) -> None:
        self.bar, self.cancel = bar, cancel

    def is_set(self) -> bool:
        self.bar.advance()
        return self.cancel is not None and self.cancel.is_set()
