"""Issue 25, "the window you can trust": the step, node and element the window says it shows are
the ones it shows. Each defect driven as a user would (keys, menu actions, clicks)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from tapescope.app.qt.main_window import MainWindow
from tests.helpers.time_travel import record_episode


@pytest.fixture(scope="module")
def episode():
    """Five steps of the transformer with the platform libm (time travel's episode)."""
    return record_episode()


@pytest.fixture
def win(qtbot, settings):
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.resize(1440, 900)
    w.show()
    qtbot.waitExposed(w)
    return w


def open_transformer(qtbot, win) -> None:
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=10000):
        assert win.open_workload("transformer")
    win.wait_until_ready()


def whole_graph_in_view(view) -> bool:
    shown = view.visible_scene_rect().adjusted(-1, -1, 1, 1)
    return shown.contains(view.canvas.boundingRect())


def test_fit_graph_stays_fitted_until_the_user_moves_it(qtbot, win):
    open_transformer(qtbot, win)
    v = win.graph.view
    assert not whole_graph_in_view(v)  # the transformer tape opens readable: taller than the view
    v.setFocus()
    qtbot.keyClick(v, Qt.Key_F)  # View ▸ Fit graph's key
    qtbot.wait(300)  # the event loop runs: scroll bars go, the viewport grows, resizeEvent fires
    assert whole_graph_in_view(v), v.scale_factor()
    fitted = v.scale_factor()
    win.resize(1280, 800)  # a resize keeps the whole graph on screen too
    qtbot.wait(300)
    assert whole_graph_in_view(v), (fitted, v.scale_factor())
    # the toolbar button does the same
    v.zoom(2.0)
    assert not whole_graph_in_view(v)
    button = win.main_toolbar.widgetForAction(
        next(a for a in win.main_toolbar.actions() if a.text() == "Fit graph"))
    qtbot.mouseClick(button, Qt.LeftButton)
    qtbot.wait(300)
    assert whole_graph_in_view(v)
    # until the user zooms: then a resize leaves the zoom alone
    v.zoom(2.0)
    z = v.scale_factor()
    win.resize(1440, 900)
    qtbot.wait(300)
    assert v.scale_factor() == pytest.approx(z)


def shown_everywhere(win) -> set[int]:
    """The node each panel shows as the selection."""
    table = win.parity.table.currentIndex().siblingAtColumn(0).data()
    return {win.graph.view.selected_node, win.inspector.details.id, int(table), win.selected}


def test_the_backward_stepper_moves_the_one_selection(qtbot, win):
    open_transformer(qtbot, win)
    soft = next(n.id for n in win.session.tape.nodes if n.op == "softmax")
    win.parity.table.setFocus()
    win.select_node(soft)  # as a click in the table or the graph leaves it
    assert shown_everywhere(win) == {soft}
    win.activateWindow()
    win.graph.view.setFocus()
    for _ in range(3):
        qtbot.keyClick(win.graph.view, Qt.Key_F11)  # Backward: next node
    cur = win.stepper.current.node.id
    assert cur != soft
    assert shown_everywhere(win) == {cur}  # graph, Inspector, table: the stepper's node
    assert str(cur) in win.inspector.header.text() and str(cur) in win.stepper_panel.where.text()
    qtbot.keyClick(win.graph.view, Qt.Key_F11, Qt.ShiftModifier)  # Backward: previous node
    back = win.stepper.current.node.id
    assert back != cur and shown_everywhere(win) == {back}
    # and the Debug menu's action does the same
    win.stepper_panel.actions["step"].trigger()
    assert shown_everywhere(win) == {win.stepper.current.node.id}


