"""Live sessions in the window, driven as a user would (offscreen, host device)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from tapescope.app.qt.live import (
    FAILED,
    LOG_TAIL_BYTES,
    PAUSED,
    ROOT,
    RUNNING,
    STOPPED,
    LiveSession,
)
from tapescope.app.runs import SessionConfig
from tapescope.app.session import EXACT_COLOR
from tapescope.core.optable.registry import REGISTRY
from tests.helpers.live import BRANCHES, READY_MS, wait_ready


def wait_steps(qtbot, win, n: int, timeout: int = 10000) -> None:
    wait_ready(qtbot, win)  # not a fixed wait: kernels compile first on a cold cache
    qtbot.waitUntil(lambda: win.live.last is not None
                    and win.live.live.steps_done >= n and win.live.last.latest.step >= n,
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
    assert win.live.last.latest.step == done  # from 1
    # single step: exactly one more
    win.live.act_step.trigger()
    qtbot.waitUntil(lambda: win.live.last.latest.step == done + 1)
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
    wait_ready(qtbot, win)
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
    wait_ready(qtbot, win)
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
    bad.write_text("from tapescope.core.workloads import Workload\n\nclass B(Workload):\n"
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
    wait_ready(qtbot, win)
    qtbot.waitUntil(lambda: win.last_error is not None, timeout=10000)
    assert "bad batch at step 2" in win.last_error.text()
    assert "Traceback" in win.last_error.detailedText()
    assert win.isVisible()
    # what the workload printed is in Live ▸ Worker log, not lost and not in the messages
    win.live.act_log.trigger()
    assert win.live.log_window.isVisible()
    qtbot.waitUntil(lambda: "a user print, not a message" in
                    win.live.log_window.text.toPlainText())


def test_restart_from_the_toolbar_uses_its_settings(qtbot, win):
    assert win.live.start(SessionConfig(workload="mlp", device="host"), paused=True)
    old = win.live.live
    win.live.compare_box.setCurrentIndex(win.live.compare_box.findData("cpu-platform"))
    win.live.dtype_box.setCurrentIndex(win.live.dtype_box.findData("float32"))
    win.live.act_start.trigger()
    # close() ends a worker still building its runner with SIGKILL after its 2 s; the reaper
    # thread then needs a moment (Popen.poll() says "running" while that thread waits)
    assert win.live.live is not old and wait_for(lambda: not old.is_alive(), 5.0)
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


# ---- hostile workloads: the worker process must never hang, flood or outlive the GUI ------------

LIVE_WORKER_CHILD = "import time; time.sleep(600)"


def hostile(tmp_path: Path, name: str, batch: str = "", build: str = "") -> str:
    """``branches.py`` with ``batch`` run first in every ``batch(step)`` (``build`` in build)."""
    src = Path(BRANCHES).read_text()
    src = "import os\nimport subprocess\nimport sys\nimport time\n" + src
    if build:
        src = src.replace("    def build(self):\n",
                          "    def build(self):\n" + textwrap.indent(build, " " * 8))
    if batch:
        src = src.replace("    def batch(self, step):\n",
                          "    def batch(self, step):\n" + textwrap.indent(batch, " " * 8))
    f = tmp_path / f"{name}.py"
    f.write_text(src)
    return str(f)


def dead(pid: int) -> bool:
    """No such process, or only its zombie left."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def reaped(pid: int) -> bool:
    """Not even a zombie left (its parent waited for it)."""
    return not os.path.exists(f"/proc/{pid}")


