"""The shipped examples: found through the installed `resources` package (importlib.resources),
opened by `tapescope gui --example NAME` and File > Open example. The wheel-install check is
in .ci/run (a fresh venv outside the checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

from tapescope import resources
from tapescope.resources import EXAMPLES, example_path, resource_path

ROOT = Path(__file__).resolve().parents[2]


def test_every_example_and_the_style_sheet_come_from_the_package():
    pkg = Path(str(files("tapescope.resources")))
    for name in EXAMPLES:
        p = example_path(name)
        assert p.is_file() and p.stat().st_size > 0 and pkg in p.parents, name
    assert "QDockWidget::title" in resource_path("style.qss").read_text()
    with pytest.raises(KeyError, match="examples: mlp, transformer, torch_cnn"):
        example_path("nope")
    with pytest.raises(FileNotFoundError, match="tapescope's tapes/nope.tape is not installed"):
        resource_path("tapes/nope.tape")


def test_the_wheel_carries_every_shipped_file():
    # what pyproject's package-data globs take must be every data file under resources/ that
    # the app uses (the generator scripts stay out): a new example file must be listed
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["tapescope.resources"]
    pkg = Path(resources.__file__).parent
    taken = {p for g in globs for p in pkg.glob(g)}
    used = {example_path(n) for n in EXAMPLES} | {resource_path("style.qss")}
    used |= set((pkg / "models").glob("*.npy")) | set((pkg / "workloads").glob("*.py"))
    assert used <= taken, sorted(str(p) for p in used - taken)


def _gui(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(cwd),
               PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", "gui", *args], cwd=cwd,
                          env=env,
                          capture_output=True, text=True, timeout=180)


def test_gui_example_opens_the_shipped_model_from_another_folder(tmp_path, capsys, monkeypatch):
    r = _gui("--example", "torch_cnn", "--screenshot", "s.png", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "s.png").stat().st_size > 10_000
    # refused before any window opens: the same main() in this process (a fresh interpreter
    # costs ~0.8-3 CPU s each; tests/app/test_cli_contract.py runs bad gui input in real
    # processes, with their status and stderr as a user sees them)
    from tapescope.app.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    capsys.readouterr()
    assert main(["gui", "--example", "mlp", "x.tape", "--screenshot", "t.png"]) == 2
    bad = capsys.readouterr()
    lines = bad.err.splitlines()
    assert len(lines) == 1 and bad.out == "" and not (tmp_path / "t.png").exists()
    assert lines[0].startswith("tapescope gui: give a FILE or --example, not both")
    assert main(["gui", "--example", "resnet"]) == 2
    assert "invalid choice: 'resnet'" in capsys.readouterr().err


def test_file_open_example_menu(qtbot, settings):
    from tapescope.app.qt.main_window import MainWindow

    win = MainWindow(settings=settings)
    qtbot.addWidget(win)
    assert list(win.example_actions) == list(EXAMPLES)
    assert win.example_actions["mlp"].text() == "mlp (mlp.tape)"
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=10000):
        win.example_actions["mlp"].trigger()
    assert win.session is not None and len(win.session.tape.nodes) == 23
    assert win.session.source == str(example_path("mlp"))  # the installed copy


def test_onnx_example_runs_the_shipped_model_against_its_shipped_outputs(capsys):
    from tapescope.app.cli import main
    from tapescope.resources import ONNX_EXAMPLES, onnx_example

    for name in ONNX_EXAMPLES:
        model, inputs, expected = onnx_example(name)
        assert model.is_file() and inputs and expected, name
        assert main(["onnx", "--example", name]) == 0, name
        out = capsys.readouterr().out
        assert "(given)" in out and "result  PASS" in out, out
    assert main(["onnx"]) == 2
    assert main(["onnx", "m.onnx", "--example", "tiny_mlp"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["tapescope onnx: give MODEL.onnx or --example NAME (one of them)"] * 2
