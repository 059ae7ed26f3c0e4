"""gui --live --explain: the Inspector's note line names why the selected node introduced
error (the worker's summaries carry the cause; the window shows it on the existing line)."""

from __future__ import annotations

from tapescope.app.runs import SessionConfig
from tests.helpers.live import click_row, shown_live, wait_ready


def test_the_inspector_says_why_softmax_introduced_error(qtbot, win):
    cfg = SessionConfig(workload="transformer", device="host", math="platform", explain=True)
    assert win.live.start(cfg, paused=True)
    wait_ready(qtbot, win)
    sm = next(n.id for n in win.session.tape.nodes if n.op == "softmax")
    win.live.single_step()
    qtbot.waitUntil(lambda: win.live.last is not None, timeout=10000)
    click_row(qtbot, win, sm)
    qtbot.waitUntil(lambda: shown_live(win, sm, 1), timeout=5000)
    size = win.session.tape.nodes[sm].size
    note = win.inspector.note.text()
    assert f"softmax #{sm} introduced " in note and any(
        f" of {size} elements: matches the reference with {v}" in note
        for v in ("the platform's (numpy's) transcendentals", "the C library's transcendentals")
    ), note
    # a node that only inherited error gets no cause
    inherited = next(e["id"] for e in win.live.last.latest.nodes
                     if e["id"] > sm and e["value"]["n_diff"]
                     and not any(i["node"] == e["id"] for i in win.live.last.latest.introduced))
    click_row(qtbot, win, inherited)
    qtbot.waitUntil(lambda: shown_live(win, inherited, 1), timeout=5000)
    assert "introduced" not in win.inspector.note.text()
