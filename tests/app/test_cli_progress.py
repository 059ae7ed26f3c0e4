"""Long CLI work shows one updating stderr line on a terminal (a pty here) and nothing in a
pipe: a tape load (`fuse --tape`), an ONNX model's load and run (`onnx`), and `report`'s
opening, steps and writing. stdout stays clean on both."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.terminal import drain_pty, open_pty

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pty: Linux")


def _on_a_terminal(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """(exit status, what the terminal (stderr) got, stdout) of ``tapescope ARGV``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen")
    env.pop("TAPESCOPE_PROGRESS", None)
    master, slave = open_pty()
    proc = subprocess.Popen([sys.executable, "-m", "tapescope.app.cli", *argv], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    try:
        text = drain_pty(master, until=lambda: proc.poll() is not None, timeout=300)
        out = proc.communicate(timeout=60)[0].decode()
    finally:
        os.close(master)
    return proc.returncode, text, out


def _in_a_pipe(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen")
    env.pop("TAPESCOPE_PROGRESS", None)
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_tape_load_says_what_and_how_big_on_a_terminal(tmp_path):
    tape = ROOT / "resources" / "tapes" / "transformer.tape"
    argv = ["fuse", "--tape", str(tape), "--device", "host"]
    rc, text, out = _on_a_terminal(argv, tmp_path)
    assert rc == 0, out
    size = tape.stat().st_size
    shown = f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"
    assert f"loading transformer.tape ({shown})" in text, text[-2000:]
    assert "0:00:0" in text  # how long
    assert "\x1b" not in out and "segments" in out.lower()
    piped = _in_a_pipe(argv, tmp_path)
    assert piped.returncode == 0 and piped.stderr == "" and piped.stdout == out


def test_an_onnx_load_and_run_count_nodes_on_a_terminal(tmp_path):
    argv = ["onnx", "--example", "torch_cnn"]
    rc, text, out = _on_a_terminal(argv, tmp_path)
    assert rc == 0, out
    assert "loading torch_cnn.onnx (" in text
    assert "running torch_cnn.onnx (nodes and iterations)" in text
    # how far: the nodes run so far (the line is redrawn as they go; the last count is >= 1)
    counts = [int(n) for n in re.findall(r"(\d+)/\?", text)]
    assert counts and max(counts) >= 1, text[-2000:]
    assert "\x1b" not in out and "result  PASS" in out
    piped = _in_a_pipe(argv, tmp_path)
    assert piped.returncode == 0 and piped.stderr == "" and piped.stdout == out


def test_a_report_shows_opening_steps_and_writing_on_a_terminal(tmp_path):
    argv = ["report", "--workload", "mlp", "--device", "host", "--steps", "2",
            "--out", str(tmp_path / "r.html")]
    rc, text, out = _on_a_terminal(argv, tmp_path)
    assert rc == 0, out
    assert "opening mlp on host" in text
    assert "report mlp" in text and "/2" in text  # steps done of 2
    assert "writing r.html" in text
    assert "\x1b" not in out and "step    2" in out and "wrote " in out
    piped = _in_a_pipe(argv, tmp_path)
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr


def test_a_bad_tape_on_a_terminal_still_ends_in_one_clean_line(tmp_path):
    bad = tmp_path / "bad.tape"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    rc, text, out = _on_a_terminal(["fuse", "--tape", str(bad)], tmp_path)
    assert rc == 2 and out == ""
    assert "loading bad.tape" in text  # the line was drawn ...
    # ... and erased before the error: what is left on the terminal is the one line
    left = text.rsplit("\x1b[2K", 1)[-1]
    assert "\x1b" not in left and left.strip().splitlines() == [
        f"tapescope fuse: {bad}: truncated or corrupt (BadZipFile: File is not a zip file)"]
