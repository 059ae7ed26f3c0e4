"""``tapescope parity --capture FILE --worker CMD`` (issue 42 item 6): the capture is judged
by the worker, where its file is (FILE a path on the worker's machine), and only the report
comes back: the same verdicts, counts and exit code as judging it here; a file the worker
cannot read is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.judge import reference_available  # noqa: E402

pytestmark = pytest.mark.skipif(not reference_available(), reason="no aten reference table")

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), TAPESCOPE_PROGRESS="0")
WORKER = f"{sys.executable} -m tapescope.app.cli worker"


def cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", *argv], cwd=cwd, env=ENV,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def small_capture(tmp_path_factory) -> Path:
    """Two SGD steps of a small MLP, captured with the Python API."""
    from tapescope.app.capture import capture

    path = tmp_path_factory.mktemp("worker") / "mlp.capture"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    with capture(path, steps=2):
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return path


def test_the_worker_judges_the_capture_as_here(small_capture, tmp_path):
    here = cli("parity", "--capture", str(small_capture), "--json", str(tmp_path / "here.json"),
               cwd=tmp_path)
    there = cli("parity", "--capture", str(small_capture), "--json",
                str(tmp_path / "there.json"), "--worker", WORKER, cwd=tmp_path)
    assert here.returncode in (0, 1), here.stderr[-2000:]
    assert there.returncode == here.returncode, there.stderr[-2000:]
    a = json.loads((tmp_path / "here.json").read_text())
    b = json.loads((tmp_path / "there.json").read_text())
    assert a["counts"]["exact"] + a["counts"]["introduced"] + a["counts"]["inherited"] > 20
    for d in (a, b):
        d.pop("judge_seconds")
    assert a == b  # every op's verdicts, the losses, the settings: the same report
    assert here.stdout == there.stdout


def test_a_file_the_worker_cannot_read_is_one_line(tmp_path):
    missing = tmp_path / "nowhere.capture"
    p = cli("parity", "--capture", str(missing), "--worker", WORKER, cwd=tmp_path)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("tapescope parity: "), p.stderr
    assert "nowhere.capture" in lines[0] and "worker" in lines[0]


def test_worker_with_against_is_refused(small_capture, tmp_path):
    p = cli("parity", "--capture", str(small_capture), "--against", str(small_capture),
            "--worker", WORKER, cwd=tmp_path)
    assert p.returncode == 2 and "--worker judges one capture" in p.stderr, p.stderr[-2000:]
