"""``tapescope gui --screenshot``: renders offscreen to a PNG of at least 1280x800 and exits."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QImage

from tests.helpers.gui import ROOT, error_lines, run_gui


def test_screenshot_of_a_workload(tmp_path):
    out = tmp_path / "shot.png"
    r = run_gui("--workload", "mlp", "--screenshot", str(out), config=tmp_path)
    assert r.returncode == 0, r.stderr
    img = QImage(str(out))
    assert img.width() >= 1280 and img.height() >= 800
    # not a blank frame: the window has many distinct colours (graph, heatmap, table)
    small = img.scaled(160, 100)
    colours = {small.pixel(x, y) for x in range(160) for y in range(100)}
    assert len(colours) > 50


def test_screenshot_with_a_bad_file_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "junk.tape"
    bad.write_bytes(b"not a tape at all")
    out = tmp_path / "shot.png"
    r = run_gui(str(bad), "--screenshot", str(out), config=tmp_path)
    assert r.returncode == 2
    lines = error_lines(r)
    assert len(lines) == 1 and lines[0].startswith("tapescope gui: "), r.stderr
    assert str(bad) in lines[0] and "not a tapescope tape file" in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""
    r = run_gui("--workload", "nope", "--screenshot", str(out), config=tmp_path)
    assert r.returncode == 2 and "unknown workload 'nope'" in r.stderr
    assert len(error_lines(r)) == 1, r.stderr
    # checked before any window opens: the same main() in this process (a fresh interpreter
    # costs ~2.4 CPU s each; the two real processes above keep the status and stderr as a user
    # sees them, and tests/app/test_cli_contract.py runs every bad gui input in one too)
    from tapescope.app.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    capsys.readouterr()
    assert main(["gui", "--size", "800x600", "--screenshot", str(out)]) == 2
    got = capsys.readouterr()
    assert got.err.splitlines() == ["tapescope gui: --size 800x600 is below the 1280x800 minimum"]
    assert got.out == ""
    assert main(["gui", "--live", "--steps", "0"]) == 2
    got = capsys.readouterr()
    assert got.err.splitlines() == ["tapescope gui: --steps 0: a live session runs at least 1 step"]
    assert got.out == ""


def test_a_live_session_that_fails_is_one_line_and_exit_2(tmp_path):
    """``--live --device cuda`` without a usable GPU: the worker fails, the picture still shows
    why, and the command says so in one line with status 2 (it used to exit 0)."""
    out = tmp_path / "shot.png"
    env_cuda = run_gui("--live", "--device", "cuda", "--steps", "2", "--screenshot", str(out),
                       config=tmp_path)
    if env_cuda.returncode == 0:
        pytest.skip("a CUDA device answered here: the live session did not fail")
    assert env_cuda.returncode == 2, env_cuda.stderr
    lines = error_lines(env_cuda)
    assert len(lines) == 1 and lines[0].startswith("tapescope gui: ") and "cuda" in lines[0]
    assert "Traceback" not in env_cuda.stderr


def test_onnx_budget_flags_reach_a_model_opened_in_the_window(tmp_path):
    """`gui M.onnx` runs the model under the same budgets as `tapescope onnx`, and the same
    flags raise or lower them (a limit error names the flag)."""
    model = str(ROOT / "resources" / "models" / "tiny_convnet.onnx")
    out = tmp_path / "shot.png"
    r = run_gui(model, "--screenshot", str(out), config=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_gui(model, "--max-elements", "4", "--screenshot", str(out), config=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = error_lines(r)
    assert len(lines) == 1 and "over the limit of 4" in lines[0], r.stderr
    assert "raise it with --max-elements" in lines[0]
