"""Selecting a node during a live session shows that node on both sides, fetched on demand."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from tapescope.app.live_worker import decode_array, encode_array, inspect_message
from tapescope.app.qt.live import STOPPED
from tapescope.app.runs import PairRunner, SessionConfig
from tests.helpers.live import click_node, click_row, shown_live, wait_ready


def bits(a: np.ndarray) -> bytes:
    return np.asarray(a).tobytes(order="C")


def test_platform_math_device_side_of_a_selected_softmax(qtbot, win):
    cfg = SessionConfig(workload="transformer", device="host", math="platform")
    assert win.live.start(cfg, paused=True)
    wait_ready(qtbot, win)  # the worker's own "ready": kernels compile first on a cold cache
    assert win.live.info
    sm = next(n.id for n in win.session.tape.nodes if n.op == "softmax")
    win.select_node(sm)  # before any step: nothing to fetch yet, and the panel says so
    assert "no step has run yet" in win.inspector.note.text()
    win.live.single_step()
    qtbot.waitUntil(lambda: win.live.last is not None, timeout=10000)
    click_row(qtbot, win, sm)
    assert win.selected == sm
    qtbot.waitUntil(lambda: shown_live(win, sm, 1), timeout=5000)
    # the same episode stepped here, independently of the worker: the bits must be the same
    here = PairRunner(cfg)
    here.step()
    ref_v, cand_v = here.ref.array(sm, "value"), here.cand.array(sm, "value")
    ref_g, cand_g = here.ref.array(sm, "grad"), here.cand.array(sm, "grad")
    d, dv = win.inspector.details, win.inspector.device_view
    assert win.inspector.tabs.currentWidget() is dv  # the comparison is what the user sees
    assert bits(d.device_value) == bits(cand_v) and bits(d.value) == bits(ref_v)
    assert bits(dv.dev_view.array) == bits(cand_v) and bits(dv.cpu_view.array) == bits(ref_v)
    differ = ref_v.view(np.int64) != cand_v.view(np.int64)
    assert differ.any() and not differ.all()  # platform exp drifts on some elements only
    assert np.array_equal(dv.ulp != 0, differ)  # the map is nonzero exactly where bits differ
    entry = next(e for e in win.live.last.latest.nodes if e["id"] == sm)
    assert int(differ.sum()) == entry["value"]["n_diff"]  # and agrees with the parity table
    assert dv.ulp.max() == entry["value"]["max_ulp"]
    assert f"{entry['value']['n_diff']} of {ref_v.size} differ" in dv.summary.text()
    assert "platform" in dv.dev_title.toolTip() and "refmath" in dv.ref_title.toolTip()
    dv.show_which("grad")
    assert bits(dv.dev_view.array) == bits(cand_g) and bits(dv.cpu_view.array) == bits(ref_g)
    assert np.array_equal(dv.ulp != 0, ref_g.view(np.int64) != cand_g.view(np.int64))
    # one more step while paused: the selected node follows it
    win.live.act_step.trigger()
    qtbot.waitUntil(lambda: shown_live(win, sm, 2), timeout=10000)
    here.step()
    assert bits(win.inspector.details.device_value) == bits(here.cand.array(sm, "value"))
    assert bits(win.inspector.details.grad) == bits(here.ref.array(sm, "grad"))


def test_exact_run_has_an_all_zero_map_and_a_stopped_session_still_answers(qtbot, win):
    cfg = SessionConfig(workload="transformer", device="host", math="refmath")
    assert win.live.start(cfg, max_steps=2)
    wait_ready(qtbot, win)
    qtbot.waitUntil(lambda: win.live.live.state == STOPPED and win.live.last is not None
                    and win.live.last.extra["steps_done"] == 2, timeout=15000)
    qtbot.waitUntil(win.graph.view.is_ready)
    sm = next(n.id for n in win.session.tape.nodes if n.op == "softmax")
    click_node(qtbot, win, sm)
    assert win.selected == sm
    qtbot.waitUntil(lambda: shown_live(win, sm, 2), timeout=5000)
    dv = win.inspector.device_view
    d = win.inspector.details
    assert d.device_value is not None and bits(d.device_value) == bits(d.value)
    assert dv.ulp is not None and dv.ulp.shape == d.value.shape and not dv.ulp.any()
    assert "bit-identical" in dv.summary.text()
    # tearing the session down gives the inspector back the window's own tape
    win.live.close()
    assert win.inspector.details.sides is None and win.inspector.details.device_value is None
    assert win.inspector.tabs.indexOf(dv) < 0


def test_arrays_travel_as_raw_bytes_and_bad_messages_are_refused():
    for a in (np.linspace(-1, 1, 24).reshape(2, 3, 4), np.full((), 3.5, dtype=np.float32),
              np.arange(6, dtype=np.int64).reshape(3, 2)[:, ::-1], np.zeros((0, 4))):
        b = decode_array(encode_array(a))
        assert b.dtype == a.dtype and b.shape == a.shape and bits(b) == bits(a)
        assert b.flags.writeable
    assert encode_array(None) is None and decode_array(None) is None
    good = encode_array(np.ones(4))
    with pytest.raises(ValueError, match="not a numeric dtype"):
        decode_array({**good, "dtype": "|O"}, "node #3 ref value")
    with pytest.raises(ValueError, match="node #3 cand grad: 32 bytes do not fill shape"):
        decode_array({**good, "shape": [5]}, "node #3 cand grad")
    with pytest.raises(ValueError, match="malformed"):
        decode_array({**good, "data": "!!not base64!!"})
    with pytest.raises(ValueError, match="malformed"):
        decode_array({"dtype": "<f8", "shape": [1]})
    with pytest.raises(ValueError, match="numeric dtypes only"):
        encode_array(np.array([object()]))
    assert base64.b64decode(good["data"]) == np.ones(4).tobytes()


def test_worker_reply_names_what_is_wrong():
    r = PairRunner(SessionConfig(workload="mlp", device="host"))
    assert inspect_message(None, 0)["error"] == "the live session is still starting"
    assert inspect_message(r, 0)["error"] == "no step has run yet"
    r.step()
    n = len(r.nodes)
    assert f"node #{n} is not compared (ids 0..{n - 1})" in inspect_message(r, n)["error"]
    assert "integer id" in inspect_message(r, "3")["error"]
    ok = inspect_message(r, n - 1)
    assert ok["error"] is None and ok["step"] == 1
    loss = decode_array(ok["cand"]["value"])
    assert loss.shape == () and float(loss) == r.cand.loss()


def test_one_slice_box_moves_all_three_drawings(qtbot):
    from tapescope.views.inspector import DeviceCompareView

    v = DeviceCompareView()
    qtbot.addWidget(v)
    v.show()
    ref = np.linspace(0, 1, 24).reshape(2, 3, 4)
    dev = ref.copy()
    dev[1, 2, 3] = np.nextafter(dev[1, 2, 3], 2.0)  # one ulp, only in the second slice
    v.set_arrays(ref, dev)
    assert not any(w.slice_row.isVisible() for w in (v.cpu_view, v.dev_view, v.ulp_view))
    assert not v.ulp_view.current_slice().any() and len(v.spins) == 1
    v.spins[0].setValue(1)
    assert np.array_equal(v.cpu_view.current_slice(), ref[1])
    assert np.array_equal(v.dev_view.current_slice(), dev[1])
    assert v.ulp_view.current_slice()[2, 3] == 1 and v.ulp_view.current_slice().sum() == 1
    v.set_pairs((ref, dev), (ref * 2, ref * 2))
    v.show_which("grad")  # the other pair of the same shape keeps the slice on screen
    assert v.spins[0].value() == 1 and np.array_equal(v.dev_view.current_slice(), ref[1] * 2)
    assert not v.ulp.any() and "all 24 elements bit-identical" in v.summary.text()
