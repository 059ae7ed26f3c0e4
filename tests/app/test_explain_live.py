"""--explain in the live path: the step summary carries each explained array's cause, the
history keeps it per step, and the Inspector's note line says it (no Qt needed)."""

from __future__ import annotations

import numpy as np

from tapescope.app.live_inspect import cause_line, live_details
from tapescope.app.runs import PairRunner, SessionConfig
from tapescope.app.step_history import StepHistory
from tapescope.app.step_wire import step_from_wire, step_to_wire
from tapescope.views.models.node_details import NodeDetails


def test_a_platform_math_step_carries_libm_causes_to_the_inspector_line():
    cfg = SessionConfig(workload="transformer", device="host", math="platform", explain=True)
    r = PairRunner(cfg).step()
    # what the live worker sends per step (no detail): the explained entries ride along
    wire = step_to_wire(r, detail=False)
    assert wire["introduced"], "platform math introduces error on the transformer"
    assert all(e.get("explain") for e in wire["introduced"])
    h = StepHistory()
    h.add(step_from_wire(wire, len(r.record)))
    sm = next(e for e in r.introduced if e["op"] == "softmax" and e["which"] == "value")
    rows = h.causes(r.step, sm["node"])
    assert rows and rows[0][2] == "libm"
    line = cause_line("softmax", sm["node"], 512, rows)
    # which libm variant matches depends on the CPU (numpy's loops are glibc's or its own)
    # ... and the class (issue 44): a libm difference is within the function's own bound
    assert line in (f"softmax #{sm['node']} introduced {sm['max_ulp']} ulp on {sm['n_diff']} of "
                    f"512 elements: matches the reference with {v}; valid reordering"
                    for v in ("the platform's (numpy's) transcendentals",
                              "the C library's transcendentals"))
    assert h.causes(r.step + 1, sm["node"]) == []


def test_live_details_puts_the_cause_on_the_note_line():
    class Got:
        ref_value = cand_value = np.zeros(4)
        ref_grad = cand_grad = None
        reference, candidate, step = "CPU", "device", 3

    d = NodeDetails(35, "softmax", "attn/p", (2, 2), "float64", None, None, ())
    rows = [[35, "value", "reciprocal", "matches the reference with x * (1/y)", 3, 1]]
    out = live_details(d, Got(), None, rows)
    assert out.note.endswith("softmax #35 introduced 1 ulp on 3 of 4 elements: matches the "
                             "reference with x * (1/y)")
    assert "\n" not in out.note
    assert "introduced" not in live_details(d, Got(), None, []).note
