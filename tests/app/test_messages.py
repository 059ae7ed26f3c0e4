"""Messages speak the user's terms: no Python reprs of None or dicts, one step numbering."""

from __future__ import annotations

from pathlib import Path

import pytest

from tapescope.app.cli import main
from tapescope.app.commands.parity import divergence_text
from tapescope.app.run_provenance import parse_inject
from tapescope.app.runs import PairRunner, SessionConfig, StepError

BRANCHES = Path(__file__).with_name("data") / "branches.py"


def test_batch_gets_the_step_number_every_message_prints(tmp_path):
    wl = tmp_path / "says.py"  # a user workload whose own message names the step it was given
    wl.write_text(BRANCHES.read_text().replace(
        "    def batch(self, step):\n",
        "    def batch(self, step):\n        if step == 3:\n"
        "            raise ValueError(f'bad batch at step {step}')\n"))
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
    from tapescope.core import workloads

    nodes = tuple(workloads.get("mlp").tape.nodes)
    with pytest.raises(ValueError, match=r"step 0 is not run \(steps are numbered from 1\)"):
        parse_inject("0@0", nodes)
    with pytest.raises(ValueError, match=r"step 9 is not run \(steps 1\.\.5\)"):
        parse_inject("0@9", nodes, 5)
