"""``tapescope gui`` on a terminal: Ctrl-C ends it (exit 130, no traceback), and a headless run
prints nothing of Qt's on stderr (issue 25, items 17 and 18)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_ctrl_c_stops_the_gui_with_exit_130(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "tapescope.app.cli", "gui", "--workload", "mlp"],
                         cwd=ROOT, env={**_env(), "XDG_CONFIG_HOME": str(tmp_path)},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait for the event loop: the process goes idle once the window is up (a Ctrl-C
        # while it is still being built ends it the same way)
        end, last, idle_since = time.monotonic() + 120, -1, None
        while time.monotonic() < end and p.poll() is None:
            now = _cpu_ticks(p.pid)
            if now == last:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 1.5:
                    break
            else:
                idle_since, last = None, now
            time.sleep(0.25)
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal sends
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.strip() == "tapescope gui: interrupted"


def test_a_screenshot_run_prints_no_qt_noise(tmp_path):
    out = tmp_path / "x.png"
    r = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "gui", "--workload", "mlp",
                        "--screenshot", str(out), "--size", "1280x800"], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # was "This plugin does not support propagateSizeHints()" x3
    assert r.stdout.strip() == f"wrote {out} (1280x800)"


def test_debug_shows_the_traceback_for_onnx_and_gui_too(tmp_path, capsys, monkeypatch):
    from tapescope.app.cli import main

    bad = tmp_path / "bad.tape"
    bad.write_text("not a tape")
    runs = {
        "onnx": ["onnx", str(bad)],
        "gui": ["gui", str(bad), "--screenshot", str(tmp_path / "x.png")],
    }
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for name, argv in runs.items():
        # without --debug: the same main() in this process (a fresh interpreter costs ~1-3 CPU
        # s; tests/app/test_cli_contract.py runs a corrupt file through every command, gui and
        # onnx too, in a real process: one line, no Qt noise, as a user sees it)
        capsys.readouterr()
        assert main(argv) == 2
        plain = capsys.readouterr()
        lines = plain.err.strip().splitlines()
        assert len(lines) == 1 and plain.out == "", plain.err
        assert lines[0].startswith(f"tapescope {name}: ") and "Traceback" not in plain.err
        debug = subprocess.run([sys.executable, "-m", "tapescope.app.cli", *argv, "--debug"],
                               cwd=ROOT,
                               env=_env(), capture_output=True, text=True, timeout=300)
        assert debug.returncode == 2 and "Traceback" in debug.stderr, (name, debug.stderr)
        assert debug.stderr.strip().splitlines()[-1] == lines[0]  # the same line, last
