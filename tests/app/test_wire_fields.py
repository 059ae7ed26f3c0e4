"""A step on the pipe (``app.step_wire``): its record packed once, the same step back out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tapescope.app.runs import PairRunner, SessionConfig
from tapescope.app.step_wire import step_from_wire, step_to_wire
from tapescope.core.step_record import STEP_RECORD, pack, unpack


def test_a_step_off_the_wire_is_the_step_that_went_in_for_exact_and_drifting_steps():
    # the transformer with platform math drifts: introduced entries, a first divergence
    for wl, math in (("mlp", "refmath"), ("transformer", "platform")):
        r = PairRunner(SessionConfig(workload=wl, device="host", math=math))
        for _ in range(2):
            res = r.step()
            back = step_from_wire(json.loads(json.dumps(step_to_wire(res))), len(r.nodes),
                                  r.nodes)
            assert back.record.tobytes() == res.record.tobytes()
            assert json.dumps(back.nodes) == json.dumps(res.nodes)  # the export form too
            for k in ("step", "loss_ref", "loss_cand", "seconds", "exact", "first", "roots",
                      "provenance", "introduced", "kernels", "provenance_s", "produced"):
                assert getattr(back, k) == getattr(res, k), k
            lean = step_from_wire(step_to_wire(res, detail=False), len(r.nodes))
            assert lean.introduced == [] and lean.record.tobytes() == res.record.tobytes()
        if math == "platform":
            assert not res.exact and res.introduced  # the drifting case was exercised
            assert res.record["flags"].any()


def test_a_malformed_record_is_refused_before_it_is_inflated():
    rec = np.zeros(4, STEP_RECORD)
    rec["id"] = np.arange(4)
    text = pack(rec)
    assert unpack(text, 4).tobytes() == rec.tobytes()
    with pytest.raises(ValueError, match="not a packed record"):
        unpack(text, 3)  # more bytes than 3 rows: never inflated past them
    with pytest.raises(ValueError, match="do not fill"):
        unpack(text, 5)
    with pytest.raises(ValueError, match="not a packed record"):
        unpack("not base64!", 4)
    import base64
    import zlib

    bomb = base64.b64encode(zlib.compress(b"\0" * (64 << 20))).decode()
    with pytest.raises(ValueError, match="not a packed record"):
        unpack(bomb, 4)  # 64 MiB of zeros in 64 kB: inflated no further than 4 rows
    good = step_to_wire(PairRunner(SessionConfig(workload="mlp", device="host")).step())
    n = good["n"]
    for bad, why in (({**good, "n": n + 1}, "nodes"), ({**good, "step": True}, "step"),
                     ({**good, "loss_ref": "1"}, "numbers"), ({**good, "produced": [1.5]},
                                                               "produced")):
        with pytest.raises(ValueError, match=why):
            step_from_wire(bad, n)
    with pytest.raises(ValueError, match="without"):
        step_from_wire({k: v for k, v in good.items() if k != "record"}, n)


def test_report_step_rows_are_kept_compact_and_exact():
    import math

    from tapescope.app.report_data import ReportAccumulator
    from tapescope.app.runs import StepResult

    r = PairRunner(SessionConfig(workload="mlp", device="host"))
    acc = ReportAccumulator(r.config, r.nodes, "ref", "cand", "host", None)
    results = [r.step() for _ in range(3)]
    # odd values the rows must keep bit for bit: NaN/inf losses, a tiny time, a huge step
    odd = StepResult(2**40, float("nan"), -math.inf, 5e-324, False, None, results[-1].record)
    for res in [*results, odd]:
        acc.add(res)
    want = [[x.step, x.loss_ref, x.loss_cand, x.seconds, x.exact] for x in [*results, odd]]
    got = acc.to_json()["steps"]
    assert [[s["step"], s["loss_ref"], s["loss_cand"], s["seconds"], s["exact"]]
            for s in got][:3] == want[:3]
    assert json.dumps(got[3]) == json.dumps({"step": 2**40, "loss_ref": math.nan,
                                             "loss_cand": -math.inf, "seconds": 5e-324,
                                             "exact": False, "max_ulp": got[3]["max_ulp"]})
    assert [type(s["step"]) for s in got] == [int] * 4
    assert [type(s["exact"]) for s in got] == [bool] * 4


def test_half_arrays_cross_the_wire_bit_for_bit():
    # issue 28: the live worker's tensors of a half episode (bfloat16 is numpy kind "V": it is
    # sent by its name; any other "V" dtype stays refused)
    import numpy as np
    import pytest

    from tapescope.app.wire import decode_array, encode_array
    from tapescope.core.precision import BFLOAT16

    for dt in (np.float16, BFLOAT16):
        a = (np.arange(12, dtype=np.float32).reshape(3, 4) / 7).astype(dt)
        b = decode_array(encode_array(a))
        assert b.dtype == a.dtype and np.array_equal(a.view(np.uint16), b.view(np.uint16))
    with pytest.raises(ValueError, match="not a numeric dtype"):
        decode_array({"dtype": "|V2", "shape": [1], "data": "AAA="})
