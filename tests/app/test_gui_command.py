"""``tapescope gui --screenshot``: renders offscreen to a PNG of at least 1280x800 and exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtGui import QImage

ROOT = Path(__file__).resolve().parents[2]


def run_gui(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    return subprocess.run([sys.executable, "-m", "app.cli", "gui", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_screenshot_of_a_workload(tmp_path):
    out = tmp_path / "shot.png"
    r = run_gui("--workload", "mlp", "--screenshot", str(out))
    assert r.returncode == 0, r.stderr
    img = QImage(str(out))
    assert img.width() >= 1280 and img.height() >= 800
    # not a blank frame: the window has many distinct colours (graph, heatmap, table)
    small = img.scaled(160, 100)
    colours = {small.pixel(x, y) for x in range(160) for y in range(100)}
    assert len(colours) > 50


def test_screenshot_with_a_bad_file_reports_and_fails(tmp_path):
    bad = tmp_path / "junk.tape"
    bad.write_bytes(b"not a tape at all")
    out = tmp_path / "shot.png"
    r = run_gui(str(bad), "--screenshot", str(out))
    assert r.returncode == 1
    assert "junk.tape" in r.stderr and "not a tapescope tape file" in r.stderr
    r = run_gui("--workload", "nope", "--screenshot", str(out))
    assert r.returncode == 1 and "unknown workload 'nope'" in r.stderr
