"""``--worker`` with half precision (issue 28): ``--dtype float16|bfloat16`` runs the pair in
the worker, bit for bit as here (``--amp`` through the worker: the in-process pair of
tests/app/test_remote_client_inprocess.py)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tapescope.app.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow  # a worker process and two episodes: ~9 s on the loaded 2-core machine
def test_a_bfloat16_episode_through_the_worker_is_the_one_run_here(tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ROOT)  # (the worker imports this checkout)
    worker = f"{sys.executable} -m tapescope.app.cli worker"
    args = ["parity", "--workload", "mlp", "--device", "host", "--dtype", "bfloat16",
            "--steps", "2"]
    assert main(args + ["--worker", worker, "--json", str(tmp_path / "w.json")]) == 0
    assert "through the worker" in capsys.readouterr().out
    assert main(args + ["--json", str(tmp_path / "h.json")]) == 0
    there, here = (json.loads((tmp_path / f).read_text()) for f in ("w.json", "h.json"))
    assert there["losses"] == here["losses"]
    assert there["losses"][1]["reference"] == 1.0859375  # a bfloat16 value, not float32's
