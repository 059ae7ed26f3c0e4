"""A capture's header is written strict (core/capture/file.py ``header_json``): orjson writes
it, but orjson would write a non-finite float as ``null``. Non-finite scalar arguments of the
user's ops reach the file spelled out (``{"f": "-inf"}``) and come back as they were; one
anywhere else is refused before a byte is written; what orjson cannot write, json does."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.app.capture import recorder as R  # noqa: E402
from tapescope.core.capture import file as F  # noqa: E402


def _record(fn) -> R.Recorder:
    """One recorded step: ``fn``'s ops, then an SGD step (a step ends at ``optimizer.step()``;
    the file holds complete steps only)."""
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.1)
    rec = R.Recorder(steps=1).start()
    try:
        fn()
        w.grad = torch.ones(2)
        opt.step()
    finally:
        rec.stop()
    assert rec.steps_done() == 1 and rec.failed is None
    return rec


def test_non_finite_scalar_arguments_come_back_spelled_out(tmp_path):
    x = torch.linspace(-2, 2, 12).reshape(3, 4)
    mask = x > 0

    def step():
        x.masked_fill(mask, float("-inf"))
        torch.clamp(x, max=float("inf"))
        torch.full((2,), float("nan"))
        x.mul(2.5)

    rec = _record(step)
    path = rec.save(str(tmp_path / "s.capture"))
    ops = F.load(path).ops
    args = [json.dumps(a) for a in ops["args"]]
    kwargs = [json.dumps(k) for k in ops["kwargs"]]
    both = " ".join(args + kwargs)
    # each non-finite number written as a word, never null, never a bare NaN/Infinity token
    for word in ('{"f": "-inf"}', '{"f": "inf"}', '{"f": "nan"}'):
        assert word in both, (word, both)
    assert "2.5" in both
    raw = open(path, "rb").read()
    text = raw[raw.rindex(b'{"format"'):]  # the header (the arrays' bytes before it)
    assert b"NaN" not in text and b"Infinity" not in text and b'"f":"-inf"' in text
    # the rows are the recorder's own, field for field (ints, strings, dicts, lists)
    assert ops["args"] == [list(r[5]) for r in rec.rows]
    assert len(ops["args"]) >= 4


def test_orjson_writes_what_json_would(tmp_path):
    x = torch.randn(4, 4, requires_grad=True)

    def step():
        (x.relu() * 3).sum().backward()

    rec = _record(step)
    header, _ = rec.header_and_arrays()
    h = {"format": F.FORMAT, "version": F.VERSION, **header, "arrays": []}
    assert json.loads(F.header_json(h)) == json.loads(
        json.dumps(h, separators=(",", ":"), allow_nan=False))


@pytest.mark.parametrize("where", ["meta", "settings"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_float_outside_the_encoded_parts_is_refused_before_writing(
        tmp_path, where, bad):
    rec = _record(lambda: torch.ones(3).add(1))
    header, arrays = rec.header_and_arrays({"record_seconds_x": 1.0})
    header[where] = {**header[where], "planted": bad}
    out = tmp_path / "bad.capture"
    with pytest.raises(ValueError, match="[Oo]ut of range float"):
        F.save(out, header, arrays, digests=rec._digests)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary left either


def test_what_orjson_refuses_is_written_by_json(tmp_path):
    """An integer beyond 64 bits (orjson refuses it): the file is still written, by json."""
    rec = _record(lambda: torch.ones(3).add(1))
    header, arrays = rec.header_and_arrays({"big": 2**70})
    out = F.save(tmp_path / "big.capture", header, arrays, digests=rec._digests)
    cap = F.load(out)
    assert cap.meta["big"] == 2**70
    # the values come back too: ones(3).add(1)'s output among them
    assert any(np.array_equal(cap.value(o[0]), np.full(3, 2.0))
               for o in cap.ops["outputs"] if o and cap.value(o[0]) is not None)
