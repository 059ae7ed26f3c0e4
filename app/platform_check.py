"""Can a Qt platform start here?  Decided before any QApplication exists, without Qt.

Qt aborts the process (SIGABRT, rc 134) when its platform plugin cannot start, with a message
that blames the installation. This module looks first and turns each case into one line that
says what to do: no display at all (an SSH session, a server), an X display whose xcb runtime
libraries are missing (common on fresh installs), an X server that does not answer, or a
QT_QPA_PLATFORM naming a platform whose plugin is not there or does not load (the line names
the ones available).
It imports no Qt, so a test can fake the environment, the library lookup and the display.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Every library Qt's xcb platform plugin needs outside the wheel (`objdump -p` NEEDED of
# PySide6/Qt/plugins/platforms/libqxcb.so and Qt/lib/libQt6XcbQpa.so.6, plus what QtGui needs):
# soname -> (Debian/Ubuntu package, Fedora package). tests/app/test_desktop.py checks this
# table against the installed plugin, so a PySide6 upgrade that needs a new one fails a test.
XCB_LIBS: dict[str, tuple[str, str]] = {
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
}

# Qt's wayland plugin (PySide6/Qt/plugins/platforms/libqwayland*.so), the same way.
WAYLAND_LIBS: dict[str, tuple[str, str]] = {
    "libwayland-client.so.0": ("libwayland-client0", "libwayland-client"),
    "libwayland-cursor.so.0": ("libwayland-cursor0", "libwayland-cursor"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
}

NO_DISPLAY = ("no display to open a window on (DISPLAY and WAYLAND_DISPLAY are unset): run it "
              "on a desktop or over `ssh -X`, or add `--screenshot OUT.png` (works headless); "
              "`tapescope report` writes a parity report without a display")


@dataclass(frozen=True)
class PlatformChoice:
    """What to do before creating the QApplication."""

    platform: str | None = None  # set QT_QPA_PLATFORM to this (None: leave Qt's choice alone)
    error: str | None = None  # one line saying why no window can open and what to do


def library_loads(soname: str) -> bool:
    """True when the dynamic loader finds ``soname`` (and what it needs), as Qt's would."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def display_answers(display: str, timeout_s: float = 1.0) -> bool:
    """True when an X server accepts a connection at ``display`` (``:N``, ``host:N.S``)."""
    host, _, rest = display.rpartition(":")
    try:
        number = int(rest.split(".")[0])
    except ValueError:
        return False
    if host in ("", "unix") or host.startswith("/"):
        path = host if host.startswith("/") else f"/tmp/.X11-unix/X{number}"
        for addr in ("\0" + path, path):  # Linux X servers also listen on an abstract socket
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout_s)
                try:
                    s.connect(addr)
                    return True
                except OSError:
                    continue
        return False
    try:  # `ssh -X` gives localhost:10.0: a TCP port forwarded by ssh
        socket.create_connection((host, 6000 + number), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def qt_plugin(name: str) -> Path | None:
    """PySide6's platform plugin file ``name`` (e.g. ``libqwayland``), found without Qt."""
    spec = importlib.util.find_spec("PySide6")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for f in sorted((Path(root) / "Qt" / "plugins" / "platforms").glob(f"{name}*.so")):
            return f
    return None


def qt_platforms(env: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Every Qt platform plugin Qt would find, by key (``libqoffscreen.so`` -> ``offscreen``):
    PySide6's own folder, then ``QT_QPA_PLATFORM_PLUGIN_PATH`` and ``QT_PLUGIN_PATH/platforms``
    (where Qt looks too). Empty when PySide6 is not installed."""
    env = os.environ if env is None else env
    spec = importlib.util.find_spec("PySide6")
    roots = [Path(r) / "Qt" / "plugins" / "platforms"
             for r in ((spec.submodule_search_locations or []) if spec else [])]
    roots += [Path(d) for d in env.get("QT_QPA_PLATFORM_PLUGIN_PATH", "").split(os.pathsep) if d]
    roots += [Path(d) / "platforms" for d in env.get("QT_PLUGIN_PATH", "").split(os.pathsep)
              if d]
    out: dict[str, Path] = {}
    for root in roots:
        for f in sorted(root.glob("libq*.so")) if root.is_dir() else []:
            out.setdefault(f.name[len("libq"):-len(".so")], f)
    return out


def plugin_load_error(path: Path) -> str | None:
    """None when the dynamic loader can load the plugin file (and everything it needs) as Qt
    would; else the loader's one-line reason (a missing library, not an ELF, ...)."""
    try:
        ctypes.CDLL(str(path))
    except OSError as e:
        return " ".join(str(e).split())
    return None


def _explicit_error(explicit: str, platforms: Mapping[str, Path],
                    load_error: Callable[[Path], str | None]) -> str | None:
    """Why none of the platforms QT_QPA_PLATFORM names (``a;b``: Qt tries them in order; options
    after ``:``) can load, or None when one can. Qt itself would abort the process."""
    names = [p.split(":")[0].strip() for p in explicit.split(";") if p.split(":")[0].strip()]
    have = ", ".join(sorted(platforms)) or "none (is PySide6 installed?)"
    errors = []
    for name in names:
        # Qt 6's one wayland plugin serves wayland, wayland-egl, wayland-brcm, ...
        path = platforms.get(name) or (platforms.get("wayland") if name.startswith("wayland")
                                       else None)
        if path is None:
            continue
        why = load_error(path)
        if why is None:
            return None
        errors.append(f"Qt's {name!r} platform plugin does not load ({why})")
    if errors:
        return f"QT_QPA_PLATFORM={explicit}: {errors[0]}; available platforms: {have}"
    return (f"QT_QPA_PLATFORM={explicit}: Qt has no platform plugin {' or '.join(map(repr, names))}"
            f"; available platforms: {have}")


def missing_packages(missing: list[str], table: Mapping[str, tuple[str, str]]) -> str:
    """'apt-get install a b (Debian/Ubuntu) or dnf install c (Fedora)' for the missing sonames."""
    deb = list(dict.fromkeys(table[m][0] for m in missing))
    rpm = list(dict.fromkeys(table[m][1] for m in missing))
    return (f"sudo apt-get install {' '.join(deb)} (Debian/Ubuntu) or "
            f"sudo dnf install {' '.join(rpm)} (Fedora)")


def _xcb_error(missing: list[str]) -> str:
    return (f"Qt's X11 (xcb) platform cannot start, these libraries are missing: "
            f"{', '.join(missing)}; install them with {missing_packages(missing, XCB_LIBS)}")


def choose_platform(env: Mapping[str, str], *, screenshot: bool = False,
                    system: str = sys.platform,
                    loads: Callable[[str], bool] = library_loads,
                    answers: Callable[[str], bool] = display_answers,
                    plugin: Callable[[str], Path | None] = qt_plugin,
                    platforms: Callable[[], Mapping[str, Path]] | None = None,
                    load_error: Callable[[Path], str | None] = plugin_load_error,
                    ) -> PlatformChoice:
    """Pick the Qt platform for ``tapescope gui`` from the environment, or say why none starts.

    ``screenshot``: a picture needs no screen, so offscreen stands in for a missing one.
    ``platforms``/``load_error``: the plugins found (default: `qt_platforms` of ``env``) and
    whether one loads, for an explicit QT_QPA_PLATFORM.
    """
    if not system.startswith("linux"):
        return PlatformChoice()  # Windows and macOS always have their native platform
    fallback = PlatformChoice(platform="offscreen") if screenshot else None
    explicit = env.get("QT_QPA_PLATFORM", "").strip()
    x11 = env.get("DISPLAY", "").strip()
    if explicit:  # the user chose: xcb's libraries and display, else that the plugin loads
        if explicit.split(";")[0].split(":")[0].strip() != "xcb":
            found = platforms() if platforms is not None else qt_platforms(env)
            error = _explicit_error(explicit, found, load_error)
            return PlatformChoice(error=error) if error else PlatformChoice()
        if not x11:
            return PlatformChoice(error="QT_QPA_PLATFORM=xcb but DISPLAY is unset: " + NO_DISPLAY)
        missing = [s for s in XCB_LIBS if not loads(s)]
        return PlatformChoice(error=_xcb_error(missing)) if missing else PlatformChoice()

    problems: list[str] = []
    if env.get("WAYLAND_DISPLAY", "").strip():
        missing = [s for s in WAYLAND_LIBS if not loads(s)]
        if not missing and plugin("libqwayland") is not None:
            return PlatformChoice(platform="wayland;xcb" if x11 else "wayland")
        if missing:
            problems.append(f"Qt's wayland platform cannot start, these libraries are missing: "
                            f"{', '.join(missing)}; install them with "
                            f"{missing_packages(missing, WAYLAND_LIBS)}")
        else:
            problems.append("this PySide6 has no wayland platform plugin; set DISPLAY for X11")
    if x11:
        missing = [s for s in XCB_LIBS if not loads(s)]
        if missing:
            problems.append(_xcb_error(missing))
        elif not answers(x11):
            problems.append(f"no X server answers on DISPLAY={x11} (is it running, and may "
                            f"you connect to it?); `--screenshot OUT.png` works without one")
        else:
            return PlatformChoice(platform="xcb")
    if fallback is not None:
        return fallback
    return PlatformChoice(error=problems[-1] if problems else NO_DISPLAY)


def apply(choice: PlatformChoice, environ: dict | None = None) -> None:
    """Set QT_QPA_PLATFORM for the chosen platform (before the QApplication exists)."""
    if choice.platform:
        (os.environ if environ is None else environ)["QT_QPA_PLATFORM"] = choice.platform
