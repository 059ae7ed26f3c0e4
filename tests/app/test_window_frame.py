"""Issue 46 item 5, "a stable frame": one tab bar per tab group (no ghost bars left by Qt's
restoreState over the docks or the menu), docks that keep their width when the selection
changes, and numbers that are never elided and read the same in every panel."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QDockWidget, QTabBar, QToolBar

from tapescope.app.qt.main_window import MainWindow
from tapescope.app.qt.progress_dialog import run_with_progress


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
    """Five steps of the transformer with the platform libm (time travel's episode)."""
    from tests.helpers.time_travel import record_episode

    return record_episode()


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
    from tapescope.app.qt.live import Inspection

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
    from tests.helpers.live import click_node, click_row
    from tests.helpers.time_travel import fake_live, feed

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
    from tapescope.core import Tape, ops, tapefile

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
    from tests.helpers.live import click_node, click_row

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


# ---- numbers: never elided, one format ---------------------------------------------------------
NUMBER = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?(e[-+]\d+)?$|^0x[0-9a-f]+$|^-?(nan|inf)$",
                    re.IGNORECASE)
FILLER = {"/", "Σ", "max|·|", "—", "ulp"}


def numeric(text: str) -> bool:
    """A cell that holds only numbers (counts, values, ulp, hex bits; "0 / 0"; "Σ 1.5")."""
    words = [w for w in str(text).split() if w not in FILLER]
    return bool(words) and all(NUMBER.match(w) for w in words)


def elided_numbers(view) -> list[tuple]:
    """Numeric cells of ``view`` whose text is wider than their column (drawn elided)."""
    from PySide6.QtGui import QFontMetrics
    from PySide6.QtWidgets import QStyle

    m = view.model()
    pad = 2 * (view.style().pixelMetric(QStyle.PM_FocusFrameHMargin, None, view) + 1)
    out = []
    for c in range(m.columnCount()):
        if view.isColumnHidden(c):
            continue
        for r in range(min(m.rowCount(), 300)):
            idx = m.index(r, c)
            text = idx.data(Qt.DisplayRole)
            if text is None or not numeric(text):
                continue
            font = idx.data(Qt.FontRole)
            fm = QFontMetrics(font.resolve(view.font())) if font is not None else \
                view.fontMetrics()
            need = max(fm.horizontalAdvance(line) for line in str(text).split("\n")) + pad
            if need > view.columnWidth(c):
                out.append((type(view.parent()).__name__, r, c, text, need, view.columnWidth(c)))
    return out


def test_no_table_elides_a_number_and_a_node_reads_the_same_everywhere(qtbot, settings,
                                                                        episode):
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication, QTableView, QToolTip

    from tapescope.views.models.numbers import ulp_text
    from tests.helpers.live import click_row
    from tests.helpers.time_travel import fake_live, feed

    results, arrays, _ = episode
    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    qtbot.waitExposed(win)
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=10000):
        assert win.open_workload("transformer")
    fake_live(win)
    feed(win, results)
    step = results[-1].step
    # the node with the largest value ulp (thousands: where a separator shows)
    m = win.parity.model
    rows = [m.row_data(r) for r in range(m.rowCount())]
    row = max((r for r in rows if r.value_max_ulp is not None), key=lambda r: r.value_max_ulp)
    assert row.value_max_ulp >= 1000
    win.stepper_panel.step()  # the stepper's table has rows too (it selects its node)
    win.stepper_panel.step()
    click_row(qtbot, win, row.id)
    answer_with(win, row.id, step, arrays, lambda *a: a)
    win.live.training.flush()
    win.live.training.tabs.setCurrentIndex(1)  # the parameters' table
    win.inspector.show_elements()
    qtbot.wait(100)
    tables = [t for t in win.findChildren(QTableView) if t.isVisible() and t.model().rowCount()]
    names = {type(t.parent()).__name__ for t in tables}
    assert len(tables) >= 4, names  # parity, statistics, elements, stepper, parameters
    for t in tables:
        assert not elided_numbers(t), elided_numbers(t)
    # one node, one string: the table's cells, the Inspector's summary, the graph's tooltip
    col = {m.headerData(c, Qt.Horizontal, Qt.UserRole + 3): c for c in range(m.columnCount())}
    n_text = m.data(m.index(m.row_of(row.id), col["value n_diff"]))
    u_text = m.data(m.index(m.row_of(row.id), col["value max_ulp"]))
    assert u_text == ulp_text(row.value_max_ulp) and "," in u_text  # 63,054, not 63054
    summary = win.inspector.device_view.summary.text()
    assert f"{n_text} of " in summary and f"max {u_text} ulp" in summary, (summary, u_text)
    v = win.graph.view
    r = v.canvas.item_rect(int(v.display.node_item[row.id]))
    tip_text = v.tip_at(r.center())
    assert f"value: {n_text} differing, max {u_text} ulp" in tip_text, tip_text
    v.centerOn(r.center())  # and as the mouse shows it: a hover on the box
    at = v.mapFromScene(r.center())
    QApplication.sendEvent(v.viewport(), QHelpEvent(QEvent.ToolTip, at,
                                                    v.viewport().mapToGlobal(at)))
    assert f"max {u_text} ulp" in QToolTip.text(), QToolTip.text()
    assert win.live.training.rate.text().endswith(
        f"max {ulp_text(win.live.training.max_ulp[-1])} ulp")
    win.live.close()


def test_a_huge_ulp_is_written_one_way_and_its_column_grows(qtbot):
    from tapescope.views.models.graph_model import GraphNode
    from tapescope.views.models.numbers import count_text, ulp_exact, ulp_text
    from tapescope.views.models.parity_rows import build_rows
    from tapescope.views.parity_table import ParityPanel

    assert [ulp_text(u) for u in (0, 1, 4488, 999_999, 5_873_720, 9.2e18, 0.5, -1,
                                  float("nan"))] == [
        "0", "1", "4,488", "999,999", "5.87e+06", "9.20e+18", "0.5", "NaN", "NaN"]
    assert count_text(4488) == "4,488" and ulp_exact(5_873_720) == "5,873,720"
    p = ParityPanel()
    qtbot.addWidget(p)
    p.resize(900, 300)
    p.show()
    nodes = [GraphNode(i, "matmul", (), f"n{i}", (4, 4)) for i in range(3)]
    p.set_rows(build_rows(nodes, [{"id": i, "value": {"n_diff": 1, "max_ulp": 1.0}}
                                  for i in range(3)]))
    before = [p.table.columnWidth(c) for c in range(8)]
    # the next step's numbers are wider than the header: the columns grow, never elide
    p.set_rows(build_rows(nodes, [{"id": 0, "value": {"n_diff": 12_345_678_901, "max_ulp": 999_999},
                                   "grad": {"n_diff": 7, "max_ulp": 5_873_720}},
                                  {"id": 1, "value": {"n_diff": 2, "max_ulp": 9.2e18}}]))
    assert not elided_numbers(p.table)
    assert p.table.columnWidth(4) > before[4]  # 12,345,678,901 is wider than "differing"
    assert p.model.data(p.model.index(1, 5)) == "9.20e+18"
