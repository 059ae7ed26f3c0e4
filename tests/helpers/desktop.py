"""A private Xvfb display for the tests that need a real X server, the environment of a child
with no display chosen, and how many colours a grabbed window shows (tests/app/test_desktop.py,
test_window_scenarios.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tapescope.app import platform_check

SCREEN = (1280, 800)
NO_DISPLAY_VARS = ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")


def free_display(first: int = 91, last: int = 150) -> int:
    """An X display number nobody holds in :first..:last - 1, or a skip. The Xvfb displays
    start from :91; a display that must stay silent is taken from :150 up, so that another
    worker's Xvfb, started between the check and its use, cannot be the one it names (a
    test saw its "nobody answers" display answer, then vanish: exit 1)."""
    for n in range(first, last):
        if not (Path(f"/tmp/.X11-unix/X{n}").exists() or Path(f"/tmp/.X{n}-lock").exists()):
            return n
    pytest.skip(f"no free X display number in :{first}..:{last - 1}")


@contextlib.contextmanager
def xvfb_display() -> Iterator[str]:
    """A private Xvfb display (1280x800), its name; skipped with a reason if unusable."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Xvfb is a Linux X server; this is " + sys.platform)
    exe = shutil.which("Xvfb")
    if exe is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb; .ci/run installs it)")
    missing = [s for s in platform_check.XCB_LIBS if not platform_check.library_loads(s)]
    if missing:
        pytest.skip("Qt's xcb platform cannot load here, missing " + ", ".join(missing))
    n = free_display()
    proc = subprocess.Popen([exe, f":{n}", "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24",
                             "-nolisten", "tcp", "-noreset"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    end = time.monotonic() + 20
    while not platform_check.display_answers(f":{n}"):
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            err = proc.stderr.read().decode(errors="replace")[-300:]
            pytest.skip(f"Xvfb :{n} did not start: {err}")
        time.sleep(0.05)
    try:
        yield f":{n}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def display_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment without any display or platform choice, settings under tmp_path."""
    env = {k: v for k, v in os.environ.items() if k not in NO_DISPLAY_VARS}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")  # never the user's settings
    env.update(extra)
    return env


def colours(path: Path) -> int:
    """How many colours a 160x100 scaling of the picture at ``path`` shows (a blank frame: few)."""
    from PySide6.QtGui import QImage

    img = QImage(str(path))
    assert not img.isNull(), path
    small = img.scaled(160, 100)
    return len({small.pixel(x, y) for x in range(160) for y in range(100)})
