"""The backward stepper's model (no Qt): walk ``tape.backward_steps`` like a debugger.

Step, step back, run to a node, continue to a breakpoint, restart. Events are kept in a history
so stepping back and forth replays them without recomputing; listeners are plain callables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np


class BackwardStepper:
    """Debugger over one tape's backward sweep from ``loss_id``."""

    def __init__(self, tape, loss_id: int):
        self.tape = tape
        self.loss_id = int(loss_id)
        self.breakpoints: set[int] = set()
        self.listeners: list[Callable[[], None]] = []
        self.history: list = []
        self.pos = -1
        self.finished = False
        self._iter: Iterator | None = None
        self.restart(notify=False)

    # ---- state ------------------------------------------------------------------------------
    @property
    def current(self):
        """The BackwardStep on display, or None before the first step."""
        return self.history[self.pos] if self.pos >= 0 else None

    @property
    def at_end(self) -> bool:
        """True when the last event is on display and the sweep is exhausted."""
        return self.finished and self.pos == len(self.history) - 1

    def _notify(self) -> None:
        for fn in list(self.listeners):
            fn()

    def restart(self, notify: bool = True) -> None:
        """Start the sweep over (the tape's gradients are reset by it)."""
        self._iter = self.tape.backward_steps(self.tape.var(self.loss_id))
        self.history = []
        self.pos = -1
        self.finished = False
        if notify:
            self._notify()

    def _advance(self) -> bool:
        if self.pos < len(self.history) - 1:
            self.pos += 1
            return True
        if self.finished:
            return False
        try:
            ev = next(self._iter)
        except StopIteration:
            self.finished = True
            return False
        self.history.append(ev)
        self.pos += 1
        return True

    # ---- commands ---------------------------------------------------------------------------
    def step(self) -> bool:
        """One node further in reverse tape order; False at the end."""
        moved = self._advance()
        self._notify()
        return moved

    def step_back(self) -> bool:
        """Show the previous event again; False at the start."""
        if self.pos < 0:
            return False
        self.pos -= 1
        self._notify()
        return True

    def run_to(self, node_id: int) -> bool:
        """Step until ``node_id`` is the current node; False if the sweep ends first."""
        while self._advance():
            if self.current.node.id == node_id:
                self._notify()
                return True
        self._notify()
        return False

    def continue_(self) -> bool:
        """Step until a breakpoint node (True) or the end (False)."""
        while self._advance():
            if self.current.node.id in self.breakpoints:
                self._notify()
                return True
        self._notify()
        return False

    def toggle_breakpoint(self, node_id: int) -> bool:
        """Set or clear a breakpoint; returns whether it is now set."""
        if node_id in self.breakpoints:
            self.breakpoints.discard(node_id)
            on = False
        else:
            self.breakpoints.add(int(node_id))
            on = True
        self._notify()
        return on

    # ---- queries ----------------------------------------------------------------------------
    def accumulated(self, node_id: int) -> np.ndarray | None:
        """A node's gradient as accumulated up to and including the current step."""
        seed = None
        if node_id == self.loss_id:  # the sweep seeds the loss with ones
            seed = np.ones(self.tape.node(node_id).shape, dtype=self.tape.dtype)
        for ev in reversed(self.history[: self.pos + 1]):
            for c in reversed(ev.contributions):  # a node may feed the same input twice
                if c.input_id == node_id:
                    return c.after
        return seed

    def contributions_to(self, node_id: int) -> list[tuple[int, np.ndarray]]:
        """(from node, contribution) pairs a node has received so far, in arrival order."""
        out = []
        for ev in self.history[: self.pos + 1]:
            for c in ev.contributions:
                if c.input_id == node_id:
                    out.append((ev.node.id, c.value))
        return out
