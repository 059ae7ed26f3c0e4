"""The backward stepper model, without Qt: it walks the tape's own sweep, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from core import workloads
from views.stepper_model import BackwardStepper


def recorded(name: str):
    wl = workloads.get(name)
    loss = wl.record(0)
    return wl.tape, loss.id


def full_backward_grads(name: str) -> list:
    tape, loss = recorded(name)
    tape.backward(tape.var(loss))
    return [None if tape.grad(i) is None else np.array(tape.grad(i)) for i in range(len(tape))]


def same_bits(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_walking_to_the_end_equals_backward_bit_for_bit(name):
    ref = full_backward_grads(name)
    tape, loss = recorded(name)
    s = BackwardStepper(tape, loss)
    seen = []
    while s.step():
        ev = s.current
        seen.append(ev.node.id)
        # the incoming gradient is final when a node is reached: equal to the full backward's
        assert same_bits(np.asarray(ev.grad), ref[ev.node.id])
        for c in ev.contributions:
            expect = c.value + 0.0 if c.before is None else c.before + c.value
            assert same_bits(np.asarray(c.after), expect)
    assert seen == sorted(seen, reverse=True) and seen[0] == loss
    assert s.at_end
    for i in range(len(tape)):
        assert same_bits(tape.grad(i), ref[i]), i
        assert same_bits(s.accumulated(i), ref[i]), i


def test_step_back_run_to_breakpoints_and_restart():
    tape, loss = recorded("mlp")
    s = BackwardStepper(tape, loss)
    calls = []
    s.listeners.append(lambda: calls.append(s.pos))
    assert not s.step_back() and s.current is None
    s.step(), s.step(), s.step()
    third = s.current.node.id
    assert s.step_back() and s.current.node.id != third
    assert s.step() and s.current.node.id == third  # replayed from history, same event
    assert len(s.history) == 3
    target = s.history[0].node.id - 7
    # run_to a node that pushes a gradient
    ids = [n.id for n in tape.nodes if n.inputs and n.requires_grad and n.id < target]
    assert s.run_to(ids[-1]) and s.current.node.id == ids[-1]
    s.restart()
    assert s.current is None and s.pos == -1
    assert s.toggle_breakpoint(ids[0]) and s.breakpoints == {ids[0]}
    assert s.continue_() and s.current.node.id == ids[0]
    assert not s.continue_() and s.at_end
    assert not s.run_to(10**6)
    assert not s.toggle_breakpoint(ids[0]) and not s.breakpoints
    assert calls  # listeners hear every command


def test_fan_out_contributions_add_up():
    from core import Tape, ops

    t = Tape()
    w = t.param(np.array([1.5, -2.0]), name="w")
    y = w * w + ops.exp(w)  # w is used three times: three contributions land on it
    loss = ops.sum(y)
    s = BackwardStepper(t, loss.id)
    while s.step():
        pass
    got = s.contributions_to(w.id)
    assert len(got) == 3
    acc = got[0][1] + 0.0
    for _, c in got[1:]:
        acc = acc + c
    assert same_bits(acc, s.accumulated(w.id))
