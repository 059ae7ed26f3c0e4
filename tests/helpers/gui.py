"""`tapescope gui` in a subprocess, offscreen, with its settings kept apart, and its stderr without
Qt's offscreen chatter (tests/app/test_gui_command.py, test_gui_model_args.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_gui(*args: str, cwd=ROOT, config=None) -> subprocess.CompletedProcess:
    """``tapescope gui ARGS`` offscreen, its settings in ``config`` (never the user's)."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    if config is not None:
        env["XDG_CONFIG_HOME"] = str(config)
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", "gui", *args], cwd=cwd,
                          env=env,
                          capture_output=True, text=True, timeout=120)


def error_lines(r: subprocess.CompletedProcess) -> list[str]:
    """stderr without Qt's offscreen chatter."""
    return [ln for ln in r.stderr.splitlines() if "propagateSizeHints" not in ln]
