"""Issue 46, "the terminal leads to the culprit": `parity`'s table lists the nodes that
introduced error first (then the worst inherited) and says how many it cut; a differing loss
prints both values with their bits and ulp; a torch report shows the torch settings; a cause
never reads ``unknown: unknown``; a shape error in a workload names the user's line."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from tapescope.app.cli import main
from tapescope.app.commands.parity_table import (
    PARITY_ROWS,
    cut_notice,
    loss_text,
    origin_text,
    other_loss_text,
    table_order,
)


def _table(out: str) -> list[list[str]]:
    """The printed table's rows (split), from the header to the summary line."""
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("node op"))
    rows = []
    for ln in lines[head + 1:]:
        if not ln[:5].strip().isdigit():
            break
        rows.append(ln.split())
    return rows


def test_introduced_nodes_lead_the_table_and_the_cut_is_said(tmp_path, capsys):
    js = tmp_path / "p.json"
    rc = main(["parity", "--workload", "transformer", "--device", "host", "--math", "platform",
               "--steps", "2", "--json", str(js)])
    out = capsys.readouterr().out
    rep = json.loads(js.read_text())
    assert rc == 1
    rows = _table(out)
    intro = list(dict.fromkeys(e["node"] for e in rep["introduced"]))
    assert intro, "platform math introduces error on the transformer"
    shown = [int(r[0]) for r in rows]
    # every introducing node is printed before any inherited one (#35 softmax, #45 swiglu)
    assert shown[:len(intro)] == intro[:PARITY_ROWS], out
    assert {35, 45} <= set(shown), out
    assert all(r[-1] == "introduced" for r in rows[:len(intro)])
    assert all(r[-1] == "inherited" for r in rows[len(intro):])
    # the inherited rows come worst first
    bad = {n["id"]: n for n in rep["nodes"]}
    worst = [max(bad[i][w]["max_ulp"] for w in ("value", "grad") if bad[i][w])
             for i in shown[len(intro):]]
    assert worst == sorted(worst, reverse=True), out
    n_bad = sum(1 for n in rep["nodes"] if any(n[w] and n[w]["n_diff"] for w in
                                              ("value", "grad")))
    assert len(rows) == PARITY_ROWS < n_bad
    assert cut_notice(n_bad - PARITY_ROWS) in out
    assert f"… {n_bad - PARITY_ROWS} more nodes differ (--json lists them)" in out
    # a step whose loss differs prints both losses' bits and their distance
    for e in rep["losses"]:
        line = next(ln for ln in out.splitlines() if ln.startswith(f"step {e['step']:4d}"))
        if e["reference"] != e["candidate"]:
            assert "0x" in line and "ulp apart" in line and repr(e["reference"]) in line, line


def test_an_injected_node_is_the_first_row(capsys):
    rc = main(["parity", "--workload", "transformer", "--device", "host", "--steps", "3",
               "--inject", "20@2"])
    out = capsys.readouterr().out
    assert rc == 1
    rows = _table(out)
    assert rows[0][0] == "20" and rows[0][-1] == "introduced", out
    assert all(r[-1] == "inherited" for r in rows[1:])
    assert "more nodes differ" not in out  # nothing cut, nothing said


def test_against_lists_introduced_first_and_says_the_cut(capsys):
    rc = main(["parity", "--workload", "transformer", "--device", "host", "--math", "platform",
               "--steps", "2", "--against", "host"])
    out = capsys.readouterr().out
    assert rc == 1
    tail = out[out.index("A = "):]
    rows = _table(tail)
    assert len(rows) == 20 and [int(r[0]) for r in rows[:2]] == [35, 45], tail
    assert "more nodes differ (--json lists them)" in tail


def test_a_differing_loss_prints_bits_and_ulp():
    a = 1.0
    b = float(np.nextafter(1.0, 2.0))
    t = loss_text(a, b, "float64")
    assert "0x3ff0000000000000" in t and "0x3ff0000000000001" in t and "1 ulp apart" in t
    assert repr(b) in t  # the digits that tell the two apart
    f1, f2 = float(np.float32(1.5)), float(np.nextafter(np.float32(1.5), np.float32(2)))
    t = loss_text(f1, f2, "float32")
    assert "0x3fc00000" in t and "0x3fc00001" in t and "1 ulp apart" in t, t
    assert loss_text(2.5, 2.5, "float64") == "loss 2.5  device 2.5"
    assert other_loss_text(2.5, 2.5) == "2.5"
    assert "NaN against a number" in loss_text(1.0, float("nan"))


