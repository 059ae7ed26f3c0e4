"""The OnnxWorkload subclass route of docs/workloads.md ("An ONNX model with your data and
optimizer"): the page shows resources/workloads/onnx_data_loop.py as it is, and that file
trains with its own data loop and optimizer (AdamW, a warmup into cosine) through the same
commands a model does, bit for bit on the host backend."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tapescope.app.cli import main
from tapescope.core import optim
from tapescope.core.schedule import Schedule
from tapescope.core.workloads import load_file

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "resources" / "workloads" / "onnx_data_loop.py"


@pytest.fixture(scope="module")
def wl():
    return load_file(EXAMPLE, dtype=np.float64)


def test_the_page_shows_the_file_as_it_is():
    page = (ROOT / "docs" / "workloads.md").read_text()
    section = page.split("## An ONNX model with your data and optimizer", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert block == EXAMPLE.read_text()
    assert len(block.splitlines()) <= 45  # the route is ~40 lines


def test_its_data_loop_and_optimizer_are_the_ones_trained(wl):
    assert wl.loss_kind == "cross_entropy" and wl.n_classes == 4
    # step s takes 2 points of the epoch's seeded order, each point once per epoch
    rows = np.concatenate([wl.rows(s) for s in range(1, 33)])
    assert sorted(rows.tolist()) == list(range(64))
    assert not np.array_equal(np.concatenate([wl.rows(s) for s in range(33, 65)]), rows)
    loss = wl.record(5)
    ce = wl.tape.node(loss.id)
    assert ce.op == "cross_entropy"
    np.testing.assert_array_equal(wl.tape.value(ce.inputs[1]), wl.labels[wl.rows(5)])
    np.testing.assert_array_equal(wl.tape.value(wl.inputs["x"]),
                                  wl.points[wl.rows(5)].astype(np.float32))
    opt = wl.make_optimizer()
    assert isinstance(opt, optim.AdamW) and opt.weight_decay == 1e-2
    assert opt.schedule == Schedule("cosine", warmup=3, t_max=40)
    assert opt.schedule.lrs(1e-2, 4)[0] < opt.schedule.lrs(1e-2, 4)[3]  # the warmup


def test_it_learns_the_blobs():
    losses = load_file(EXAMPLE, dtype=np.float64).train(64)
    assert all(np.isfinite(losses))
    assert np.mean(losses[32:]) < 0.5 * np.mean(losses[:16])  # measured 1.19 vs 3.63


def test_train_and_parity_run_it_bit_for_bit(tmp_path, capsys):
    assert main(["train", "--workload", str(EXAMPLE), "--steps", "3"]) == 0
    assert "3 steps in" in capsys.readouterr().out
    out = tmp_path / "p.json"
    assert main(["parity", "--workload", str(EXAMPLE), "--device", "host", "--steps", "4",
                 "--json", str(out)]) == 0
    assert json.loads(out.read_text())["exact"]
