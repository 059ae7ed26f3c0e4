"""Issue 46 item 6: the window as a user drives it, on a real X server (Xvfb, Qt's xcb platform),
through pytest-qt: keys on the main window, menu entries found by their text, clicks on widgets.
Each scenario saves what the X server shows into the shots folder (docs/window.md's pictures).

Run by tests/app/test_window_scenarios.py (it starts Xvfb and this pytest with DISPLAY set);
alone: ``DISPLAY=:99 QT_QPA_PLATFORM=xcb TAPESCOPE_SCENARIO_SHOTS=/tmp/shots python -m pytest
-o addopts= -o python_files='scenarios_*.py' tests/scenarios/scenarios_window.py``.

One window and one live session (the transformer, CPU refmath against CPU platform math:
no compiler, and it differs from step 1) serve the live scenarios in order; Fit and Export open
their own files in the same window.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QFontMetrics, QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QFileDialog

from tapescope.app.qt.live import FAILED, PAUSED, RUNNING
from tapescope.app.runs import SessionConfig

ROOT = Path(__file__).resolve().parents[2]
LIVE = SessionConfig(workload="transformer", compare="cpu-platform", math="platform")
SHOWN_WITHIN_S = 2.0  # issue 46: a panel shows the arrays, or why not, within 2 s
READY_S = 120  # the worker's start (a hang guard, not a target)


def _window(tmp_path_factory):
    """The main window as `tapescope gui` makes it, shown on the X server."""
    from tapescope.app.qt.main_window import MainWindow

    assert QGuiApplication.platformName() == "xcb", "these scenarios need a real X server"
    cfg = tmp_path_factory.mktemp("settings") / "tapescope.ini"
    w = MainWindow(settings=QSettings(str(cfg), QSettings.IniFormat))
    w.live.interval_s = 0.05
    w.show()
    assert QTest.qWaitForWindowExposed(w, 10000)
    w.activateWindow()
    return w


@pytest.fixture(scope="module")
def win(qapp, tmp_path_factory):
    """The window of the live scenarios (one session, driven in order)."""
    w = _window(tmp_path_factory)
    yield w
    w.live.close()
    w.close()


@pytest.fixture(scope="module")
def plain(qapp, tmp_path_factory, win):
    """A window that never ran a live session (Fit, Export): as `tapescope gui FILE` opens."""
    win.hide()  # (one window on the X server at a time: the screenshots show one)
    w = _window(tmp_path_factory)
    yield w
    w.close()


def pump(ms: int = 30) -> None:
    end = time.monotonic() + ms / 1000
    while time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.005)


def wait(cond, timeout_s: float, what: str) -> float:
    """Process events until ``cond()``; the seconds it took (fails naming ``what``)."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        QApplication.processEvents()
        time.sleep(0.005)
    return time.monotonic() - t0


def shot(win, shots: str, name: str) -> Path:
    """What the X server shows of the window, as ``name``.png."""
    pump(60)
    win.repaint()
    pump(60)
    g = win.frameGeometry()
    img = win.screen().grabWindow(0, g.x(), g.y(), g.width(), g.height())
    path = Path(shots) / f"{name}.png"
    assert img.save(str(path)), path
    return path


def action(win, *path: str):
    """The QAction at ``path`` in the menu bar (texts without their & marks)."""
    def plain(a):
        return a.text().replace("&", "").split("\t")[0]

    acts = win.menuBar().actions()
    for i, text in enumerate(path):
        a = next((a for a in acts if plain(a) == text), None)
        assert a is not None, f"no menu entry {' ▸ '.join(path[:i + 1])}: " \
                              f"{[plain(a) for a in acts]}"
        if i < len(path) - 1:
            acts = a.menu().actions()
    return a


def key(win, k, mod=Qt.NoModifier) -> None:
    """A key pressed in the window (its shortcuts answer, as for a user)."""
    if QApplication.activeWindow() is not win:  # (a dialog that closed, e.g. a load's
        win.activateWindow()  # progress: no window manager gives the focus back; a user's
        assert QTest.qWaitForWindowActive(win, 5000)  # click would)
        pump(200)  # (the activation's focus events, before the key)
    QTest.keyClick(win, k, mod)
    pump(10)


def inspector_state(win, node: int, step: int) -> str | None:
    """"arrays", "not kept" or "deadline" once the Inspector shows one of them for ``node`` at
    ``step``; None while it fetches (or shows another node or step)."""
    d = win.inspector.details
    if d is None or d.id != node or d.step != step:
        return None
    note = win.inspector.note.text()
    if d.value is not None and d.device_value is not None:
        return "arrays"
    if "tensors were not kept" in note:
        return "not kept"
    if "no answer from the worker" in note:
        return "deadline"
    return None


