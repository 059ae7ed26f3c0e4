"""Messages speak the user's terms: no Python reprs of None or dicts, one step numbering."""

from __future__ import annotations

import pytest

from app.cli import main
from app.commands.parity import divergence_text
from app.run_provenance import parse_inject
from app.runs import PairRunner, SessionConfig, StepError

SAYS_ITS_STEP = '''
import numpy as np

from core import ops
from core.workloads import Workload


class SaysItsStep(Workload):
    name = "says-its-step"

    def build(self):
        self.w = self.tape.param(self.init(4, 3), name="w")

    def batch(self, step):
        if step == 3:
            raise ValueError(f"bad batch at step {step}")
        return {"x": np.full((2, 4), float(step))}

    def episode(self, data):
        return ops.mean(data["x"] @ self.w, name="loss")
'''


def test_batch_gets_the_step_number_every_message_prints(tmp_path):
    wl = tmp_path / "says.py"
    wl.write_text(SAYS_ITS_STEP)
    r = PairRunner(SessionConfig(workload=str(wl), device="host"))
    assert [r.step().step for _ in range(2)] == [1, 2]
    with pytest.raises(StepError, match=r"^step 3: ValueError: bad batch at step 3$"):
        r.step()


def test_the_parity_summary_names_the_first_divergence_in_words(capsys):
    assert divergence_text(None) == "none"
    assert divergence_text({"step": 2, "node": 5, "op": "exp", "which": "grad"}) == \
        "step 2 node #5 exp (grad)"
    assert main(["parity", "--device", "host", "--steps", "1"]) == 0
    summary = [ln for ln in capsys.readouterr().out.splitlines() if "first divergence" in ln]
    assert len(summary) == 1 and "first divergence: none;" in summary[0]
    assert "None" not in summary[0] and "{" not in summary[0]


def test_an_inject_step_out_of_range_never_says_none():
    from core import workloads

    nodes = tuple(workloads.get("mlp").tape.nodes)
    with pytest.raises(ValueError, match=r"step 0 is not run \(steps are numbered from 1\)"):
        parse_inject("0@0", nodes)
    with pytest.raises(ValueError, match=r"step 9 is not run \(steps 1\.\.5\)"):
        parse_inject("0@9", nodes, 5)
