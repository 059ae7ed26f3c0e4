"""The full tensors of the last few steps, kept by the live worker for the step scrubber (no Qt).

After a step the worker completes that step's one store (``PairRunner.store``, an
``app.run_sides.StepArrays``: what provenance and the NaN scan already fetched is not fetched
again) with every compared node's value and gradient, both sides, and keeps the store itself
in a ring of at most ``keep`` steps and ``budget_bytes`` bytes (the transformer: 0.7 MB and
about 1 ms a step on the host, 23 MB for 32 steps). A pair in a remote worker
(``app.remote.RemotePair``) has no store here: its tensors move only when asked. ``inspect``
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
    """step → that step's ``StepArrays`` (complete) for recent steps."""

    def __init__(self, keep: int = KEEP_STEPS, budget_bytes: int = BUDGET_BYTES) -> None:
        self.keep, self.budget_bytes = keep, budget_bytes
        self.steps: OrderedDict[int, Any] = OrderedDict()
        self.sizes: dict[int, int] = {}
        self.disabled = False  # one step alone is over the budget: keep nothing
        self.cost = 0.0  # seconds the last copy took
        self.credit = 0.0  # seconds of copying earned by stepping (SHARE of each step)

    def capture(self, step: int, runner: Any, step_s: float = 0.0, always: bool = True) -> bool:
        """Keep ``runner``'s store of ``step``, completed with every compared node's arrays as
        the step left them; True when kept. While running (``always`` False) the fetches may
        cost at most ``SHARE`` of the stepping time (``step_s`` each): the steps in between
        are skipped."""
        store = getattr(runner, "store", None)
        if self.keep <= 0 or self.disabled or store is None or store.step != step:
            return False
        self.credit = min(self.credit + SHARE * step_s, 1.0)
        if not always and self.credit < self.cost:
            return False
        t0 = time.perf_counter()
        for i in range(len(runner.nodes)):  # as the Inspector reads them: after the update
            for side in ("ref", "cand"):
                for which in ("value", "grad"):
                    store.get(side, i, which, after=True)
        size = store.nbytes
        if size > self.budget_bytes:
            self.disabled = True
            self.steps.clear()
            return False
        self.steps[step] = (store, len(runner.nodes))
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
        store, n = self.steps[step]
        if not 0 <= node < n:
            raise IndexError(f"node #{node} is not compared (ids 0..{n - 1})")
        return {"step": step, **{side: {w: store.get(side, node, w, after=True)
                                         for w in ("value", "grad")} for side in ("ref", "cand")}}
