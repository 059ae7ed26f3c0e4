"""Every view's runnable example starts and renders (one subprocess, offscreen)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtGui import QImage

ROOT = Path(__file__).resolve().parents[2]


def test_every_example_renders(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-m", "tapescope.views.examples", "all", "--save",
                        str(tmp_path)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    for name in ("graph", "inspector", "parity", "stepper", "training", "kernels"):
        img = QImage(str(tmp_path / f"{name}.png"))
        assert img.width() == 900 and img.height() == 600, name
        small = img.scaled(90, 60)
        assert len({small.pixel(x, y) for x in range(90) for y in range(60)}) > 10, name