def wait_for(cond, timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def session(qtbot, workload: str, **kw) -> LiveSession:
    s = LiveSession(SessionConfig(workload=workload, device="host"), 0.05, **kw)
    s.start()
    return s


def test_close_never_blocks_on_a_child_the_workload_left_behind(qtbot, tmp_path):
    pidfile = tmp_path / "child.pid"
    wl = hostile(tmp_path, "orphan", build=(
        f"p = subprocess.Popen([sys.executable, '-c', {LIVE_WORKER_CHILD!r}])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"))
    s = session(qtbot, wl)
    try:
        qtbot.waitUntil(lambda: s.steps_done >= 1 or s.state == FAILED, timeout=READY_MS)
        assert s.state != FAILED
        child = int(pidfile.read_text())
        worker = s.proc.pid
        t = threading.Thread(target=s.close, daemon=True)
        t.start()
        t.join(20)  # a hang guard, not a timing: close waits a few seconds at most
        assert not t.is_alive(), "LiveSession.close() blocked on the orphan's pipes"
        # the whole process group ended: the worker and what it left behind
        assert wait_for(lambda: dead(worker) and dead(child))
    finally:
        if pidfile.exists() and not dead(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the test's own grandchild
        s.close()


def test_bytes_on_fd1_without_a_newline_go_to_the_log_not_into_the_messages(qtbot, tmp_path):
    wl = hostile(tmp_path, "noisy", batch=(
        "os.write(1, b'no newline on fd 1')\n"
        "os.write(2, b'a line on fd 2\\n')\n"
        "print('a print', step)\n"))
    steps = []
    s = LiveSession(SessionConfig(workload=wl, device="host"), 0.05, max_steps=4)
    s.snapshot.connect(lambda snap: steps.extend(st[0] for st in snap.steps))
    s.start()
    try:
        qtbot.waitUntil(lambda: s.state == FAILED or (s.state == STOPPED and len(steps) == 4),
                        timeout=READY_MS)
        assert s.state == STOPPED, s.log_text()[-2000:]
        assert steps == [1, 2, 3, 4]  # every snapshot arrived: no message was glued to text
        qtbot.waitUntil(lambda: "a print 3" in s.log_text())
        log = s.log_text()
        assert "no newline on fd 1" in log and "a line on fd 2" in log
        assert all(f"a print {k}" in log for k in range(4))
    finally:
        s.close()


def test_a_10mb_line_keeps_the_log_tail_bounded(qtbot, tmp_path):
    wl = hostile(tmp_path, "flood", batch="sys.stderr.write('x' * 10_000_000 + '\\n')\n"
                                          "print('after the flood', step, flush=True)\n")
    s = LiveSession(SessionConfig(workload=wl, device="host"), 0.05, max_steps=3)
    s.start()
    try:
        qtbot.waitUntil(lambda: s.state == FAILED or (s.state == STOPPED and s.steps_done == 3),
                        timeout=READY_MS)
        assert s.state == STOPPED, s.log_text()[-2000:]
        qtbot.waitUntil(lambda: "after the flood 2" in s.log_text())
        assert s.state == STOPPED
        assert len(s.log_text().encode()) <= LOG_TAIL_BYTES
        assert "bytes cut" in s.log_text()  # the user sees that a line was shortened
    finally:
        s.close()


def test_a_worker_that_exits_is_reaped_without_waiting_for_close(qtbot, tmp_path):
    wl = hostile(tmp_path, "quits", batch="if step == 1:\n    os._exit(3)\n")
    failed = []
    s = LiveSession(SessionConfig(workload=wl, device="host"), 0.05)
    s.failed.connect(lambda m, d: failed.append(m))
    s.start()
    try:
        qtbot.waitUntil(lambda: bool(failed), timeout=READY_MS)
        assert "ended unexpectedly" in failed[0] and "3" in failed[0]  # the exit status
        assert wait_for(lambda: reaped(s.proc.pid)), "the exited worker stayed a zombie"
    finally:
        s.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="the parent-death signal is Linux's prctl(PR_SET_PDEATHSIG)")
def test_the_worker_dies_with_its_parent_even_inside_a_hung_step(tmp_path):
    started = tmp_path / "in-step"
    wl = hostile(tmp_path, "hangs", batch=(
        f"if step == 1:\n    open({str(started)!r}, 'w').close()\n    time.sleep(600)\n"))
    arg = {"config": SessionConfig(workload=wl, device="host").__dict__, "interval_s": 0.05,
           "max_steps": None, "paused": False}
    parent = subprocess.Popen(
        [sys.executable, "-c", "import json, sys, time\n"
         "from tapescope.app.live_worker import launch\n"
         "w = launch(json.loads(sys.argv[1]))\n"
         "print(w.proc.pid, flush=True)\n"
         "time.sleep(600)\n", json.dumps(arg)],
        cwd=str(ROOT), stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        worker = int(parent.stdout.readline())
        assert wait_for(started.exists, READY_MS / 1000)
        parent.kill()  # the GUI killed with -9: no close(), no quit
        parent.wait()
        assert wait_for(lambda: dead(worker)), "the worker outlived its parent"
    finally:
        parent.kill()
        parent.wait()
        if worker is not None and not dead(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_hung_step_trips_the_watchdog_and_kill_ends_the_worker(qtbot, win, tmp_path):
    wl = hostile(tmp_path, "stuck", batch="if step == 3:\n    time.sleep(600)\n")  # from 1
    win.live.watchdog_s = 1.0
    assert win.live.start(SessionConfig(workload=wl, device="host"))
    lv = win.live.live
    bar = win.live.watchdog
    qtbot.waitUntil(lambda: bar.isVisible(), timeout=READY_MS)
    assert lv.state == RUNNING and lv.steps_done == 2
    assert "no answer from the worker for" in bar.label.text()
    worker = lv.proc.pid
    qtbot.mouseClick(bar.kill_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not lv.is_alive() and not bar.isVisible(), timeout=10000)
    assert lv.state == STOPPED and reaped(worker)
    assert win.last_error is None  # the user asked for it: no "failed" dialog
    assert "killed" in win.live.state_label.text()


def test_stop_on_a_hung_step_hides_the_warning_and_close_still_ends_the_worker(qtbot, win,
                                                                                tmp_path):
    wl = hostile(tmp_path, "stuck", batch="if step == 1:\n    time.sleep(600)\n")
    win.live.watchdog_s = 1.0
    assert win.live.start(SessionConfig(workload=wl, device="host"))
    lv = win.live.live
    bar = win.live.watchdog
    qtbot.waitUntil(lambda: bar.isVisible(), timeout=READY_MS)
    qtbot.mouseClick(bar.stop_button, Qt.LeftButton)
    assert lv.state == STOPPED
    qtbot.waitUntil(lambda: not bar.isVisible())  # it owes nothing once stopped
    assert lv.is_alive()  # still inside the step that never returns
    worker = lv.proc.pid
    t = threading.Thread(target=lv.close, daemon=True)
    t.start()
    t.join(20)  # a hang guard: close ends the group after a short wait
    assert not t.is_alive()
    assert wait_for(lambda: reaped(worker) or dead(worker))


def _run_close_and_drop(qtbot, where: list) -> None:
    s = LiveSession(SessionConfig(workload="mlp", device="host"), 0.05, max_steps=2)
    s.destroyed.connect(lambda *_: where.append(threading.current_thread().name))
    s.start()
    qtbot.waitUntil(lambda: s.state in (STOPPED, FAILED) and s.steps_done == 2, timeout=READY_MS)
    s.close()  # the last reference this test holds goes with this frame


def test_a_closed_session_is_destroyed_in_the_gui_thread(qtbot, monkeypatch):
    """The reader threads outlive close(); if one of them held the last reference, the QObject
    was destroyed in that thread and the GUI crashed in its event loop (a segfault under load).
    Dropped by the user, a session dies in the GUI thread, whatever its threads do."""
    import gc

    reap = LiveSession._reap

    def slow_reap(self, reader):  # a loaded machine: the reaper is still running after close
        time.sleep(1.0)
        reap(self, reader)

    monkeypatch.setattr(LiveSession, "_reap", slow_reap)
    where: list[str] = []
    _run_close_and_drop(qtbot, where)
    gc.collect()
    qtbot.waitUntil(lambda: bool(where), timeout=20000)
    assert where == [threading.main_thread().name]
