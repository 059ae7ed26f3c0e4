"""The backward stepper model walks the tape's own sweep, bit for bit (no Qt); the stepper dock's
contribution table shows, column by column, the contribution each row stands for."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tapescope.core import workloads
from tapescope.views.models.stepper_model import BackwardStepper


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
    from tapescope.core import Tape, ops

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


# ---- the stepper dock's table: every column against the contribution its row shows ------------
STEPPER_HEADERS = ("input", "contribution", "before", "after", "sum check")


def _numbers(text: str) -> tuple[float, ...]:
    """The numbers a summary cell shows: one scalar, or (sum, max |x|) of an array."""
    m = re.fullmatch(r"Σ (\S+)\nmax\|·\| (\S+)", text)  # two lines: the max never cut
    return (float(m[1]), float(m[2])) if m else (float(text),)


def _shows(text: str, a) -> bool:
    """The cell's numbers are a's (to the 3 digits shown), computed here from a itself."""
    a = np.asarray(a, dtype=np.float64)
    want = (float(a.reshape(-1)[0]),) if a.size == 1 else (float(a.sum()), float(np.abs(a).max()))
    got = _numbers(text)
    return len(got) == len(want) and all(abs(g - w) <= 5e-3 * abs(w) + 1e-12
                                          for g, w in zip(got, want, strict=True))


def check_stepper_table(panel, ev, labels: dict[int, str]) -> None:
    from PySide6.QtCore import Qt

    tab = panel.table
    heads = [tab.horizontalHeaderItem(c).text() for c in range(tab.columnCount())]
    assert set(heads) == set(STEPPER_HEADERS), f"untested stepper column(s): {heads}"
    col = {h: c for c, h in enumerate(heads)}
    assert tab.rowCount() == len(ev.contributions)
    for r, c in enumerate(ev.contributions):
        cell = {h: tab.item(r, col[h]).text() for h in STEPPER_HEADERS}
        assert cell["input"] == f"#{c.input_id} {labels[c.input_id]}"
        assert _shows(cell["contribution"], c.value), (r, cell)
        assert cell["before"] == "— (first)" if c.before is None else \
            _shows(cell["before"], c.before), (r, cell)
        assert _shows(cell["after"], c.after), (r, cell)
        before = np.zeros_like(c.value) if c.before is None else c.before
        adds_up = np.asarray(before + c.value).tobytes() == np.asarray(c.after).tobytes()
        assert cell["sum check"] == ("✓ adds up" if adds_up else "✗ differs"), (r, cell)
        for h in STEPPER_HEADERS:  # a double-click on any cell selects the input node
            assert tab.item(r, col[h]).data(Qt.UserRole) == c.input_id


def test_stepper_table_shows_each_contribution_column_by_column(qtbot):
    from tapescope.core import Tape, ops
    from tapescope.views.stepper_view import StepperPanel

    t = Tape()
    w = t.param(np.array([1.5, -2.0, 0.25]), name="w")
    v = t.param(np.array([[3.0]]), name="v")
    y = ops.mul(w, w) + ops.exp(w) * v  # w gets three contributions, v one (a [1, 1] sum)
    loss = ops.sum(y)
    labels = {n.id: f"{n.op} {n.name or ''}".strip() for n in t.nodes}
    panel = StepperPanel()
    qtbot.addWidget(panel)
    s = BackwardStepper(t, loss.id)
    panel.set_stepper(s, labels)
    seen_first = seen_later = 0
    while s.step():
        check_stepper_table(panel, s.current, labels)
        seen_first += sum(c.before is None for c in s.current.contributions)
        seen_later += sum(c.before is not None for c in s.current.contributions)
    assert seen_first and seen_later  # both kinds of "before" cell were checked
    s.step_back()  # stepping back shows the earlier event's rows again
    check_stepper_table(panel, s.current, labels)


def test_stepper_table_says_when_a_sum_does_not_add_up(qtbot):
    from types import SimpleNamespace

    from tapescope.core.tape import BackwardStep, Contribution
    from tapescope.views.stepper_view import StepperPanel

    one = np.array([1.0, 2.0])
    off = np.nextafter(one + one, np.inf)  # one ulp away from before + value
    ev = BackwardStep(SimpleNamespace(id=4), one, (
        Contribution(1, one, None, one + 0.0), Contribution(2, one, one, one + one),
        Contribution(3, one, one, off)))
    fake = SimpleNamespace(current=ev, pos=0, at_end=False, breakpoints=set(), loss_id=4,
                           listeners=[])
    panel = StepperPanel()
    qtbot.addWidget(panel)
    labels = {1: "a", 2: "b", 3: "c", 4: "loss"}
    panel.set_stepper(fake, labels)
    check_stepper_table(panel, ev, labels)
    col = STEPPER_HEADERS.index("sum check")
    assert [panel.table.item(r, col).text()[0] for r in range(3)] == ["✓", "✓", "✗"]


# ---- position-bound queries (survivors of a mutmut run of views/models/stepper_model.py) ----
def test_queries_answer_for_the_step_on_display_not_for_later_ones():
    from tapescope.core import Tape, ops

    t = Tape(dtype="float32")
    w = t.param(np.array([1.5, -2.0], dtype=np.float32), name="w")
    loss = ops.sum(ops.mul(w, w) + ops.exp(w))
    s = BackwardStepper(t, loss.id)
    seed = s.accumulated(loss.id)  # before any step: the ones the sweep seeds the loss with
    assert seed.dtype == np.float32 and seed.tobytes() == np.ones((), np.float32).tobytes()
    assert s.accumulated(w.id) is None and s.contributions_to(w.id) == []
    seen = []  # (pos, accumulated w, contributions to w) after each step
    while s.step():
        acc = s.accumulated(w.id)
        seen.append((s.pos, None if acc is None else acc.copy(), len(s.contributions_to(w.id))))
    assert len({n for _, _, n in seen}) > 2  # w's gradient grows over several steps
    for pos, acc, n in reversed(seen[:-1]):  # walk back: every answer is the one given then
        assert s.step_back() and s.pos == pos
        assert same_bits(s.accumulated(w.id), acc) and len(s.contributions_to(w.id)) == n


def test_step_back_reaches_the_start_and_restart_notifies():
    tape, loss = recorded("mlp")
    s = BackwardStepper(tape, loss)
    heard = []
    s.listeners.append(lambda: heard.append(s.pos))
    s.step(), s.step()
    assert s.step_back() and s.pos == 0 and s.current is s.history[0]
    assert s.step_back() and s.pos == -1 and s.current is None  # back to "ready"
    assert not s.step_back() and s.pos == -1
    heard.clear()
    s.restart()
    assert heard == [-1]  # the views hear a restart
    assert s.toggle_breakpoint(3) is True and s.toggle_breakpoint(3) is False
