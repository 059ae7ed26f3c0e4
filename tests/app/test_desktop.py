"""The app on a real X server (Xvfb), in a subprocess: the xcb platform starts, the window shows
and fits a 1280x800 screen, a click selects a node, the window is grabbed to a PNG. Also the
first command without any display: one line, exit 2. Everything else in the suite stays
offscreen; these tests start their own Xvfb and skip with a reason where it is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tapescope.app import platform_check
from tests.helpers.desktop import SCREEN, colours, display_env, free_display, xvfb_display

ROOT = Path(__file__).resolve().parents[2]

# Runs inside the Xvfb session: the same start-up as `tapescope gui`, then a user's click.
DRIVER = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
from tapescope.app.commands.gui import start_platform
from tapescope.app.qt.gui import make_window

problem = start_platform()
if problem:
    print(json.dumps({"error": problem}))
    sys.exit(2)
app, win = make_window()
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest

win.show()
exposed = QTest.qWaitForWindowExposed(win, 10000)
assert win.open_workload("mlp")
win.wait_until_ready()
v = win.graph.view
node = next(n.id for n in win.session.tape.nodes if n.op == "matmul")
r = v.canvas.item_rect(int(v.display.node_item[node]))
v.centerOn(r.center())
QTest.mouseClick(v.viewport(), Qt.LeftButton, pos=v.mapFromScene(r.center()))
end = time.monotonic() + 5
while win.selected != node and time.monotonic() < end:
    app.processEvents()
    time.sleep(0.01)
win.wait_until_ready()
for _ in range(10):
    app.processEvents()
win.grab().save(sys.argv[2])
win.screen().grabWindow(0).save(sys.argv[3])  # what the X server itself shows
frame, avail = win.frameGeometry(), win.screen().availableGeometry()
docks = {t: [d.width(), d.height()] for t, d in win.docks.items()
         if d.isVisible() and not d.visibleRegion().isEmpty()}
print(json.dumps({
    "platform": QGuiApplication.platformName(), "exposed": exposed, "node": node,
    "selected": win.selected,
    "inspector": win.inspector.details.id if win.inspector.details else None,
    "frame": [frame.x(), frame.y(), frame.width(), frame.height()],
    "available": [avail.x(), avail.y(), avail.width(), avail.height()],
    "graph": [win.graph.width(), win.graph.height()], "docks": docks,
}))
win.close()
'''


@pytest.fixture(scope="module")
def xvfb():
    """A private Xvfb display (1280x800) for this module; skipped with a reason if unusable."""
    with xvfb_display() as display:
        yield display


def test_the_window_opens_on_xvfb_and_a_click_selects_a_node(xvfb, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER, encoding="utf-8")
    win_png, screen_png = tmp_path / "window.png", tmp_path / "screen.png"
    r = subprocess.run([sys.executable, str(script), str(ROOT), str(win_png), str(screen_png)],
                       env=display_env(tmp_path, DISPLAY=xvfb), cwd=ROOT, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["platform"] == "xcb"  # a real X11 window, not offscreen
    assert got["exposed"]
    assert got["selected"] == got["node"] == got["inspector"]
    # the window fits the 1280x800 screen, frame included
    fx, fy, fw, fh = got["frame"]
    ax, ay, aw, ah = got["available"]
    assert (aw, ah) == SCREEN
    assert ax <= fx and ay <= fy and fx + fw <= ax + aw and fy + fh <= ay + ah, got
    # ... and at that size the graph and every visible dock still have room to work in
    assert got["graph"][0] >= 400 and got["graph"][1] >= 250, got
    assert {"Inspector", "Parity table", "Training", "Backward stepper"} <= set(got["docks"])
    for title, (w, h) in got["docks"].items():
        assert w >= 250 and h >= 150, (title, w, h)
    # not a blank frame: the grabbed window and the X server's screen show the app
    assert colours(win_png) > 50
    assert colours(screen_png) > 50
    if os.environ.get("TAPESCOPE_KEEP_SHOTS"):  # for docs/img/xvfb.png
        shutil.copy(screen_png, os.environ["TAPESCOPE_KEEP_SHOTS"])


def test_screenshot_on_a_real_display_uses_it(xvfb, tmp_path):
    """``--screenshot`` with a display renders through it (xcb), not offscreen."""
    out = tmp_path / "shot.png"
    r = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "gui", "--screenshot", str(out)],
                       env=display_env(tmp_path, DISPLAY=xvfb), cwd=ROOT, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith(f"wrote {out} (1440x900)")
    assert colours(out) > 50


def _tapescope(*args: str) -> list[str]:
    exe = shutil.which("tapescope")
    return [exe, *args] if exe else [sys.executable, "-m", "tapescope.app.cli", *args]


def test_no_display_is_one_line_and_exit_2(tmp_path):
    """`env -u DISPLAY -u QT_QPA_PLATFORM -u WAYLAND_DISPLAY tapescope` (Qt used to abort, 134)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the display check is for Linux")
    r = subprocess.run(_tapescope(), env=display_env(tmp_path), cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr.endswith("\n") and r.stderr.count("\n") == 1, r.stderr
    line = r.stderr.strip()
    assert line == "tapescope gui: " + platform_check.NO_DISPLAY
    for hint in ("ssh -X", "--screenshot OUT.png", "tapescope report"):
        assert hint in line
    assert not (tmp_path / "config").exists()  # nothing was started, nothing written


def test_a_display_nobody_answers_is_one_line_and_exit_2(tmp_path):
    """DISPLAY names an X server that is not there (Qt used to abort with rc 134)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the display check is for Linux")
    n = free_display(150, 200)  # (never one an Xvfb of another test takes meanwhile)
    r = subprocess.run(_tapescope("gui"), env=display_env(tmp_path, DISPLAY=f":{n}"), cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("tapescope gui: "), r.stderr
    missing = [s for s in platform_check.XCB_LIBS if not platform_check.library_loads(s)]
    assert (", ".join(missing) if missing else f"no X server answers on DISPLAY=:{n}") in r.stderr


def test_screenshot_without_a_display_picks_offscreen(tmp_path):
    out = tmp_path / "shot.png"
    r = subprocess.run(_tapescope("gui", "--screenshot", str(out), "--size", "1280x800"),
                       env=display_env(tmp_path), cwd=ROOT, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith(f"wrote {out} (1280x800)")
    assert colours(out) > 50


def _needed(lib: Path) -> list[str]:
    tool = shutil.which("objdump")
    if tool is None:
        pytest.skip("objdump is not installed (binutils)")
    out = subprocess.run([tool, "-p", str(lib)], capture_output=True, text=True, timeout=60)
    return [ln.split()[1] for ln in out.stdout.splitlines() if ln.strip().startswith("NEEDED")]


BASE = {"libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2"}


@pytest.mark.parametrize("plugin,qpa,table", [
    ("libqxcb", "libQt6XcbQpa.so.6", platform_check.XCB_LIBS),
    ("libqwayland", "libQt6WaylandClient.so.6", platform_check.WAYLAND_LIBS),
])
def test_the_library_tables_cover_what_the_plugins_need(plugin, qpa, table):
    """Every system library PySide6's platform plugin links is in our table (with packages)."""
    path = platform_check.qt_plugin(plugin)
    if path is None or not sys.platform.startswith("linux"):
        pytest.skip(f"no {plugin} plugin in this PySide6")
    libs = _needed(path)
    qpa_lib = path.parents[2] / "lib" / qpa
    if qpa_lib.exists():
        libs += _needed(qpa_lib)
    system = {n for n in libs if not n.startswith("libQt6") and n not in BASE}
    assert system, libs
    uncovered = sorted(system - set(table) - {"libz.so.1", "libfreetype.so.6"})
    assert not uncovered, f"add these (with their packages) to platform_check: {uncovered}"
