"""Large output buffers kept from one run of a session to the next.

A model's big intermediates (a stem conv's 3 MB output, a pool's, a Concat's) are freed at the
end of every run, and glibc hands memory that large back to the kernel: the next run takes a
page fault (and a zeroed page) per 4 KiB it writes again, measured at 1,633 faults and up to
4 ms of system time per squeezenet run of ~13 ms (docs/benchmarks.md, session 11). onnxruntime
keeps an arena; so does this, for the buffers the run plan's C passes write:

- a block is taken again only when nothing holds it any more: its reference count is the
  arena's own (a value in the run's ``env``, a view of one, an output the caller kept: each
  holds a reference, so a kept output is never written over). The run plan drops a value from
  ``env`` once no later step reads it (``Plan.dead``), so a later step of another shape takes
  its block (the smallest free one of at least its size and at most twice it): a run's
  working set stays near its largest live values, as onnxruntime's memory planner keeps it,
  and the cache keeps them (squeezenet 14.9 -> 11.0 ms, shufflenet 13.9 -> 8.6 ms, paired in
  one process, docs/benchmarks.md session 11);
- one arena per session and thread (two threads running one session never share a block);
- at most ``MAX_BYTES`` and ``MAX_BLOCKS`` blocks held per arena: a new block past a cap first
  drops free ones, oldest first (shapes that stopped coming), else is a plain ``np.empty``;
  below ``MIN_BYTES`` always (malloc reuses small blocks itself).

Nothing read from a buffer is trusted: every user writes all of it before reading (the C
passes write each element; the caller's contract, as for ``np.empty``)."""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
import threading

import numpy as np

MIN_BYTES = 256 * 1024
MAX_BYTES = 256 * 1024 * 1024
MAX_BLOCKS = 64


def _probe() -> int:
    """The count ``sys.getrefcount`` gives a list's element that nothing else holds, read in a
    ``for`` loop over the list as :func:`_smallest_free` and :meth:`Arena._make_room` read it
    (an interpreter that borrows loop variables gives less)."""
    kept = [object()]
    for a in kept:
        return sys.getrefcount(a)
    return 0


_FREE = _probe()


def _smallest_free(blocks: list, nbytes: int) -> np.ndarray | None:
    """The smallest block nothing else references of ``nbytes`` to twice that, or None."""
    best, size, hi = None, 0, 2 * nbytes
    for b in blocks:
        # only the list's reference (and this loop's, getrefcount's own): free; a view handed
        # out earlier references its block (through its root's buffer), so a kept one is busy.
        # (The sizes first: a reference count is read only for a block that would do.)
        n = b.nbytes
        if nbytes <= n <= hi and (best is None or n < size) and sys.getrefcount(b) == _FREE:
            best, size = b, n
    return best


_current: contextvars.ContextVar[Arena | None] = contextvars.ContextVar(
    "tapescope_onnx_arena", default=None)


class Arena:
    """Reusable ``np.empty`` buffers, per thread (see the module docstring)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._local = threading.local()

    def _blocks(self) -> list:
        try:
            return self._local.blocks
        except AttributeError:
            blocks = self._local.blocks = []
            return blocks

    def empty(self, shape, dtype) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` and ``dtype``: a view of a kept
        block that nothing else references (the smallest of at least its size and at most
        twice it), else of a new block (kept when the caps allow)."""
        dt = dtype if type(dtype) is np.dtype else np.dtype(dtype)
        if dt.itemsize * math.prod(shape) < MIN_BYTES:
            return np.empty(shape, dt)  # (np.empty checks the shape itself)
        shape = tuple(map(int, shape))
        nbytes = dt.itemsize * math.prod(shape)
        if nbytes < MIN_BYTES:  # (numpy integers that wrapped above)
            return np.empty(shape, dt)
        return self._take(shape, dt, nbytes)

    def _take(self, shape: tuple, dt: np.dtype, nbytes: int) -> np.ndarray:
        """:meth:`empty` of ``nbytes`` (at least MIN_BYTES) for Python int ``shape``."""
        blocks = self._blocks()
        best = _smallest_free(blocks, nbytes)
        if best is None:
            best = np.empty(nbytes, np.uint8)
            if self._make_room(blocks, nbytes):
                blocks.append(best)
        # a buffer object per hand-out: the array's root (its base's base) is this run's own,
        # not the block, so a budget counts each value made in the block once (as the plain
        # run's own array) and the block's count rises while any view of it lives
        return np.frombuffer(memoryview(best)[:nbytes], dtype=dt).reshape(shape)

    def _make_room(self, blocks: list, nbytes: int) -> bool:
        """Whether a new block of ``nbytes`` may be kept, after dropping free blocks, oldest
        first, while a cap would be passed (shapes that stopped coming); busy ones stay."""
        if nbytes > self.max_bytes:
            return False
        held, n, keep = sum(b.nbytes for b in blocks), len(blocks), []
        for b in blocks:
            if (n >= MAX_BLOCKS or held + nbytes > self.max_bytes) \
                    and sys.getrefcount(b) == _FREE:
                held, n = held - b.nbytes, n - 1
                continue
            keep.append(b)
        blocks[:] = keep
        return n < MAX_BLOCKS and held + nbytes <= self.max_bytes

    def held_bytes(self) -> int:
        """The bytes this thread's blocks hold (tests)."""
        return sum(b.nbytes for b in self._blocks())

    def clear(self) -> None:
        """Drop this thread's blocks (arrays still referencing one keep it alive)."""
        self._blocks().clear()


def empty(shape, dtype) -> np.ndarray:
    """``np.empty`` from the running session's arena (:func:`use`), or a plain one outside a
    run."""
    ar = _current.get()
    return np.empty(shape, dtype) if ar is None else ar.empty(shape, dtype)


def empty_sized(shape: tuple, dtype: np.dtype, nbytes: int) -> np.ndarray:
    """:func:`empty` for a caller that knows its array: ``shape`` a tuple of Python ints,
    ``dtype`` an ``np.dtype``, ``nbytes`` their product (a fused entry's prepared output)."""
    ar = _current.get()
    if ar is None or nbytes < MIN_BYTES:
        return np.empty(shape, dtype)
    return ar._take(shape, dtype, nbytes)


@contextlib.contextmanager
def use(arena: Arena | None):
    """``with use(arena):`` — :func:`empty` takes from ``arena`` in this context."""
    tok = _current.set(arena)
    try:
        yield arena
    finally:
        _current.reset(tok)
