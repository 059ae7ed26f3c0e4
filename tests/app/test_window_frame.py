"""Issue 46 item 5, "a stable frame": one tab bar per tab group (no ghost bars left by Qt's
restoreState over the docks or the menu), docks that keep their width when the selection
changes, and numbers that are never elided and read the same in every panel."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QDockWidget, QTabBar, QToolBar

from app.main_window import MainWindow
from app.progress_dialog import run_with_progress


def _rect_in(win, w) -> QRect:
    return QRect(w.mapTo(win, QPoint(0, 0)), w.size())


def shown_bars(win) -> list[QTabBar]:
    """The tab bars of the window's dock groups that are on screen."""
    return [tb for tb in win.findChildren(QTabBar) if tb.parent() is win and tb.isVisible()]


def frame(win) -> list[tuple]:
    """What the window shows of its frame: its docks, toolbars and dock tab bars."""
    out = []
    for w in win.findChildren(QDockWidget) + win.findChildren(QToolBar):
        if w.isVisible():
            out.append((type(w).__name__, w.objectName()))
    for tb in shown_bars(win):
        out.append(("tabs",) + tuple(tb.tabText(i) for i in range(tb.count())))
    return sorted(out)


def assert_one_tab_bar(qtbot, win) -> None:
    """One bar, Backward stepper | Kernels, under the stepper's dock, clear of the menu bar,
    and its Kernels tab brings the Kernels dock up."""
    bars = shown_bars(win)
    assert [[tb.tabText(i) for i in range(tb.count())] for tb in bars] == [
        ["Backward stepper", "Kernels"]], [(tb.geometry(), tb.count()) for tb in bars]
    kernels_tabs = sum(tb.tabText(i) == "Kernels" for tb in win.findChildren(QTabBar)
                       if tb.isVisible() for i in range(tb.count()))
    assert kernels_tabs == 1
    menu = _rect_in(win, win.menuBar())
    for tb in win.findChildren(QTabBar):
        if tb.isVisible():
            assert not _rect_in(win, tb).intersects(menu), (tb.tabText(0), tb.geometry())
    bar = bars[0]
    dock = next(d for d in (win.docks["Backward stepper"], win.docks["Kernels"])
                if d.isVisible() and not d.visibleRegion().isEmpty())
    assert bar.geometry().left() == dock.geometry().left()
    assert abs(bar.geometry().top() - dock.geometry().bottom()) <= 4, (bar.geometry(),
                                                                       dock.geometry())
    k = next(i for i in range(bar.count()) if bar.tabText(i) == "Kernels")
    qtbot.mouseClick(bar, Qt.LeftButton, pos=bar.tabRect(k).center())
    qtbot.wait(50)
    assert not win.docks["Kernels"].visibleRegion().isEmpty()
    assert win.docks["Backward stepper"].visibleRegion().isEmpty()


def test_no_ghost_tab_bars_after_a_restored_layout_and_a_reset(qtbot, settings):
    # a second run: the first one's layout is saved, and restored before the window shows
    first = MainWindow(settings=settings)
    qtbot.addWidget(first)
    first.resize(1440, 900)
    first.show()
    qtbot.waitExposed(first)
    first.close()
    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    win.window_layout.persist = False
    win.window_layout.reset()  # what --screenshot does, before anything is shown
    # the dialog `gui` shows while refmath's kernels load: its event loop is where Qt showed
    # the old bars again (a dock animation ends: Qt shows every bar it still counts as used)
    run_with_progress(win, "Preparing", "nothing", lambda: None)
    win.resize(1440, 900)
    win.show()
    qtbot.waitExposed(win)
    assert_one_tab_bar(qtbot, win)  # (a ghost sat over the menu bar, at 0, 0)
    # the layout moves: a ghost stays where it was, over the docks
    win.resizeDocks([win.docks["Inspector"]], [700], Qt.Horizontal)
    qtbot.wait(100)
    assert_one_tab_bar(qtbot, win)
    # View ▸ Reset layout in the shown window, and the dialog's loop again
    win.act_reset_layout.trigger()
    run_with_progress(win, "Preparing", "nothing", lambda: None)
    win.resizeDocks([win.docks["Inspector"]], [520], Qt.Horizontal)
    qtbot.wait(100)
    assert_one_tab_bar(qtbot, win)


def test_the_screenshot_window_shows_what_the_real_window_shows(qtbot, settings, tmp_path):
    from PySide6.QtCore import QSettings

    real = MainWindow(settings=settings)  # a first run: nothing saved, the built layout
    qtbot.addWidget(real)
    shot = MainWindow(settings=QSettings(str(tmp_path / "b.ini"), QSettings.IniFormat))
    qtbot.addWidget(shot)
    shot.window_layout.persist = False
    shot.window_layout.reset()  # --screenshot's way
    for w in (real, shot):
        run_with_progress(w, "Preparing", "nothing", lambda: None)
        w.resize(1440, 900)
        w.show()
        qtbot.waitExposed(w)
    assert frame(shot) == frame(real)
    assert [("tabs", "Backward stepper", "Kernels")] == [f for f in frame(real)
                                                          if f[0] == "tabs"]



# ---- docks keep their width ------------------------------------------------------------------
@pytest.fixture(scope="module")
def episode():
    """Five steps of the transformer with the platform libm (test_time_travel's episode)."""
    from tests.app import test_time_travel

    return test_time_travel.episode.__wrapped__()


def dock_widths(win) -> dict[str, int]:
    return {t: d.width() for t, d in win.docks.items()
            if d.isVisible() and not d.visibleRegion().isEmpty()}


