"""Large output buffers kept from one run of a session to the next.

A model's big intermediates (a stem conv's 3 MB output, a pool's, a Concat's) are freed at the
end of every run, and glibc hands memory that large back to the kernel: the next run takes a
page fault (and a zeroed page) per 4 KiB it writes again, measured at 1,633 faults and up to
4 ms of system time per squeezenet run of ~13 ms (docs/benchmarks.md, session 11). onnxruntime
keeps an arena; so does this, for the buffers the run plan's C passes write:

- a buffer is taken again only when nothing holds it any more: its reference count is the
  arena's own (the value's ``env`` entry, a view of it, an output the caller kept: each holds a
  reference, so a kept output is never written over);
- one arena per session and thread (two threads running one session never share a buffer);
- at most ``MAX_BYTES`` held per arena and ``PER_KEY`` buffers of one shape and dtype; past
  that a buffer is a plain ``np.empty``; below ``MIN_BYTES`` always (malloc reuses small blocks
  itself).

Nothing read from a buffer is trusted: every user writes all of it before reading (the C
passes write each element; the caller's contract, as for ``np.empty``)."""

from __future__ import annotations

import contextvars
import sys
import threading

import numpy as np

MIN_BYTES = 256 * 1024
MAX_BYTES = 512 * 1024 * 1024
PER_KEY = 8

def _probe() -> int:
    """The count ``sys.getrefcount`` gives an object only a list holds, read the way
    :meth:`Arena.empty` reads it (an interpreter that borrows loop variables gives less)."""
    kept = [object()]
    for a in kept:
        return sys.getrefcount(a)
    return 0


_FREE = _probe()

_current: contextvars.ContextVar[Arena | None] = contextvars.ContextVar(
    "tapescope_onnx_arena", default=None)


class Arena:
    """Reusable ``np.empty`` buffers, per thread (see the module docstring)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._local = threading.local()

    def _mine(self) -> tuple[dict, list]:
        loc = self._local
        if not hasattr(loc, "bufs"):
            loc.bufs, loc.held = {}, [0]
        return loc.bufs, loc.held

    def empty(self, shape, dtype) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` and ``dtype``: a kept one that
        nothing else references, else a new one (kept when the caps allow)."""
        dt = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        nbytes = dt.itemsize
        for s in shape:
            nbytes *= s
        if nbytes < MIN_BYTES:
            return np.empty(shape, dt)
        bufs, held = self._mine()
        key = (shape, dt.str)
        kept = bufs.get(key)
        if kept is not None:
            for a in kept:
                # only the list's reference (and this loop's, getrefcount's own): free
                if sys.getrefcount(a) == _FREE:
                    return a
        a = np.empty(shape, dt)
        if (kept is None or len(kept) < PER_KEY) and held[0] + nbytes <= self.max_bytes:
            bufs.setdefault(key, []).append(a)
            held[0] += nbytes
        return a

    def held_bytes(self) -> int:
        """The bytes this thread's buffers hold (tests)."""
        return self._mine()[1][0]

    def clear(self) -> None:
        """Drop this thread's buffers (arrays still referenced elsewhere live on)."""
        bufs, held = self._mine()
        bufs.clear()
        held[0] = 0


def empty(shape, dtype) -> np.ndarray:
    """``np.empty`` from the running session's arena (:func:`use`), or a plain one outside a
    run."""
    ar = _current.get()
    return np.empty(shape, dtype) if ar is None else ar.empty(shape, dtype)


class use:
    """``with use(arena):`` — :func:`empty` takes from ``arena`` in this context."""

    def __init__(self, arena: Arena | None) -> None:
        self.arena = arena
        self._tok = None

    def __enter__(self) -> Arena | None:
        self._tok = _current.set(self.arena)
        return self.arena

    def __exit__(self, *exc) -> None:
        _current.reset(self._tok)
