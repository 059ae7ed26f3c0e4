"""``tapescope sweep``: the zoo's MLP captured as it runs and once per setting flipped, each
judged against the reference and the baseline, one table (issue 43 item 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tapescope.core.capture.file import COMPILED_OP, load  # noqa: E402
from tapescope.core.capture.judge import reference_available  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ZOO = Path(__file__).resolve().parent / "zoo"
ENV = dict(os.environ, PYTHONPATH=str(ROOT), TAPESCOPE_PROGRESS="0")


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", *argv], cwd=ZOO, env=ENV,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(not reference_available(), reason="no aten reference table")
def test_sweep_names_the_setting_that_parts(tmp_path):
    out = tmp_path / "sweep"
    p = cli("sweep", "--out", str(out), "--settings", "threads,autocast,compile", "--steps", "2",
            "--", "python", "-m", "mlp_pkg.train", "--steps", "2")
    assert p.returncode == 1, p.stdout + p.stderr[-3000:]  # autocast parts from the baseline
    assert "Traceback" not in p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:2] == ["setting", "flipped"] and "cause" in lines[0]
    rows = {r["setting"]: r for r in json.loads((out / "sweep.json").read_text())["rows"]}
    assert list(rows) == ["baseline", "threads", "autocast", "compile"]
    # the script's own output went to its log, not into the table
    assert "loss" in (out / "baseline.log").read_text()
    assert all(not ln.startswith("loss ") for ln in lines)
    ac = rows["autocast"]
    assert not ac["agree"] and ac["left"] == "B" and ac["first_parted"]["module"] == "MLP.fc1"
    assert ac["loss"] != rows["baseline"]["loss"]
    assert "computes in bfloat16" in ac["cause"]
    th = rows["threads"]
    assert th["flip"] in ("threads=1", "threads=2")
    if th["agree"]:
        assert th["loss"] == rows["baseline"]["loss"] and th["first_parted"] is None
    co = rows["compile"]  # the model compiled (inductor) from outside, captured compiled
    assert co["flip"] == "compile=inductor" and "skipped" not in co, co
    assert load(out / "compile.capture").ops["op"].count(COMPILED_OP) == 4
    if not co["agree"]:  # where: inside the compiled graph, or a matched op after it
        fp = co["first_parted"]
        assert fp["step"] == 1 and co["left"] in ("A", "B", "both"), fp
    table = {ln.split()[0]: ln for ln in lines[1:] if ln and not ln.startswith(" ")}
    assert "this run left the reference: computes in bfloat16" in table["autocast"]
    assert "MLP.fc1" in table["autocast"] and "compile=inductor" in table["compile"]
    assert rows["baseline"]["ops_introduced"] >= 1 and rows["baseline"]["loss"] is not None
    for name in ("baseline", "threads", "autocast"):
        assert (out / f"{name}.capture").is_file()


def test_sweep_bad_input_is_one_line(tmp_path):
    for argv, want in ((["--settings", "threads,warp"], "unknown warp"),
                       ([], "no command to capture")):
        p = cli("sweep", "--out", str(tmp_path / "s"), *argv,
                *(["--", "python", "-m", "mlp_pkg.train"] if argv else []))
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(lines) == 1 and want in lines[0], p.stderr
        assert lines[0].startswith("tapescope sweep: ")