def settle(win, node: int, step: int) -> tuple[str, float]:
    box = {}

    def done():
        box["s"] = inspector_state(win, node, step)
        return box["s"] is not None

    took = wait(done, 10, f"the Inspector settles on #{node} at step {step}: "
                          f"{win.inspector.note.text()!r}")
    return box["s"], took


# ---- the live scenarios, in order on one session ---------------------------------------------
def test_live_pause_first_divergence_opens_in_the_inspector(win, shots):
    ctl = win.live
    assert win.open_workload(LIVE.workload)  # (`tapescope gui --workload transformer`)
    ctl.toolbar.show_config(LIVE)  # the Live toolbar's boxes, as a user sets them
    action(win, "Live", "Start").trigger()
    wait(lambda: ctl.live is not None and (ctl.live.info is not None
                                            or ctl.live.state == FAILED), READY_S, "ready")
    assert ctl.live.state != FAILED
    wait(lambda: ctl.live.steps_done >= 40 and ctl.live.state == RUNNING, 60, "40 steps")
    key(win, Qt.Key_P, Qt.ControlModifier)  # Live ▸ Pause
    wait(lambda: ctl.live.state == PAUSED and ctl.last is not None
         and ctl.last.state == PAUSED, 10, "paused")
    first = ctl.live.first
    assert first is not None, "platform math differs from refmath on the transformer"
    key(win, Qt.Key_D, Qt.ControlModifier)  # Live ▸ First divergence
    node, step = int(first["node"]), int(first["step"])
    assert win.selected == node and ctl.travel.view_step == step
    state, took = settle(win, node, step)
    # the first divergence is fetched ahead on pause: here at once, never a stale step
    assert took <= SHOWN_WITHIN_S, (state, took)
    assert state in ("arrays", "not kept"), win.inspector.note.text()
    if state == "not kept":
        assert f"Re-run to step {step}" in win.inspector.action_button.text()
    assert f"step {step}" in win.inspector.note.text()
    shot(win, shots, "live-first-divergence")


def test_scrub_to_a_kept_and_to_an_unkept_step(win, shots):
    ctl = win.live
    node = win.selected
    before = ctl.live.steps_done
    key(win, Qt.Key_T, Qt.ControlModifier)  # Live ▸ Train one step: a paused step is kept
    wait(lambda: max(ctl.travel.history.step_nums) == before + 1, 10, "the new step")
    key(win, Qt.Key_End, Qt.AltModifier)  # Latest training step
    kept = ctl.live.steps_done
    assert ctl.travel.view_step == kept
    state, took = settle(win, node, kept)
    assert state == "arrays" and took <= SHOWN_WITHIN_S, (state, took)
    d = win.inspector.details
    ref = np.array(d.value, copy=True)
    shot(win, shots, "scrub-kept-step")
    # an early step: the worker keeps at most 32 steps' tensors and 40 ran, so the oldest are
    # gone; typed into the step box, then on (Alt+PgDown) past any it still holds
    ctl.travel.scrubber.spin.setValue(2)
    for _ in range(kept - 2):
        step = ctl.travel.view_step
        state, took = settle(win, node, step)
        assert took <= SHOWN_WITHIN_S, (step, state, took)
        if state == "arrays":
            assert not np.array_equal(win.inspector.details.value, ref)  # its own step's
            key(win, Qt.Key_PageDown, Qt.AltModifier)
            continue
        break
    assert state == "not kept", f"every step from 2 to {step} was kept"
    btn = win.inspector.action_button
    assert btn.isVisible() and f"Re-run to step {step}" in btn.text()
    assert win.inspector.details.value is None  # no other step's arrays under this label
    shot(win, shots, "scrub-unkept-step")
    key(win, Qt.Key_End, Qt.AltModifier)
    settle(win, node, kept)


def _stepper_at(win, step: int):
    walks = win.stepper_panel.walks
    took = wait(lambda: f"Backward of live step {step:,}:" in walks.text(), 10,
                f"the stepper walks step {step}: {walks.text()!r}")
    assert took <= SHOWN_WITHIN_S, took  # (the reference replayed to that step in slices)
    s = win.stepper
    for _ in range(3):
        key(win, Qt.Key_F11)  # Backward: next node
    assert s.pos == 2, s.pos
    return s.current.node.id, np.array(s.current.grad, copy=True)


def test_the_stepper_walks_two_steps(win, shots):
    ctl = win.live
    win.docks["Backward stepper"].raise_()
    kept = ctl.travel.view_step
    node_a, grad_a = _stepper_at(win, kept)
    assert f"live step {kept:,}" in win.stepper_panel.walks.text()
    shot(win, shots, "stepper-step-late")
    ctl.travel.scrubber.spin.setValue(2)  # the step box: a user types 2
    assert ctl.travel.view_step == 2
    node_b, grad_b = _stepper_at(win, 2)
    assert node_b == node_a and not np.array_equal(grad_a, grad_b)  # other step, other bits
    shot(win, shots, "stepper-step-2")
    key(win, Qt.Key_End, Qt.AltModifier)


