"""Issue 46: the Backward stepper walks the scrubber's step in a live session, not the window's
own recording, and says which step. The replayed reference (app.qt.live_stepper) has the worker's
bits: every node's value, and every gradient the stepper pushes, equal a ``PairRunner``'s
reference at that step."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.app.qt.live_stepper import ReferenceReplay, reference_spec
from tapescope.app.runs import PairRunner, SessionConfig
from tapescope.views.models.stepper_model import BackwardStepper
from tests.helpers.time_travel import fake_live, feed

CFG = SessionConfig(workload="transformer", compare="cpu-platform", math="platform")


@pytest.fixture(scope="module")
def worker_ref():
    """The reference side's arrays of steps 1..4 as the worker's PairRunner computed them."""
    r = PairRunner(CFG)
    out = {}
    for _ in range(4):
        res = r.step()
        st = r.store
        out[res.step] = [(st.get("ref", i, "value"), st.get("ref", i, "grad"))
                         for i in range(len(r.nodes))]
    return out


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    return a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _walk(rp: ReferenceReplay) -> BackwardStepper:
    s = BackwardStepper(rp.tape, rp.loss_id)
    while s.step():
        pass
    return s


@pytest.mark.parametrize("order", [(3, 4, 2)])  # on, on by one, back (starts over)
def test_the_replay_has_the_workers_bits_at_each_step(worker_ref, order):
    rp = ReferenceReplay(CFG)
    assert reference_spec(CFG).side == "cpu" and reference_spec(CFG).math == "refmath"
    for step in order:
        assert rp.advance(step) and rp.at == step
        want = worker_ref[step]
        for i, (v, _) in enumerate(want):
            assert _same(rp.tape.value(i), v), (step, i)
        s = _walk(rp)  # the stepper's own sweep, node by node
        for i, (_, g) in enumerate(want):
            if g is not None:
                assert _same(s.accumulated(i) if i != rp.loss_id else rp.tape.grad(i), g), \
                    (step, i)


def test_a_device_pair_replays_its_feed():
    spec = reference_spec(SessionConfig(workload="mlp", compare="unfused-fused", dtype="float32"))
    assert (spec.side, spec.math, spec.dtype) == ("cpu", "refmath", "float32")


def test_the_replay_goes_in_slices():
    rp = ReferenceReplay(SessionConfig(workload="mlp"))
    assert not rp.advance(400, budget_s=0.0)  # one step per call at a zero budget
    assert 1 <= rp.at < 400
    assert rp.advance(400) and rp.at == 400
    with pytest.raises(ValueError):
        rp.advance(0)


def test_the_window_stepper_walks_the_scrubbers_step(qtbot, win, episode):
    assert win.open_workload("transformer")
    qtbot.waitUntil(win.graph.view.is_ready)
    fake_live(win)
    results, _, _ = episode
    feed(win, results)
    walks = win.stepper_panel.walks.text
    qtbot.waitUntil(lambda: "Backward of live step 5" in walks(), timeout=10000)
    assert "replayed" in walks() and "CPU float64 refmath" in walks()
    at5 = win.stepper
    assert at5.tape is not win.session.tape  # not the window's own recording
    win.stepper_panel.step()
    win.stepper_panel.step()
    node = at5.current.node.id
    g5 = np.array(at5.current.grad, copy=True)
    x5 = [np.array(at5.tape.value(i), copy=True) for i in range(len(at5.tape))]
    want = ReferenceReplay(CFG)
    want.advance(5)
    assert all(_same(x, want.tape.value(i)) for i, x in enumerate(x5))
    win.live.travel.scrubber.spin.setValue(3)  # the scrubber moves: so does the stepper
    qtbot.waitUntil(lambda: "Backward of live step 3" in walks(), timeout=10000)
    at3 = win.stepper
    assert at3 is not at5 and at3.pos == -1  # a fresh walk of that step, from the loss
    at3.step()
    at3.step()
    assert at3.current.node.id == node
    assert not _same(at3.current.grad, g5)  # another step, other arrays
    assert win.stepper_panel.actions["step"].isEnabled()
    win.live.close()
