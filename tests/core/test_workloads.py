"""Workloads: built-ins record identical structure each step; user files load or fail clearly."""

from pathlib import Path

import numpy as np
import pytest

from tapescope.core import workloads
from tapescope.core.workloads import WorkloadError

EXAMPLE = Path(__file__).resolve().parents[2] / "resources" / "workloads" / "logistic.py"


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_episode_structure_is_identical_every_step(name):
    wl = workloads.get(name)
    wl.record(0)
    first = [(n.op, n.inputs, n.shape, n.name) for n in wl.tape.nodes]
    wl.record(5)
    assert [(n.op, n.inputs, n.shape, n.name) for n in wl.tape.nodes] == first
    assert set(wl.inputs) >= {"x"} if name == "mlp" else {"tokens", "targets"}


def test_batches_are_deterministic_per_seed_and_step():
    a, b = workloads.get("mlp", seed=3), workloads.get("mlp", seed=3)
    assert np.array_equal(a.batch(7)["x"], b.batch(7)["x"])
    assert not np.array_equal(a.batch(7)["x"], a.batch(8)["x"])


def test_example_user_workload_trains():
    wl = workloads.get(str(EXAMPLE))
    losses = wl.train(30)
    assert losses[-1] < 0.5 * losses[0]


def test_user_workload_errors_carry_the_traceback(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\nraise ValueError('boom in user code')\n")
    with pytest.raises(WorkloadError, match="boom in user code") as e:
        workloads.get(str(bad))
    assert "bad.py" in e.value.details and "line 2" in e.value.details
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(WorkloadError, match="exactly one Workload subclass"):
        workloads.get(str(empty))
    with pytest.raises(WorkloadError, match="no such workload file"):
        workloads.get(str(tmp_path / "missing.py"))
    with pytest.raises(ValueError, match="unknown workload"):
        workloads.get("resnet")