def test_elements_at_the_default_dock_width_show_the_bits(win, shots):
    ctl = win.live
    node, step = win.selected, ctl.travel.view_step
    state, _ = settle(win, node, step)
    assert state == "arrays"
    ins = win.inspector
    bar = ins.tabs.tabBar()
    i = ins.tabs.indexOf(ins.element_view)
    assert i >= 0
    QTest.mouseClick(bar, Qt.LeftButton, pos=bar.tabRect(i).center())
    pump(100)
    assert ins.tabs.currentWidget() is ins.element_view
    view = ins.element_view.table
    # the Inspector dock scrolls (its statistics above the tabs): as a user, down to the table
    scroll = win.docks["Inspector"].widget()
    scroll.ensureWidgetVisible(view, 0, 0)
    pump(100)
    assert not view.viewport().visibleRegion().isEmpty(), "the Elements table is not on screen"
    model = view.model()
    assert model.rowCount() > 0
    fm = QFontMetrics(view.font())
    cols = [c for c in range(model.columnCount()) if not view.isColumnHidden(c)]
    bits = 0
    for r in range(min(model.rowCount(), 5)):
        for c in cols:
            text = model.data(model.index(r, c), Qt.DisplayRole) or ""
            lines = str(text).split("\n")
            bits += sum(ln.strip().startswith("0x") for ln in lines)
            need = max(fm.horizontalAdvance(ln) for ln in lines)
            assert view.columnWidth(c) >= need, (r, c, text, view.columnWidth(c), need)
            assert view.rowHeight(r) >= len(lines) * fm.lineSpacing(), (r, text)
    assert bits >= 2 * min(model.rowCount(), 5), "no hex bits under the numbers"
    shot(win, shots, "elements-default-width")
    ctl.close()


# ---- Fit on four models -------------------------------------------------------------------------
FITS = {
    "mlp": ("workload", "mlp", 4),
    "transformer": ("workload", "transformer", 4),
    "tape10k": ("workload", str(ROOT / "benchmarks" / "transformer10k.py"), 4),
    "torch_cnn": ("file", str(ROOT / "resources" / "models" / "torch_cnn.onnx"), 4),
}


@pytest.mark.parametrize("which", list(FITS))
def test_fit_shows_the_model_labelled(plain, shots, which):
    win = plain
    kind, spec, least = FITS[which]
    ok = win.open_workload(spec) if kind == "workload" else win.open_file(spec)
    assert ok, which
    assert win.wait_until_ready(60)
    v = win.graph.view
    win.activateWindow()
    v.setFocus()
    key(win, Qt.Key_F)  # View ▸ Fit graph
    shot(win, shots, f"fit-{which}")
    wait(lambda: v.is_ready() and v._fit_whole, 30,
         f"fitted (focus: {QApplication.focusWidget()!r}, "
         f"modal: {QApplication.activeModalWidget()!r})")
    pump(50)
    v.canvas.record_labels = True  # the next frame lists the labels it draws
    v.viewport().repaint()
    v.canvas.record_labels = False
    vis = v.visible_scene_rect()
    labels = [t for t, r, px in v.canvas.drawn_labels if px >= 8.0 and vis.intersects(r)]
    assert vis.adjusted(-1, -1, 1, 1).contains(v.canvas.boundingRect()), "not all of it"
    assert len(labels) >= min(len(v.display), least), (which, labels)
    if which == "tape10k":
        assert sum(t.startswith("▸ block") for t in labels) >= 4, labels
    if which == "torch_cnn":
        # its module tree's boxes (at 1280x800 the coarsest level: stem and block hold the
        # Convs), and its ONNX ops by type
        assert {"▸ stem", "▸ block", "▸ Relu"} <= set(labels), labels


def test_file_export_graph_as_png(plain, shots, tmp_path, monkeypatch):
    win = plain
    assert win.open_workload("transformer") and win.wait_until_ready(30)
    out = tmp_path / "graph.png"
    asked = []

    def save_dialog(parent, caption, start, filters):
        asked.append(caption)
        return str(out), filters

    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(save_dialog))
    action(win, "File", "Export", "Graph as PNG…").trigger()
    assert asked == ["Export graph as PNG"]
    assert out.is_file() and out.stat().st_size > 10_000
    from PySide6.QtGui import QImage

    img = QImage(str(out))
    assert img.width() > 500 and img.height() > 500
    assert f"graph written to {out}" in win.statusBar().currentMessage()
    os.replace(out, Path(shots) / "export-graph.png")
    shot(win, shots, "export-status")
