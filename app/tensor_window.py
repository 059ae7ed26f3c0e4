"""The full tensors of the last few steps, kept by the live worker for the step scrubber (no Qt).

After each step the worker copies every compared node's value and gradient, both sides
(``PairRunner.arrays``), into a ring of at most ``keep`` steps and ``budget_bytes`` bytes
(the transformer: 0.7 MB and under 1 ms a step on the host, 45 MB for 64 steps). ``inspect``
for a past step answers from here; a step that left the window says so (its per-node summaries
stay in the GUI's ``StepHistory`` for every step).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

KEEP_STEPS = 64
BUDGET_BYTES = 256 << 20


class TensorWindow:
    """step → {node: {"step", "ref": {"value", "grad"}, "cand": {...}}} for recent steps."""

    def __init__(self, keep: int = KEEP_STEPS, budget_bytes: int = BUDGET_BYTES) -> None:
        self.keep, self.budget_bytes = keep, budget_bytes
        self.steps: OrderedDict[int, list[dict]] = OrderedDict()
        self.sizes: dict[int, int] = {}
        self.disabled = False  # one step alone is over the budget: keep nothing

    def capture(self, step: int, runner: Any) -> None:
        """Copy every compared node's arrays as ``runner`` left them after ``step``."""
        if self.keep <= 0 or self.disabled:
            return
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
        while len(self.steps) > self.keep or sum(self.sizes.values()) > self.budget_bytes:
            old, _ = self.steps.popitem(last=False)
            del self.sizes[old]

    def get(self, step: int, node: int) -> dict:
        """One node at one kept step (``PairRunner.arrays``' form); ValueError when gone."""
        if step not in self.steps:
            kept = f"steps {min(self.steps)}..{max(self.steps)}" if self.steps else "none"
            raise ValueError(f"step {step}'s tensors are no longer kept (kept: {kept}); its "
                             "per-node summary is still shown")
        nodes = self.steps[step]
        if not 0 <= node < len(nodes):
            raise IndexError(f"node #{node} is not compared (ids 0..{len(nodes) - 1})")
        return nodes[node]