def test_table_order_puts_introduced_first_then_worst():
    worst = {1: (1, -5), 2: (1, -50), 3: (0, 0), 4: (1, -1)}
    intro = [{"node": 4, "step": 1}, {"node": 1, "step": 1}, {"node": 4, "step": 2}]
    assert table_order([1, 2, 3, 4], intro, worst) == [4, 1, 3, 2]


def test_a_node_outside_every_reordering_bound_leads_and_shows_that_array():
    """``--fail-on bug`` fails on an array outside every reordering bound: its node leads the
    table (a cut never hides it) and its cause column names that array, not the node's first
    (a parameter whose gradient is a valid fma and whose update is the bug)."""
    from tapescope.core.bounds import OUTSIDE, VALID

    intro = [{"node": 9, "which": "value", "cause": "fma", "class": VALID},
             {"node": 0, "which": "grad", "by": [9], "cause": "fma", "class": VALID},
             {"node": 0, "which": "update", "cause": "unknown", "class": OUTSIDE},
             {"node": 5, "which": "update", "cause": "unknown", "class": OUTSIDE}]
    assert table_order([9, 0, 5, 7], intro) == [0, 5, 9, 7]
    assert origin_text(0, intro, True) == "update: unknown · outside"
    assert origin_text(9, intro, True) == "value: fma · valid"
    assert origin_text(0, intro, False) == "introduced"
    assert origin_text(7, intro, True) == "inherited"
    from tapescope.app.commands import parity_table

    assert parity_table._OUTSIDE == OUTSIDE


def test_report_of_a_torch_run_shows_its_settings_and_no_unknown_unknown(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "r.html"
    rc = main(["report", "--workload", "mlp", "--device", "torch", "--steps", "1",
               "--explain", "--out", str(out)])
    capsys.readouterr()
    assert rc in (0, 1)
    html = out.read_text()
    verdict = html[html.index("id=verdict"):html.index("id=first-divergence")]
    assert "torch threads" in verdict and "tf32" in verdict and "deterministic" in verdict
    assert ">fuse<" not in verdict and "refmath</td>" not in verdict.split("candidate")[1]
    assert "unknown: unknown" not in html


def test_cause_text_of_an_unknown_is_said_once():
    from tapescope.app.report_html import _cause

    e = {"cause": "unknown", "explain": {"cause": "unknown", "variant": "", "closest": None}}
    assert _cause(e) == "unknown (no variant of the reference order applies to this op)"
    e = {"cause": "fma", "explain": {"cause": "fma", "variant": "acc = fma(a, b, acc)"}}
    assert _cause(e) == "fma: matches the reference with acc = fma(a, b, acc)"


def test_doctor_says_what_torch_is_for(capsys):
    assert main(["doctor"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("torch "))
    assert "--device torch" in row, row


def test_a_shape_error_names_the_users_line(tmp_path, capsys):
    src = tmp_path / "bad_shape.py"
    src.write_text(textwrap.dedent("""\
        import numpy as np

        from tapescope.core import ops, optim
        from tapescope.core.workloads import Workload


        class Bad(Workload):
            name = "bad"

            def build(self):
                self.w = self.tape.param(np.zeros((3, 1)), name="w")

            def batch(self, step):
                rng = self.step_rng(step)
                return {"x": rng.standard_normal((4, 2)), "y": rng.standard_normal((4, 1))}

            def episode(self, data):
                p = data["x"] @ self.w
                return ops.mean(p - data["y"], name="loss")

            def make_optimizer(self):
                opt = optim.SGD(self.tape, lr=0.5)
                opt.add(self.w)
                return opt
        """))
    for cmd in (["train"], ["parity", "--device", "host"]):
        assert main([*cmd, "--workload", str(src), "--steps", "1"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "matmul" in err, err
        assert f"{src} line 18" in err, err  # `p = data["x"] @ self.w`
