"""The worker pipe keeps every parity field (issue 31): ``n_nan`` and ``nan_bits_differ`` from a
worker's device diff reach this side as the worker counted them."""

from __future__ import annotations

import os

from tapescope.app.wire import LinePipe, parse_line
from tapescope.core.parity import TensorDiff
from tests.helpers.parity import nan_report


def test_every_field_survives_the_protocol_line_codec():
    rep = nan_report()
    r, w = os.pipe()
    try:
        pipe = LinePipe(r, w)
        pipe.send({"type": "parity", "nodes": [
            {"value": n.value.to_json(), "grad": None if n.grad is None else n.grad.to_json()}
            for n in rep.nodes]})
        got = parse_line(pipe.receive(1 << 20), "test", 100)
    finally:
        os.close(r)
        os.close(w)
    back = [(TensorDiff.from_json(e["value"]),
             None if e["grad"] is None else TensorDiff.from_json(e["grad"]))
            for e in got["nodes"]]
    assert back == [(n.value, n.grad) for n in rep.nodes]
    assert back[1][0].n_nan == 2 and back[1][0].nan_bits_differ == 3
    assert back[0][0].nan_bits_differ == 1 and back[0][0].n_diff == 0


def test_every_field_survives_the_step_record_on_the_pipe():
    """What the worker sends once per step (protocol 2: the whole pair runs there) is the
    packed step record (core.step_record.pack); through a real pipe and back, every
    TensorDiff field of every node, NaN counts and NaN-payload counts included, is as the
    worker counted it."""
    from types import SimpleNamespace

    from tapescope.core.step_record import node_parity, pack, record_of, unpack

    rep = nan_report()
    labels = [SimpleNamespace(op=n.op, name=n.name) for n in rep.nodes]
    r, w = os.pipe()
    try:
        pipe = LinePipe(r, w)
        pipe.send({"type": "step", "record": pack(record_of(rep.nodes))})
        got = parse_line(pipe.receive(1 << 20), "test", 100)
    finally:
        os.close(r)
        os.close(w)
    back = node_parity(unpack(got["record"], len(rep.nodes)), labels)
    assert [(b.value, b.grad) for b in back] == [(n.value, n.grad) for n in rep.nodes]
    assert back[1].value.n_nan == 2 and back[1].value.nan_bits_differ == 3
    assert back[0].value.nan_bits_differ == 1 and back[0].value.n_diff == 0
    assert back[2].grad is None