def table_columns_on_screen(table) -> int:
    """Columns of ``table`` wholly inside its viewport."""
    h = table.horizontalHeader()
    return sum(1 for c in range(table.model().columnCount()) if not table.isColumnHidden(c)
               and 0 <= h.sectionViewportPosition(c)
               and h.sectionViewportPosition(c) + h.sectionSize(c) <= table.viewport().width())


def assert_frame_kept(win, widths: dict[str, int], columns: int, what: str) -> None:
    now = dock_widths(win)
    assert now.keys() == widths.keys(), what
    for t, w in widths.items():
        assert abs(now[t] - w) <= 3, (what, t, w, now[t])
    assert table_columns_on_screen(win.parity.table) == columns, what


def answer_with(win, node: int, step: int, arrays, change) -> None:
    """Answer the window's fetch of ``node`` at ``step`` with the episode's arrays, changed."""
    from app.live import Inspection

    a = arrays[step][node]
    ref_v, ref_g, cand_v, cand_g = change(a["ref"]["value"], a["ref"]["grad"],
                                          a["cand"]["value"], a["cand"]["grad"])
    win.live._on_inspected(Inspection(None, node, step, "CPU refmath", "CPU platform",
                                      ref_v, ref_g, cand_v, cand_g))


def _nan(rv, rg, cv, cg):
    cv = np.array(cv, dtype=np.float64)
    cv.reshape(-1)[::3] = np.nan  # a NaN against a number in every third element
    return rv, rg, cv, cg


def _half(rv, rg, cv, cg):
    return tuple(None if x is None else np.asarray(x).astype(np.float16)
                 for x in (rv, rg, cv, cg))


def _long_ulp(rv, rg, cv, cg):
    cv = np.array(cv, dtype=np.float64)
    cv.reshape(-1)[0] = -cv.reshape(-1)[0] * 1e150  # ~9e18 ulp, a three-digit exponent
    return rv, rg, cv, cg


@pytest.mark.parametrize("size", [(1440, 900), (1280, 800)])
def test_docks_keep_their_width_when_the_selection_changes(qtbot, settings, episode, size):
    from tests.app.test_live_inspect import click_node, click_row
    from tests.app.test_time_travel import fake_live, feed

    results, arrays, _ = episode
    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    win.resize(*size)
    win.show()
    qtbot.waitExposed(win)
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=10000):
        assert win.open_workload("transformer")
    fake_live(win)
    feed(win, results)
    qtbot.wait(100)
    widths, columns = dock_widths(win), table_columns_on_screen(win.parity.table)
    assert {"Inspector", "Parity table", "Training"} <= widths.keys()
    step = results[-1].step
    nodes = win.session.tape.nodes
    picks = [
        ("graph click, float64", lambda: click_node(qtbot, win, 14), 14, lambda *a: a),
        ("table click, NaN against numbers", lambda: click_row(qtbot, win, 35), 35, _nan),
        ("graph click, float16 arrays", lambda: click_node(qtbot, win, 45), 45, _half),
        ("table click, a 9e18 ulp element", lambda: click_row(qtbot, win, 48), 48, _long_ulp),
        ("a parameter", lambda: click_row(qtbot, win, 0), 0, lambda *a: a),
    ]
    for what, pick, node, change in picks:
        pick()
        assert win.selected == node, what
        answer_with(win, node, step, arrays, change)
        qtbot.wait(50)
        assert win.inspector.details is not None and win.inspector.details.id == node
        assert_frame_kept(win, widths, columns, f"{what}: #{node} {nodes[node].op}")
    # Ctrl+D: the first divergence, at its step (its tensors were not kept: the summary only)
    win.activateWindow()
    qtbot.keyClick(win, Qt.Key_D, Qt.ControlModifier)
    qtbot.wait(50)
    assert win.selected == int(win.live.live.first["node"])
    assert_frame_kept(win, widths, columns, "Ctrl+D")
    win.live.close()


def hostile_frame_tape(tmp_path) -> str:
    """A float16 tape with names of up to 250 characters and NaNs produced on the way."""
    from core import Tape, ops, tapefile

    long = "encoder_layer_" * 10  # 140 characters, no space to wrap at
    t = Tape(dtype=np.float16)
    with t.scope(long[:100]):
        x = t.param(np.array([[1.0, -2.0, -3.0], [0.5, -0.25, 4.0]]), name=long + "x")
        w = t.param(np.full((3, 3), 0.5), name=long + "w")
        y = ops.matmul(x, w, name=long + "y")
    z = ops.log(y, name=long + "log")  # log of a negative: NaN
    loss = ops.mean(ops.relu(z, name=long + "relu"), name="loss")
    t.backward(loss)
    path = str(tmp_path / "frame.tape")
    tapefile.save(t, path, meta={"loss": loss.id})
    return path


def test_docks_keep_their_width_on_long_names_nans_and_half(qtbot, settings, tmp_path):
    from tests.app.test_live_inspect import click_node, click_row

    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    win.resize(1440, 900)
    win.show()
    qtbot.waitExposed(win)
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=10000):
        assert win.open_file(hostile_frame_tape(tmp_path))
    qtbot.wait(100)
    widths, columns = dock_widths(win), table_columns_on_screen(win.parity.table)
    n = len(win.session.tape)
    for k in range(n):
        (click_node if k % 2 else click_row)(qtbot, win, k)
        qtbot.wait(20)
        assert win.selected == k
        assert_frame_kept(win, widths, columns, f"#{k} {win.session.tape.nodes[k].op}")
    assert win.session.nonfinite(), "the tape holds no NaN to show"
    assert str(win.session.details(0).value.dtype) == "float16"
