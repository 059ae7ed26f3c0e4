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
