"""The main window's size, position and dock layout: fitted to its screen, kept between runs.

The window's normal geometry and Qt's ``saveState`` (docks, toolbars) go to the window's
QSettings when it closes and come back when the next one opens (tests pass a QSettings in a
temporary folder); a window saved on a bigger screen shrinks onto this one and gets the default
dock layout. View ▸ Reset layout puts back the layout the window was built with, fitted to the
screen it is on.
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QEvent, QObject, QRect, QSettings, Qt, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QTabBar

import tapescope.views._pyside_guard  # noqa: F401  (the PySide6 refcount guard, before any Qt call)

GEOMETRY_KEY = "window/geometry"
STATE_KEY = "window/state"
MAXIMIZED_KEY = "window/maximized"
STATE_VERSION = 1  # bump when the set of docks changes: an older saved state is then ignored
FRAME_ALLOWANCE = (16, 48)  # title bar and borders a window manager adds, before Qt knows them
# The offscreen platform's 800x800 "screen" is a fiction: fitting the window to it would only
# shrink every offscreen test and picture (which set their sizes themselves).
VIRTUAL_PLATFORMS = ("offscreen", "minimal")


def restore_state(win, state) -> bool:
    """``win.restoreState(state)``, then retire for good the tab bars it left behind.

    NOTE: Qt 6.11's restoreState builds new tab bars for the restored tab groups and leaves the
    old ones shown where they were, still holding their tabs (a QMainWindow with two tabified
    docks reproduces it, visible or hidden). Worse, the layout keeps them in its list of used
    bars and shows that whole list again when a dock animation ends: hiding them once (issue
    25) held until the first live step, then ``--screenshot`` and real windows (torch, fused)
    painted a second "Backward stepper | Kernels" bar over the docks (issue 46), whose tabs did
    nothing when clicked. Qt never reuses a bar that holds tabs during a restore, so every bar
    that held tabs before and still does after is such a ghost: it is hidden, and kept hidden
    (GhostBars) until Qt empties it, which is when Qt may reuse it."""
    before = [tb for tb in win.findChildren(QTabBar) if tb.parent() is win and tb.count()]
    ok = win.restoreState(state, STATE_VERSION)
    if ok:  # (a failed restore puts the old layout, old bars included, back in use)
        for tb in before:
            if tb.count():
                GhostBars.of(win).retire(tb)
    return ok


class GhostBars(QObject):
    """Keeps the main window's ghost tab bars hidden (see ``restore_state``)."""

    @classmethod
    def of(cls, win) -> GhostBars:
        """The window's one keeper (made on first use)."""
        keeper = win.findChild(GhostBars, "ghost_tab_bars")
        return keeper if keeper is not None else cls(win)

    def __init__(self, win):
        super().__init__(win)
        self.setObjectName("ghost_tab_bars")
        self.bars: set[QTabBar] = set()

    def retire(self, tb: QTabBar) -> None:
        """Hide ``tb`` now and whenever Qt shows it again, until it holds no tab."""
        if tb not in self.bars:
            self.bars.add(tb)
            tb.installEventFilter(self)
            tb.currentChanged.connect(self._emptied)
        tb.hide()

    @Slot(int)
    def _emptied(self, index: int) -> None:
        tb = self.sender()
        if index < 0 and tb in self.bars and tb.count() == 0:  # Qt retired it: Qt's own again
            self.bars.discard(tb)
            tb.removeEventFilter(self)
            tb.currentChanged.disconnect(self._emptied)

    def eventFilter(self, obj, ev) -> bool:  # noqa: N802 (Qt override)
        if ev.type() == QEvent.ShowToParent and obj in self.bars:
            obj.hide()
        return False


class WindowLayout:
    """Remembers, restores and resets one QMainWindow's geometry and dock layout."""

    def __init__(self, win, settings: QSettings):
        self.win = win
        self.settings = settings
        self.persist = True  # False: closing saves nothing (``--screenshot``)
        self.default_size = (win.width(), win.height())
        win.layout().activate()  # lay the docks out now, so the state is what the first show has
        self.default_state = win.saveState(STATE_VERSION)  # the layout as the window built it

    def available(self) -> QRect | None:
        """The part of the window's screen a window may cover (panels and docks excluded);
        None on a platform without a real screen (offscreen: sizes are set explicitly)."""
        if QGuiApplication.platformName() in VIRTUAL_PLATFORMS:
            return None
        screen = (QGuiApplication.screenAt(self.win.frameGeometry().center())
                  or self.win.screen() or QGuiApplication.primaryScreen())  # a monitor gone
        return screen.availableGeometry() if screen is not None else None

    def fit_to_screen(self) -> bool:
        """Shrink and move the window so that all of it, frame included, is on its screen;
        True when it had to shrink."""
        win, avail = self.win, self.available()
        if avail is None:
            return False
        frame, inner = win.frameGeometry(), win.geometry()
        extra_w, extra_h = frame.width() - inner.width(), frame.height() - inner.height()
        if not win.isVisible() and extra_w == 0 and extra_h == 0:
            extra_w, extra_h = FRAME_ALLOWANCE
        w = max(min(inner.width(), avail.width() - extra_w), win.minimumWidth())
        h = max(min(inner.height(), avail.height() - extra_h), win.minimumHeight())
        shrunk = w < inner.width() or h < inner.height()
        if (w, h) != (inner.width(), inner.height()):
            win.resize(w, h)
        x = min(max(frame.x(), avail.left()), avail.left() + max(0, avail.width() - w - extra_w))
        y = min(max(frame.y(), avail.top()), avail.top() + max(0, avail.height() - h - extra_h))
        if (x, y) != (frame.x(), frame.y()):
            win.move(x, y)
        return shrunk

    def restore(self) -> bool:
        """Put back the geometry and dock layout of the last run; False when none was saved
        (or it no longer fits this window's docks). Either way the window fits its screen."""
        geo = self.settings.value(GEOMETRY_KEY)
        state = self.settings.value(STATE_KEY)
        done = False
        if isinstance(geo, QRect) and geo.width() > 0 and geo.height() > 0:
            self.win.setGeometry(geo)  # (restoreGeometry would fit it to Qt's idea of a screen,
            done = True                # which offscreen is an 800x800 fiction: fit_to_screen)
            if str(self.settings.value(MAXIMIZED_KEY, "false")).lower() == "true":
                self.win.setWindowState(self.win.windowState() | Qt.WindowMaximized)
        if isinstance(state, QByteArray) and not state.isEmpty():
            done = restore_state(self.win, state) and done
        if self.fit_to_screen():
            # dock sizes saved for a bigger window would squeeze some docks to slivers here
            restore_state(self.win, self.default_state)
        return done

    def save(self) -> None:
        """Write the geometry and dock layout to the settings (when the window closes)."""
        if not self.persist:
            return
        self.settings.setValue(GEOMETRY_KEY, self.win.normalGeometry())
        self.settings.setValue(MAXIMIZED_KEY, self.win.isMaximized())
        self.settings.setValue(STATE_KEY, self.win.saveState(STATE_VERSION))
        self.settings.sync()

    def reset(self) -> None:
        """View ▸ Reset layout: the docks where the window first put them, the default size."""
        win = self.win
        if win.isMaximized() or win.isFullScreen():
            win.showNormal()
        restore_state(win, self.default_state)
        win.resize(*self.default_size)
        self.fit_to_screen()
        self.settings.remove(GEOMETRY_KEY)
        self.settings.remove(MAXIMIZED_KEY)
        self.settings.remove(STATE_KEY)
