"""Live sessions in the window, driven as a user would (offscreen, host device)."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtGui import QColor

from app.live import PAUSED, RUNNING, STOPPED
from app.runs import SessionConfig
from app.session import EXACT_COLOR
from core.ops.registry import REGISTRY

BRANCHES = str(Path(__file__).parent / "data" / "branches.py")


def wait_steps(qtbot, win, n: int, timeout: int = 10000) -> None:
    qtbot.waitUntil(lambda: win.live.last is not None
                    and win.live.live.steps_done >= n and win.live.last.latest.step >= n - 1,
                    timeout=timeout)


def overlay(win) -> dict[int, str]:
    """node id → overlay colour currently drawn (items are nodes: nothing collapsed)."""
    v = win.graph.view
    item_node = v.display.item_node
    return {item_node[it]: c.name() for it, c in v.canvas.overlay.items()}


def test_live_session_updates_table_and_colours_pauses_and_resumes(qtbot, win):
    assert win.live.start(SessionConfig(workload="mlp", device="host"))
    wait_steps(qtbot, win, 3)
    assert win.live.live.state == RUNNING
    s = win.session
    assert s.comparison is not None and len(s.comparison) == len(s.tape)
    rows = win.parity.model
    assert rows.rowCount() == len(s.tape)
    assert all(rows.row_data(i).value_n_diff == 0 for i in range(rows.rowCount()))
    qtbot.waitUntil(lambda: win.graph.view.is_ready() and bool(win.graph.view.canvas.overlay))
    assert set(overlay(win).values()) == {QColor(EXACT_COLOR).name()}  # mlp: all bit-exact
    assert win.live.training.total_steps >= 3
    win.live.training.flush()  # plots redraw at a bounded rate: draw what is pending now
    assert win.live.training.ref_curve.getData()[0].size == win.live.training.steps.size >= 3
    # pause: stepping stops, the GUI keeps its last snapshot
    win.live.pause()
    qtbot.waitUntil(lambda: win.live.live.state == PAUSED)
    qtbot.wait(300)  # the step in flight (if any) lands
    done = win.live.live.steps_done
    qtbot.wait(300)
    assert win.live.live.steps_done == done
    assert win.live.last.latest.step == done - 1
    # single step: exactly one more
    win.live.act_step.trigger()
    qtbot.waitUntil(lambda: win.live.last.latest.step == done)
    qtbot.wait(200)
    assert win.live.live.steps_done == done + 1
    # resume: it runs on
    win.live.act_resume.trigger()
    wait_steps(qtbot, win, done + 4)
    win.live.stop()
    assert win.live.live.state == STOPPED
    win.live.close()
    assert not win.live.live.is_alive()


def test_platform_math_marks_exactly_the_drift(qtbot, win):
    cfg = SessionConfig(workload=BRANCHES, device="host", math="platform")
    assert win.live.start(cfg, paused=True)
    win.live.live.single_step()
    qtbot.waitUntil(lambda: win.live.last is not None, timeout=10000)
    res = win.live.last.latest
    ops = {n.id: n.op for n in win.session.tape.nodes}
    differ = {e["id"] for e in res.nodes if e["value"]["n_diff"]
              or (e["grad"] and e["grad"]["n_diff"])}
    qtbot.waitUntil(lambda: win.graph.view.is_ready() and bool(win.graph.view.canvas.overlay))
    colours = overlay(win)
    green = QColor(EXACT_COLOR).name()
    # the graph colours exactly the differing nodes (value or gradient) off green
    assert {i for i, c in colours.items() if c != green} == differ
    # the first divergences are the transcendental nodes; the first one is flagged
    assert res.roots and {ops[i] for i in res.roots} <= {
        k for k, v in REGISTRY.items() if v.transcendental}
    first = win.live.live.first["node"]
    assert REGISTRY[ops[first]].transcendental
    v = win.graph.view
    assert v.canvas.first_items == {int(v.display.node_item[first])}
    # the table's differing rows are the same nodes
    m = win.parity.model
    assert {m.row_data(i).id for i in range(m.rowCount()) if m.row_data(i).differs} == differ
    win.live.act_first.trigger()
    assert win.selected == first


def test_fused_session_fills_the_kernels_dock_and_groups(qtbot, win):
    assert win.live.start(SessionConfig(workload="transformer", device="host", fuse=True),
                          paused=True)
    qtbot.waitUntil(lambda: win.live.kernels.plan is not None, timeout=15000)
    plan = win.live.kernels.plan
    groups = [g for g in win.session.graph.groups if g.startswith("fused s")]
    assert len(groups) == len(plan["segments"])
    k = next(k for k in plan["kernels"] if k["role"] == "forward")
    win.live.kernels.select_kernel(k["name"])
    seg = plan["segments"][k["segment"]]
    assert win.live.kernels.source.toPlainText() == k["source"]
    assert "__global__" in k["source"]
    qtbot.waitUntil(win.graph.view.is_ready)
    v = win.graph.view
    assert v.canvas.kernel_items == {int(v.display.node_item[i]) for i in seg["node_ids"]}
    assert str(plan["launches_after"]["episode"]) in win.live.kernels.summary.text()
    # a fused segment collapses to one box
    g = groups[0]
    v.toggle_group(g, True)
    qtbot.waitUntil(lambda: v.is_ready() and g in v.display.item_group)
    members = win.session.graph.groups[g]
    assert len({int(v.display.node_item[i]) for i in members}) == 1


def test_a_broken_user_workload_shows_its_traceback_and_the_app_stays_up(qtbot, win, tmp_path):
    assert win.live.start(SessionConfig(workload="mlp", device="host"), paused=True)
    before = win.session
    bad = tmp_path / "broken.py"
    bad.write_text("from core.workloads import Workload\n\nclass B(Workload):\n"
                   "    def build(self):\n        raise RuntimeError('user bug 42')\n")
    assert not win.live.start(SessionConfig(workload=str(bad), device="host"))
    box = win.last_error
    assert box is not None and "user bug 42" in box.text()
    assert "Traceback" in box.detailedText() and "broken.py" in box.detailedText()
    assert win.session is before  # the session the user had is still shown
    # a failure during a step (not at load) ends up in a dialog too
    late = tmp_path / "late.py"
    late.write_text(Path(BRANCHES).read_text().replace(
        "    def batch(self, step):\n",
        "    def batch(self, step):\n        print('a user print, not a message')\n"
        "        if step == 2:\n"
        "            raise ValueError('bad batch at step 2')\n"))
    win.last_error = None
    assert win.live.start(SessionConfig(workload=str(late), device="host"))
    qtbot.waitUntil(lambda: win.last_error is not None, timeout=10000)
    assert "bad batch at step 2" in win.last_error.text()
    assert "Traceback" in win.last_error.detailedText()
    assert win.isVisible()


def test_restart_from_the_toolbar_uses_its_settings(qtbot, win):
    assert win.live.start(SessionConfig(workload="mlp", device="host"), paused=True)
    old = win.live.live
    win.live.compare_box.setCurrentIndex(win.live.compare_box.findData("cpu-platform"))
    win.live.dtype_box.setCurrentIndex(win.live.dtype_box.findData("float32"))
    win.live.act_start.trigger()
    assert win.live.live is not old and not old.is_alive()
    assert win.live.live.config.compare == "cpu-platform"
    assert win.live.live.config.dtype == "float32"
    wait_steps(qtbot, win, 2)
    # Start trains what the window shows: a workload opened from the File menu
    assert win.open_workload(BRANCHES)
    win.live.act_start.trigger()
    assert win.live.live.config.workload == BRANCHES
    assert win.live.live.config.compare == "cpu-platform"
    wait_steps(qtbot, win, 1)
    assert {e["id"] for e in win.live.last.latest.nodes} == {n.id for n in win.session.tape.nodes}
    t0 = time.perf_counter()
    win.live.close()
    assert time.perf_counter() - t0 < 2.0 and not win.live.live.is_alive()