def test_a_step_whose_tensors_are_gone_shows_its_summary_and_offers_a_rerun(
        qtbot, win, episode, monkeypatch):
    from PySide6.QtWidgets import QToolButton

    from tests.helpers.time_travel import answer, fake_live, feed

    results, arrays, _ = episode
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=10000):
        assert win.open_workload("transformer")
    fake_live(win)
    feed(win, results)  # steps 1..5, paused at 5
    sm = next(e["node"] for e in results[-1].introduced if e["which"] == "value")
    win.select_node(sm)
    answer(win, arrays, sm, 5)
    ins = win.inspector
    assert ins.details.step == 5 and ins.details.device_value is not None
    assert "differ" in ins.device_view.summary.text()
    sc = win.live.travel.scrubber
    prev = next(b for b in sc.findChildren(QToolButton)
                if b.defaultAction() is sc.actions["prev"])
    qtbot.mouseClick(prev, Qt.LeftButton)  # back to step 4
    assert win.live.travel.view_step == 4
    # at once (before the worker answers): step 4's summary, none of step 5's arrays
    d = ins.details
    assert d.step == 4 and d.value is None and d.device_value is None
    assert ins.tabs.indexOf(ins.device_view) < 0 and ins.stats.columnCount() == 0
    assert not ins.stats.isVisible() and not ins.tabs.isVisible()  # no empty table, no axes
    assert "step 4" in ins.note.text() and "Fetching" in ins.note.text()
    # the worker no longer holds step 4
    from tapescope.app.qt.live import Inspection

    win.live._on_inspected(Inspection(None, sm, error="step 4's tensors were not kept (kept: "
                                      "1 of steps 5..5; while running, only some steps are)"))
    e = next(x for x in results[3].nodes if x["id"] == sm)["value"]
    size = int(np_prod(win.session.tape.node(sm).shape))
    assert ins.details.value is None and "not kept" in ins.note.text()
    assert f"{e['n_diff']:,} of {size:,} elements differ" in ins.note.text()
    b = ins.action_button
    assert b.isVisible() and b.isEnabled() and "Re-run to step 4" in b.text()
    started = []

    def start(config=None, paused=False, max_steps=None):
        started.append(paused)
        win.live.close()  # as start() ends the old session (its answers go with it)
        fake_live(win)  # the fresh session (a stand-in worker, as above)
        return True

    monkeypatch.setattr(win.live, "start", start)
    qtbot.mouseClick(b, Qt.LeftButton)
    assert started == [True] and win.live.rerun.target == (4, sm)
    for k in range(1, 5):  # the re-run's paused single steps arrive one by one
        feed(win, results[:k])
    assert win.live.rerun.target is None and win.live.travel.view_step == 4
    assert (sm, 4) in win.live.live.asked
    answer(win, arrays, sm, 4)
    d = ins.details
    assert d.step == 4 and d.device_value.tobytes() == arrays[4][sm]["cand"]["value"].tobytes()
    assert not b.isVisible() and ins.tabs.isVisible() and ins.stats.isVisible()


def np_prod(shape) -> int:
    n = 1
    for k in shape:
        n *= int(k)
    return n


def live_node_at_latest(qtbot, win, episode) -> int:
    """A fed stand-in session, paused at step 5, with a node that introduced error selected
    and its arrays answered."""
    from tests.helpers.time_travel import answer, fake_live, feed

    results, arrays, _ = episode
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=10000):
        assert win.open_workload("transformer")
    fake_live(win)
    feed(win, results)
    worst = max((e for e in results[-1].nodes if e["value"]["n_diff"]),
                key=lambda e: e["value"]["n_diff"])["id"]
    win.select_node(worst)
    answer(win, arrays, worst, 5)
    return worst


@pytest.mark.parametrize("size", [(1920, 1080), (1280, 800)])
def test_the_elements_tab_shows_its_title_columns_and_rows(qtbot, win, episode, size):
    live_node_at_latest(qtbot, win, episode)
    win.resize(*size)
    ins = win.inspector
    ins.show_elements()
    qtbot.wait(200)
    tb = ins.tabs.tabBar()
    assert ins.tabs.currentWidget() is ins.element_view
    for i in range(tb.count()):  # every title whole, none behind the scroll arrows
        assert tb.tabRect(i).right() <= tb.width(), (tb.tabText(i), tb.tabRect(i), tb.width())
        assert tb.fontMetrics().horizontalAdvance(tb.tabText(i)) <= tb.tabRect(i).width()
    t = ins.element_view.table
    assert ins.element_view.model.rowCount() >= 4
    # ulp and relative error on screen, no scroll bar
    assert t.horizontalScrollBar().maximum() == 0, ([t.columnWidth(c) for c in range(7)],
                                                    t.viewport().width())
    shown = [c for c in range(t.model().columnCount()) if not t.isColumnHidden(c)]
    assert [t.model().headerData(c, Qt.Horizontal) for c in shown] == [
        "index", "reference\nbits", "candidate\nbits", "ulp\nrel error"]
    # the bits are there, under each number
    text = t.model().data(t.model().index(0, 1))
    assert text.split("\n")[1].startswith("0x")
    if size == (1920, 1080):
        assert t.rowAt(t.viewport().height() - 2) >= 3 or t.rowAt(t.viewport().height() - 2) < 0
        assert t.rowAt(3 * t.rowHeight(0) + 2) == 3  # four rows on screen, not one
    # the colour scale is labelled in ulp (the window's one ulp scale), with no title to cut
    from tapescope.views.models.ulp_scale import HEAT_TICKS

    assert ins.element_view.colorbar.axis._tickLevels[0] == HEAT_TICKS


