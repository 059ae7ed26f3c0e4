"""The full tensors of the last few steps, kept by the live worker for the step scrubber (no Qt).

After each step the worker copies every compared node's value and gradient, both sides
(``PairRunner.arrays``), into a ring of at most ``keep`` steps and ``budget_bytes`` bytes
(the transformer: 0.7 MB and about 1 ms a step on the host, 23 MB for 32 steps). ``inspect``
for a past step answers from here; a step that left the window (or was skipped) says so (its
per-node summaries stay in the GUI's ``StepHistory`` for every step). While the session runs,
copying is budgeted to 5 % of the stepping time (on the transformer about every fourth step);
paused, every single step is kept.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

KEEP_STEPS = 32
SHARE = 0.05  # while running, copies take at most this share of the stepping time
BUDGET_BYTES = 256 << 20


class TensorWindow:
    """step → {node: {"step", "ref": {"value", "grad"}, "cand": {...}}} for recent steps."""

    def __init__(self, keep: int = KEEP_STEPS, budget_bytes: int = BUDGET_BYTES) -> None:
        self.keep, self.budget_bytes = keep, budget_bytes
        self.steps: OrderedDict[int, list[dict]] = OrderedDict()
        self.sizes: dict[int, int] = {}
        self.disabled = False  # one step alone is over the budget: keep nothing
        self.cost = 0.0  # seconds the last copy took
        self.credit = 0.0  # seconds of copying earned by stepping (SHARE of each step)

    def capture(self, step: int, runner: Any, step_s: float = 0.0, always: bool = True) -> bool:
        """Copy every compared node's arrays as ``runner`` left them after ``step``; True when
        kept. While running (``always`` False) the copies may cost at most ``SHARE`` of the
        stepping time (``step_s`` each): the steps in between are skipped."""
        if self.keep <= 0 or self.disabled:
            return False
        self.credit = min(self.credit + SHARE * step_s, 1.0)
        if not always and self.credit < self.cost:
            return False
        t0 = time.perf_counter()
        got = [runner.arrays(i) for i in range(len(runner.nodes))]
        size = sum(a.nbytes for g in got for side in ("ref", "cand")
                   for a in g[side].values() if a is not None)
        if size > self.budget_bytes:
            self.disabled = True
            self.steps.clear()
            return
        for g in got:
            g["step"] = step
        self.steps[step] = got
        self.sizes[step] = size
        self.cost = time.perf_counter() - t0
        self.credit = max(0.0, self.credit - self.cost)
        while len(self.steps) > self.keep or sum(self.sizes.values()) > self.budget_bytes:
            old, _ = self.steps.popitem(last=False)
            del self.sizes[old]
        return True

    def get(self, step: int, node: int) -> dict:
        """One node at one kept step (``PairRunner.arrays``' form); ValueError when gone."""
        if step not in self.steps:
            kept = (f"{len(self.steps)} of steps {min(self.steps)}..{max(self.steps)}"
                    if self.steps else "none")
            raise ValueError(f"step {step}'s tensors were not kept (kept: {kept}; while "
                             "running, only some steps are); its per-node summary is shown. "
                             "Pause and single-step to keep every step")
        nodes = self.steps[step]
        if not 0 <= node < len(nodes):
            raise IndexError(f"node #{node} is not compared (ids 0..{len(nodes) - 1})")
        return nodes[node]
