"""A view op's output is one value, however it is read next (issue 42's speed work): autograd
gives a view its base's version counter after the op returns, so its next read came at another
version than the one the recorder saw, and the same bytes were copied, hashed and counted to
the budget a second time (a weight's ``t`` on every step after the first optimizer step)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import recorder as R  # noqa: E402


def _run(steps: int = 3) -> R.Recorder:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(16, 32)
    rec = R.Recorder(steps=steps).start()
    try:
        for _ in range(steps):
            loss = m(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()  # the weights' version counters move: each later ``t`` reads at another
    finally:
        rec.stop()
    return rec


def test_the_next_op_reads_the_value_the_view_made():
    rec = _run()
    names = {i: n for n, i in rec.tables["names"].items()}
    t_outs = {}  # value id -> step of each ``t`` of a weight
    for row in rec.rows:
        if names[row[0]] == "aten.t.default":
            t_outs[row[7][0]] = row[3]
    assert {s for s in t_outs.values()} == {1, 2, 3}
    read = set()
    for row in rec.rows:
        for a in row[5]:
            if isinstance(a, dict) and "T" in a:
                read.add(a["T"])
    unread = sorted(s for v, s in t_outs.items() if v not in read)
    assert not unread, f"a t's output was recorded again when read, on steps {unread}"


def test_a_view_read_after_its_base_was_written_is_a_new_value():
    """The shortcut is for the version the base has when the view is made; a write to the base
    in between moves the shared counter, and the view is read afresh (its new bytes)."""
    w = torch.ones(4, 4)
    rec = R.Recorder(steps=1).start()
    try:
        v = w.t()
        w.add_(1.0)  # the base written: v's bytes are new
        y = v * 2.0
    finally:
        rec.stop()
    names = {i: n for n, i in rec.tables["names"].items()}
    rows = {names[r[0]]: r for r in rec.rows}
    made = rows["aten.t.default"][7][0]
    read = rows["aten.mul.Tensor"][5][0]["T"]
    assert read != made
    assert rec.v_array[read].tolist() == (torch.ones(4, 4) * 2).tolist()
    assert rec.v_array[made].tolist() == torch.ones(4, 4).tolist()
    assert y.tolist() == (torch.ones(4, 4) * 4).tolist()
