"""The worker pipe keeps every parity field (issue 31): ``n_nan`` and ``nan_bits_differ`` from a
worker's device diff reach this side as the worker counted them."""

from __future__ import annotations

import os

import numpy as np

from app.remote import RemoteRun
from app.runs import PairRunner, SessionConfig
from app.wire import LinePipe, encode_array, parse_line
from core.parity import TensorDiff, compare_arrays
from tests.app.test_worker import WORKER
from tests.core.test_parity_json_mutants import _nan, _report


def test_every_field_survives_the_protocol_line_codec():
    rep = _report()
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


class _Arrays:
    """What RemoteRun.compare reads of a tape: value(i), grad(i)."""

    def __init__(self, values: list, grads: list) -> None:
        self.values, self.grads = values, grads

    def value(self, i: int) -> np.ndarray:
        return self.values[i]

    def grad(self, i: int) -> np.ndarray | None:
        return self.grads[i]


def _other_payload(a: np.ndarray | None) -> np.ndarray | None:
    """``a`` with every NaN given another payload (equal under the NaN policy)."""
    if a is None:
        return None
    out = np.array(a, copy=True)
    flat = out.reshape(-1)
    flat[np.isnan(flat)] = _nan(out.dtype, 0x77)
    return out


def test_a_real_workers_nan_counts_reach_this_side_as_counted():
    """NaN inputs make the worker's device arrays NaN; this side's reference holds the same
    NaNs with another payload (nan_bits_differ) and one NaN against a number (n_nan). The
    summaries that come back are core.parity's on the same arrays, field for field."""
    r = PairRunner(SessionConfig(workload="mlp", device="host", worker=WORKER), provenance="off")
    try:
        cand = r.cand
        assert isinstance(cand, RemoteRun)
        x = next(iter(cand.feed.wl.inputs.values()))
        bad = np.array(cand.feed.wl.tape.value(x), copy=True)
        bad.reshape(-1)[0] = np.nan
        cand._ask({"cmd": "advance", "inputs": {str(x.id): encode_array(bad)}}, "ok")
        n = len(cand.nodes)
        dev_v = [cand.array(i, "value") for i in range(n)]
        dev_g = [cand.array(i, "grad") for i in range(n)]
        assert any(np.isnan(v).any() for v in dev_v), "the NaN input reached no node"
        ref_v, ref_g = [_other_payload(v) for v in dev_v], [_other_payload(g) for g in dev_g]
        k = next(i for i, v in enumerate(dev_v) if v.size > 1 and not np.isnan(v).all())
        j = int(np.flatnonzero(~np.isnan(dev_v[k].reshape(-1)))[0])
        ref_v[k].reshape(-1)[j] = np.nan  # a NaN where the device has a number
        rep = cand.compare(_Arrays(ref_v, ref_g))
        for i, e in enumerate(rep.nodes):
            assert e.value == compare_arrays(ref_v[i], dev_v[i]), i
            assert (e.grad is None) == (dev_g[i] is None), i
            if e.grad is not None:
                assert e.grad == compare_arrays(ref_g[i], dev_g[i]), i
        assert rep.nodes[k].value.n_nan == 1 and rep.nodes[k].value.n_diff == 1
        assert sum(e.value.nan_bits_differ for e in rep.nodes) > 0
        assert sum(e.grad.nan_bits_differ for e in rep.nodes if e.grad is not None) > 0
    finally:
        r.device.close()
