"""The live worker sends a step's fields without asdict's deep copy: the same JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

from app.live_worker import wire_fields
from app.runs import PairRunner, SessionConfig


def test_wire_fields_are_asdicts_json_for_exact_and_drifting_steps():
    # the transformer with platform math drifts: introduced entries, a first divergence
    for wl, math in (("mlp", "refmath"), ("transformer", "platform")):
        r = PairRunner(SessionConfig(workload=wl, device="host", math=math))
        for _ in range(2):
            res = r.step()
            assert json.dumps(wire_fields(res)) == json.dumps(asdict(res))
        if math == "platform":
            assert not res.exact and res.introduced  # the drifting case was exercised


def test_report_step_rows_are_kept_compact_and_exact():
    import math

    from app.report_data import ReportAccumulator
    from app.runs import StepResult

    r = PairRunner(SessionConfig(workload="mlp", device="host"))
    acc = ReportAccumulator(r.config, r.nodes, "ref", "cand", "host", None)
    results = [r.step() for _ in range(3)]
    # odd values the rows must keep bit for bit: NaN/inf losses, a tiny time, a huge step
    odd = StepResult(2**40, float("nan"), -math.inf, 5e-324, False, None, results[-1].nodes)
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
