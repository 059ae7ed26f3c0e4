"""What time travel hands the graph of a live step, as arrays: the palette codes give each node
the colour ``worst_colors`` gives it, and what the reader thread derives from a record is what
the GUI would compute from it."""

from __future__ import annotations

import numpy as np

from tapescope.app.qt.live import _snapshot
from tapescope.app.session import EXACT_COLOR, NAN_COLOR, ulp_color, worst_codes, worst_colors
from tapescope.app.step_history import StepHistory, compact
from tapescope.core.step_record import F_V_INTRO, STEP_RECORD, pack, worst


def test_the_codes_give_every_node_the_colour_of_its_worst():
    rng = np.random.default_rng(3)
    for w in (rng.choice([0.0, -0.0, 1.0, 3.0, 2.0**30, -1.0, np.nan], 500),
              np.array([2.0, 2.0, 7.0]),  # nothing exact: no green in the palette
              np.zeros(4), np.zeros(0)):
        code, palette = worst_codes(w)
        assert code.shape == w.shape
        ids = list(range(w.size))
        assert {i: palette[c] for i, c in zip(ids, code.tolist(), strict=True)} == \
            worst_colors(ids, w)
        want = [NAN_COLOR if u < 0 else EXACT_COLOR if u == 0 else ulp_color(u)
                for u in w.tolist()]
        assert [palette[c] for c in code.tolist()] == want
    assert EXACT_COLOR not in worst_codes([2.0, 7.0])[1]


def _message(n: int) -> dict:
    rng = np.random.default_rng(0)
    rec = np.zeros(n, STEP_RECORD)
    rec["id"] = np.arange(n)
    rec["v_n"] = rec["g_n"] = 8
    u = rng.integers(0, 4, n) * (rng.random(n) < 0.3)
    rec["v_diff"], rec["v_ulp"], rec["v_first"] = (u > 0), u, np.where(u > 0, 0, -1)
    rec["g_first"] = -1
    rec["flags"] = np.where(u > 0, F_V_INTRO, 0)
    wire = {"step": 1, "loss_ref": 1.0, "loss_cand": 1.0, "seconds": 0.1, "exact": False,
            "first": None, "provenance": True, "kernels": [], "provenance_s": 0.0,
            "produced": [], "roots": [], "n": n, "record": pack(rec)}
    return {"type": "snapshot", "state": "running", "steps_done": 1, "steps": [wire],
            "first": None, "steps_per_s": 1.0}


def test_the_reader_thread_derives_what_the_gui_reads_of_a_record():
    snap = _snapshot(_message(300))
    res = snap.results[0]
    assert np.array_equal(res.node_max_ulp(), worst(res.record))
    assert (res.node_max_ulp() > 0).any()
    made = res.derived["history"]
    assert made.tobytes() == compact(res.record).tobytes()
    h = StepHistory()
    h.add(res)
    assert h.records[0] is made  # taken as made, not compacted again
    res.derived.clear()  # a result from elsewhere (nothing derived): the same, computed here
    h2 = StepHistory()
    h2.add(res)
    assert h2.records[0].tobytes() == made.tobytes()
