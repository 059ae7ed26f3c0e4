"""Issue 46 item 5, "a stable frame": one tab bar per tab group (no ghost bars left by Qt's
restoreState over the docks or the menu), docks that keep their width when the selection
changes, and numbers that are never elided and read the same in every panel."""

from __future__ import annotations

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

