"""A fault planted on a tape (one bit of a value or a gradient flipped) and an optimizer's state
as provenance reads it (tests/core/test_provenance.py, test_provenance_rules.py,
test_provenance_update_skip.py)."""

from __future__ import annotations

import numpy as np

from tapescope.core import Tape
from tapescope.core.provenance import (
    OptimizerState,
    ParamUpdate,
    consumers,
)


def flip(a: np.ndarray) -> np.ndarray:
    """``a`` with the lowest mantissa bit of element 0 flipped (a copy)."""
    out = np.array(a, copy=True)
    flat = out.reshape(-1).view(np.uint64 if out.dtype == np.float64 else np.uint32)
    flat[0] ^= 1
    return out


class Planted:
    """Records on ``tape`` with a fault planted at (node, which); ``run(loss)`` backward."""

    def __init__(self, tape: Tape, node: int | None, which: str) -> None:
        self.tape, self.node, self.which = tape, node, which
        rec = tape.record

        def record(*a, **k):
            v = rec(*a, **k)
            if which == "value" and v.id == node:
                tape._values[node] = flip(tape._values[node])  # later ops read the flip
            return v

        tape.record = record  # instance attribute: only this tape

    def backward(self, loss) -> None:
        t, j = self.tape, self.node
        if self.which != "grad":
            t.backward(loss)
            return
        assert j != loss.id, "the loss's seed is not planted here"
        by = consumers(t.nodes[: loss.id + 1], loss.id)[j]
        done = False
        for step in t.backward_steps(loss):
            if by and step.node.id == min(by):  # the last contribution to j has landed
                t._grads[j] = flip(t._grads[j])
                done = True
        assert done, f"node {j}: its last consumer never ran backward"


def optimizer_state(opt, tape, kind):
    params = []
    for s in opt.slots:
        g = tape.grad(s.var)
        if g is None:
            continue
        params.append(ParamUpdate(s.var.id, s.l2, np.array(tape.value(s.var)), np.array(g),
                                  w_after=None,
                                  m=None if getattr(s, "m", None) is None else np.array(s.m),
                                  v=None if getattr(s, "v", None) is None else np.array(s.v)))
    kw = {} if kind == "sgd" else {"b1": opt.b1, "b2": opt.b2, "eps": opt.eps}
    return OptimizerState(kind, opt.lr, opt.t + 1, params, clip=opt.clip, **kw)
