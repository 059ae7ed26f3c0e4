"""app.platform_check with a faked environment, library lookup and X server (no Qt needed)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tapescope.app import platform_check as pc
from tapescope.app.platform_check import choose_platform

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = Path("/fake/PySide6/Qt/plugins/platforms/libqwayland.so")


def lookup(*missing: str):
    """A library lookup where exactly ``missing`` cannot be loaded; it records what it saw."""
    def loads(soname: str) -> bool:
        loads.asked.append(soname)
        return soname not in missing
    loads.asked = []
    return loads


def never(*_):
    raise AssertionError("must not be consulted")


def choose(env, *, missing=(), answers=True, plugin=PLUGIN, **kw):
    return choose_platform(env, system="linux", loads=lookup(*missing),
                           answers=lambda d: answers, plugin=lambda name: plugin, **kw)


def test_no_display_is_one_line_that_says_what_to_do():
    c = choose({})
    assert c.platform is None and c.error == pc.NO_DISPLAY
    assert "\n" not in c.error
    for hint in ("desktop", "ssh -X", "--screenshot OUT.png", "tapescope report"):
        assert hint in c.error
    blank = choose({"DISPLAY": " ", "WAYLAND_DISPLAY": "", "QT_QPA_PLATFORM": ""})
    assert blank.error == pc.NO_DISPLAY  # empty variables are no display either


def test_a_screenshot_without_a_display_goes_offscreen():
    assert choose({}, screenshot=True) == pc.PlatformChoice(platform="offscreen")


def test_an_x_display_with_its_libraries_uses_xcb():
    loads = lookup()
    c = choose_platform({"DISPLAY": ":0"}, system="linux", loads=loads,
                        answers=lambda d: d == ":0", plugin=never)
    assert c == pc.PlatformChoice(platform="xcb")
    assert set(loads.asked) == set(pc.XCB_LIBS)  # every library xcb needs was looked for


def test_missing_xcb_libraries_are_named_with_their_packages():
    c = choose({"DISPLAY": ":0"}, missing=("libxcb-icccm.so.4", "libxcb-keysyms.so.1",
                                           "libxcb-shape.so.0", "libxcb-xkb.so.1"))
    assert c.platform is None and "\n" not in c.error
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1, libxcb-shape.so.0, libxcb-xkb.so.1" in c.error
    assert ("sudo apt-get install libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 libxcb-xkb1 "
            "(Debian/Ubuntu)") in c.error
    # Fedora ships shape and xkb in one package: named once
    assert "sudo dnf install xcb-util-wm xcb-util-keysyms libxcb (Fedora)" in c.error


def test_the_cursor_library_qt_65_needs_is_named():
    c = choose({"DISPLAY": ":1"}, missing=("libxcb-cursor.so.0",))
    assert "libxcb-cursor.so.0" in c.error and "libxcb-cursor0" in c.error
    assert "xcb-util-cursor" in c.error


def test_missing_libraries_with_screenshot_fall_back_to_offscreen():
    c = choose({"DISPLAY": ":0"}, missing=("libxcb-icccm.so.4",), screenshot=True)
    assert c == pc.PlatformChoice(platform="offscreen")


def test_an_x_server_that_does_not_answer_is_named():
    c = choose({"DISPLAY": "localhost:10.0"}, answers=False)
    assert c.platform is None
    assert "DISPLAY=localhost:10.0" in c.error and "--screenshot" in c.error
    assert choose({"DISPLAY": ":9"}, answers=False, screenshot=True).platform == "offscreen"


def test_wayland_uses_the_wayland_plugin_when_it_loads():
    assert choose({"WAYLAND_DISPLAY": "wayland-0"}).platform == "wayland"
    # with XWayland too, xcb is Qt's fallback when the compositor refuses
    both = choose({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"})
    assert both.platform == "wayland;xcb"


def test_wayland_without_its_libraries_uses_x_or_says_what_is_missing():
    env = {"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}
    assert choose(env, missing=("libwayland-cursor.so.0",)).platform == "xcb"
    assert choose(env, plugin=None).platform == "xcb"  # a PySide6 without the plugin
    c = choose({"WAYLAND_DISPLAY": "wayland-0"}, missing=("libwayland-cursor.so.0",))
    assert c.platform is None and "libwayland-cursor.so.0" in c.error
    assert "libwayland-cursor0 (Debian/Ubuntu)" in c.error
    assert "libwayland-cursor (Fedora)" in c.error
    c = choose({"WAYLAND_DISPLAY": "wayland-0"}, plugin=None)
    assert "no wayland platform plugin" in c.error


FOUND = {k: Path(f"/fake/platforms/libq{k}.so") for k in ("minimal", "offscreen", "vnc",
                                                           "wayland", "xcb")}


def test_an_explicit_platform_is_respected():
    for name in ("offscreen", "wayland", "wayland-egl", "vnc:size=1280x800", "minimal",
                 "bogus;offscreen"):
        c = choose_platform({"QT_QPA_PLATFORM": name}, system="linux", loads=never,
                            answers=never, plugin=never, platforms=lambda: FOUND,
                            load_error=lambda path: None)
        assert c == pc.PlatformChoice(), name


def test_an_explicit_platform_without_a_plugin_names_the_available_ones():
    # Qt aborts (rc 134) on a platform it cannot find; the check says so in one line
    for screenshot in (False, True):
        c = choose_platform({"QT_QPA_PLATFORM": "bogus"}, system="linux", loads=never,
                            answers=never, plugin=never, platforms=lambda: FOUND,
                            load_error=never, screenshot=screenshot)
        assert c.platform is None and "\n" not in c.error
        assert c.error == ("QT_QPA_PLATFORM=bogus: Qt has no platform plugin 'bogus'; available "
                           "platforms: minimal, offscreen, vnc, wayland, xcb")
    c = choose_platform({"QT_QPA_PLATFORM": "nope;bogus:opt=1"}, system="linux", loads=never,
                        answers=never, plugin=never, platforms=lambda: {}, load_error=never)
    assert c.error.startswith("QT_QPA_PLATFORM=nope;bogus:opt=1: Qt has no platform plugin "
                              "'nope' or 'bogus'; available platforms: none")


def test_an_explicit_platform_whose_plugin_does_not_load_says_why():
    why = {FOUND["vnc"]: "libfreetype.so.6: cannot open shared object file"}
    c = choose_platform({"QT_QPA_PLATFORM": "vnc"}, system="linux", loads=never, answers=never,
                        plugin=never, platforms=lambda: FOUND, load_error=why.get)
    assert c.error == ("QT_QPA_PLATFORM=vnc: Qt's 'vnc' platform plugin does not load "
                       "(libfreetype.so.6: cannot open shared object file); available platforms: "
                       "minimal, offscreen, vnc, wayland, xcb")
    ok = choose_platform({"QT_QPA_PLATFORM": "vnc;offscreen"}, system="linux", loads=never,
                         answers=never, plugin=never, platforms=lambda: FOUND, load_error=why.get)
    assert ok == pc.PlatformChoice()  # Qt falls back to the next one, which loads


def test_the_real_plugin_lookup(tmp_path):
    pytest.importorskip("PySide6", reason="PySide6 is not installed")
    found = pc.qt_platforms({})
    assert "offscreen" in found and pc.plugin_load_error(found["offscreen"]) is None
    (tmp_path / "libqbroken.so").write_bytes(b"not an ELF")
    more = pc.qt_platforms({"QT_QPA_PLATFORM_PLUGIN_PATH": str(tmp_path)})
    assert more["broken"] == tmp_path / "libqbroken.so"
    assert "libqbroken.so" in pc.plugin_load_error(more["broken"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Qt platform plugins: Linux")
def test_a_bogus_or_broken_platform_is_one_line_and_exit_2_not_a_qt_abort(tmp_path):
    import os

    pytest.importorskip("PySide6", reason="PySide6 is not installed")
    (tmp_path / "libqbroken.so").write_bytes(b"not an ELF")
    for platform, says in (("bogus", "Qt has no platform plugin 'bogus'; available platforms: "),
                           ("broken", "Qt's 'broken' platform plugin does not load (")):
        env = dict(os.environ, QT_QPA_PLATFORM=platform, PYTHONPATH=str(ROOT),
                   QT_QPA_PLATFORM_PLUGIN_PATH=str(tmp_path))
        r = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "gui", "--screenshot",
                            str(tmp_path / "s.png")], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, (platform, r.returncode, r.stderr)
        assert r.stderr.startswith(f"tapescope gui: QT_QPA_PLATFORM={platform}: {says}")
        assert len(r.stderr.splitlines()) == 1 and "offscreen" in r.stderr
        assert not (tmp_path / "s.png").exists()


def test_an_explicit_xcb_is_still_checked():
    c = choose({"QT_QPA_PLATFORM": "xcb"})
    assert c.error.startswith("QT_QPA_PLATFORM=xcb but DISPLAY is unset")
    c = choose({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"}, missing=("libxcb-image.so.0",))
    assert "libxcb-image0" in c.error and "xcb-util-image" in c.error
    assert choose({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"}) == pc.PlatformChoice()


@pytest.mark.parametrize("system", ["win32", "darwin"])
def test_windows_and_macos_are_left_alone(system):
    c = choose_platform({}, system=system, loads=never, answers=never, plugin=never)
    assert c == pc.PlatformChoice()


def test_apply_sets_the_platform_and_nothing_else():
    env: dict[str, str] = {}
    pc.apply(pc.PlatformChoice(), env)
    assert env == {}
    pc.apply(pc.PlatformChoice(platform="offscreen"), env)
    assert env == {"QT_QPA_PLATFORM": "offscreen"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sonames: Linux")
def test_the_real_library_lookup():
    assert pc.library_loads("libc.so.6")
    assert not pc.library_loads("libtapescope-no-such-library.so.7")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 sockets: Linux")
def test_the_real_display_probe(tmp_path):
    path = tmp_path / "X0"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(str(path))
        srv.listen(1)
        assert pc.display_answers(f"{path}:0")
    assert not pc.display_answers(f"{path}:0")  # closed: nobody answers
    with socket.socket() as srv:  # an `ssh -X` style host:N display on a TCP port
        srv.bind(("127.0.0.1", 0))
        port = srv.getsockname()[1]
        if port > 6000:
            srv.listen(1)
            assert pc.display_answers(f"127.0.0.1:{port - 6000}.0")
    assert not pc.display_answers("nonsense")
    assert not pc.display_answers(":notanumber")


def test_the_check_imports_no_qt():
    """The check runs before Qt may load: importing it with PySide6 blocked must work."""
    code = ("import sys; sys.modules['PySide6'] = None; sys.modules['shiboken6'] = None\n"
            "import tapescope.app.platform_check as pc\n"
            "assert not any(m.startswith(('PySide6.', 'pyqtgraph')) for m in sys.modules)\n"
            "print(pc.choose_platform({}, screenshot=True).platform)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "offscreen"