def test_a_1280x800_live_window_fits_shows_export_and_one_tab_bar(qtbot, win, episode):
    from PySide6.QtWidgets import QTabBar

    live_node_at_latest(qtbot, win, episode)
    win.window_layout.persist = False
    win.window_layout.reset()  # what --screenshot does: the docks restored to the default
    win.resize(1280, 800)
    qtbot.wait(200)
    assert (win.width(), win.height()) == (1280, 800)  # it came out 1280x894
    bars = [tb for tb in win.findChildren(QTabBar) if tb.parent() is win and tb.isVisible()]
    assert [[tb.tabText(i) for i in range(tb.count())] for tb in bars] == [
        ["Backward stepper", "Kernels"]]  # one bar, not a second one painted over the docks
    tb = win.live.toolbar
    export = tb.widgetForAction(win.live.act_export)
    assert export is not None and export.isVisible()  # not behind the » overflow
    assert export.geometry().right() <= tb.width()
    # and the main row keeps the step scrubber on screen, not behind its » overflow
    sc = win.live.travel.scrubber
    assert sc.isVisible() and sc.geometry().right() <= win.main_toolbar.width()


def test_training_steps_and_backward_nodes_are_named_apart(qtbot, win):
    from PySide6.QtWidgets import QToolButton

    open_transformer(qtbot, win)
    live = next(a.menu() for a in win.menuBar().actions() if a.text() == "&Live")
    texts = [a.text() for a in live.actions()]
    for words in ("Previous training step", "Next training step",
                  "Latest training step (follow the session)"):
        assert words in texts  # the menu says it in words, not "◀ ▶ ⇥"
    assert not any(t in ("◀", "▶", "⇥") for t in texts)
    sc = win.live.travel.scrubber
    glyphs = {b.text() for b in sc.findChildren(QToolButton)}
    assert glyphs == {"◀", "▶", "⇥"}  # the buttons stay small
    assert sc.title.text() == "training step"
    sc.set_steps([1, 2, 3])
    sc.show_step(2)  # not following: the label is bold, and still says which step it is
    assert sc.title.text() == "<b>training step</b>"
    win.stepper_panel.actions["step"].trigger()
    where = win.stepper_panel.where.text()
    assert where.startswith("backward node 1:") and "step" not in where.split(":")[0]
    # and the stepper's sums are never cut: the max on a line of its own
    cell = win.stepper_panel.table.item(0, 1).text()
    assert cell.startswith("Σ ") and "\nmax|·| " in cell


