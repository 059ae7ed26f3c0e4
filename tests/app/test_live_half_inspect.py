"""A live half session (issue 28): the Inspector says what each side stores and accumulates in."""

from __future__ import annotations

import os

import pytest

from tapescope.app.qt.live import PAUSED
from tapescope.app.runs import SessionConfig
from tests.helpers.live import click_row, shown_live, wait_ready


def _run(qtbot, win, device, dtype_choice):
    tb = win.live.toolbar
    win.live.config = SessionConfig(workload="mlp", device="host", explain=True)
    tb.device_box.setCurrentIndex(tb.device_box.findData(device))
    tb.dtype_box.setCurrentIndex(tb.dtype_box.findData(dtype_choice))
    tb.act_start.trigger()
    wait_ready(qtbot, win)
    assert win.live.live.info is not None, win.live.live.state
    qtbot.waitUntil(lambda: win.live.last is not None and win.live.last.latest.step >= 1,
                    timeout=120_000)
    win.live.pause()
    qtbot.waitUntil(lambda: win.live.live.state == PAUSED, timeout=60_000)
    qtbot.wait(500)
    step = win.live.last.latest.step
    mm = next(n.id for n in win.session.tape.nodes if n.op == "matmul")
    click_row(qtbot, win, mm)
    qtbot.waitUntil(lambda: shown_live(win, mm, step), timeout=60_000)
    if os.environ.get("TAPESCOPE_SHOT"):
        win.resize(1440, 900)
        qtbot.wait(300)
        win.grab().save(os.environ["TAPESCOPE_SHOT"])
    return win.inspector.note.text()


@pytest.mark.slow  # a live session: ~15 s on the loaded 2-core machine
def test_a_live_amp_session_names_storage_and_accumulator(qtbot, win):
    note = _run(qtbot, win, "host", "amp bfloat16")
    side = "amp bfloat16 (float32 masters, float32 accumulate) refmath"
    assert f"CPU {side} ↔ device unfused {side}" in note, note
    # the window's own tape stays the float64 one it opened with; the Inspector's shape line
    # reads the shown arrays' type
    assert "· bfloat16" in win.inspector.header.text(), win.inspector.header.text()


@pytest.mark.slow  # ~25 s: torch opens in the live worker thread
def test_a_live_torch_half_session_names_both_sides(qtbot, win):
    pytest.importorskip("torch")
    note = _run(qtbot, win, "torch", "bfloat16")
    assert "CPU bfloat16 (float32 accumulate)" in note, note
    assert "torch cpu bfloat16 (torch's own accumulators)" in note, note
