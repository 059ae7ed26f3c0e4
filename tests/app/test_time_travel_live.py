"""Time travel against a real worker: scrubbed back to step 1 of 3, the window shows step 1's
parity and asks the worker for step 1's arrays (kept in its tensor window); the bits are those
of the same episode stepped here."""

from __future__ import annotations

import numpy as np

from tapescope.app.runs import PairRunner, SessionConfig
from tests.helpers.live import wait_ready

CFG = SessionConfig(workload="transformer", device="host", math="platform")


def bits(a) -> bytes:
    return np.asarray(a).tobytes()


def test_scrubbing_back_shows_that_steps_arrays_from_the_worker(qtbot, win):
    assert win.live.start(CFG, paused=True)
    wait_ready(qtbot, win)
    for k in (1, 2, 3):
        win.live.act_step.trigger()
        qtbot.waitUntil(lambda k=k: win.live.travel.history is not None
                        and win.live.travel.history.step_nums[-1:] == [k], timeout=20000)
    travel = win.live.travel
    assert travel.view_step == 3 and travel.history.step_nums == [1, 2, 3]
    here = PairRunner(CFG)
    res = here.step()
    sm = next(e["node"] for e in res.introduced if e["which"] == "value")
    ref_v, cand_v = here.ref.array(sm, "value").copy(), here.cand.array(sm, "value").copy()
    travel.scrubber.spin.setValue(1)  # typed into the step box
    assert travel.view_step == 1
    m = win.parity.model
    got = {m.row_data(i).id: m.row_data(i).value_n_diff for i in range(m.rowCount())}
    assert all(got[e["id"]] == e["value"]["n_diff"] for e in res.nodes)
    win.select_node(sm)
    qtbot.waitUntil(lambda: win.live.shown is not None and win.live.shown.node == sm
                    and win.live.shown.step == 1, timeout=10000)
    d = win.inspector.details
    assert d.step == 1 and bits(d.device_value) == bits(cand_v) and bits(d.value) == bits(ref_v)
    assert bits(d.device_value) != bits(win.live.inspections.get((sm, 1)).ref_value)
    # and forward again to the latest: step 3's arrays
    here.step()
    here.step()
    travel.scrubber.latest()
    qtbot.waitUntil(lambda: win.live.shown is not None and win.live.shown.step == 3,
                    timeout=10000)
    assert bits(win.inspector.details.device_value) == bits(here.cand.array(sm, "value"))