def test_without_a_live_session_the_panels_say_what_they_will_show(qtbot, win, monkeypatch):
    open_transformer(qtbot, win)
    t, k = win.live.training, win.live.kernels
    ins = win.inspector  # nothing selected: what it will show, not an empty table and axes
    assert not ins.stats.isVisible() and not ins.tabs.isVisible()
    assert "select a node" in ins.header.text()
    win.select_node(14)
    assert ins.stats.isVisible() and ins.tabs.isVisible()
    # no empty axes, no empty source box: what will be there and the one action that fills it
    assert not t.tabs.isVisible() and t.empty.isVisible()
    assert "heatmap" in t.empty_text.text() and t.start_button.isVisible()
    win.docks["Kernels"].raise_()
    qtbot.wait(50)
    assert not k.split.isVisible() and "kernel" in k.summary.text().lower()
    assert k.start_button.isVisible()
    started = []
    monkeypatch.setattr(win.live, "start", lambda config=None, **kw: started.append(config))
    qtbot.mouseClick(t.start_button, Qt.LeftButton)
    qtbot.mouseClick(k.start_button, Qt.LeftButton)
    assert [c.fuse for c in started] == [False, True]  # "Start a fused live session": Fuse on
    assert win.live.toolbar.fuse_box.isChecked()
    # the first step shows the plots
    t.add_steps([(1, 2.0, 2.0, 0.01, True)], [np.zeros(len(win.session.tape))], 10.0)
    assert t.tabs.isVisible() and not t.empty.isVisible()


def test_one_ulp_colour_scale_everywhere_and_one_legend(qtbot, win, episode):
    from tapescope.app.session import ulp_color
    from tapescope.views.graph_panel import LEGEND
    from tapescope.views.models.ulp_scale import HEAT_TICKS, heat_levels, level_color

    node = live_node_at_latest(qtbot, win, episode)
    ins = win.inspector
    # the graph stripe and the scale agree at every mark (1 ulp amber ... 2^20 red)
    for u in (1.0, 32.0, 1024.0, 2.0 ** 15, 2.0 ** 20):
        a, b = QColor(ulp_color(u)), QColor(level_color(heat_levels(np.array([u]))[0]))
        assert max(abs(a.red() - b.red()), abs(a.green() - b.green())) <= 1, u
    # the Compare tab's ulp map and the Elements map draw levels of that scale, ticks in ulp
    cmp_view = ins.device_view.ulp_view
    assert cmp_view.ulp_scale and cmp_view.colorbar.axis._tickLevels[0] == HEAT_TICKS
    shown = cmp_view.image.image
    assert np.array_equal(shown, heat_levels(cmp_view.current_slice()))
    assert ins.element_view.colorbar.axis._tickLevels[0] == HEAT_TICKS
    assert win.live.training.colorbar.axis._tickLevels[0] == HEAT_TICKS
    # one legend names the scale's marks in the same colours
    for lv, _ in [(0.0, "")] + HEAT_TICKS[1:]:
        assert level_color(lv) in LEGEND
    assert node == win.selected


def test_the_stepper_rows_show_their_numbers_whole(qtbot, win):
    open_transformer(qtbot, win)
    win.resize(1280, 800)
    for _ in range(3):
        win.stepper_panel.actions["step"].trigger()
    qtbot.wait(100)
    t = win.stepper_panel.table
    fm = t.fontMetrics()
    for c in (1, 2, 3, 4):
        for line in t.item(0, c).text().split("\n"):  # no "max|·| …": each line fits
            assert fm.horizontalAdvance(line) <= t.columnWidth(c), (line, t.columnWidth(c))


def test_back_and_forward_walk_the_nodes_visited(qtbot, win):
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QMouseEvent

    open_transformer(qtbot, win)
    a, b, c = 14, 26, 35
    for n in (a, b, c):
        win.select_node(n)
    win.activateWindow()
    win.graph.view.setFocus()
    qtbot.keyClick(win.graph.view, Qt.Key_Left, Qt.AltModifier)  # Edit ▸ Back
    assert win.selected == b and win.inspector.details.id == b
    qtbot.keyClick(win.graph.view, Qt.Key_Left, Qt.AltModifier)
    assert win.selected == a
    qtbot.keyClick(win.graph.view, Qt.Key_Right, Qt.AltModifier)  # Edit ▸ Forward
    assert win.selected == b
    # the mouse's back button on the graph
    vp = win.graph.view.viewport()
    pos = QPointF(10, 10)
    ev = QMouseEvent(QMouseEvent.MouseButtonPress, pos, vp.mapToGlobal(pos), Qt.BackButton,
                     Qt.BackButton, Qt.NoModifier)
    win.graph.view.mousePressEvent(ev)
    assert win.selected == a
    # a new visit drops the forward part
    win.select_node(c)
    assert not win.go_forward() and win.go_back() and win.selected == a
