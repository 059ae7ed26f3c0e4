"""``parity --fail-on bug`` (issue 44, item 3): PyTorch CPU as the candidate reorders sums and
contracts products (every introduced array a *valid reordering*: exit 0), while PyTorch's own
Adam adds eps somewhere else (its updates *outside* every reordering bound: exit 1). The class
is in the JSON and, with the cause and what it is (value / grad by #N / update), in the table."""

from __future__ import annotations

import json

import pytest

from tapescope.app.cli import main
from tapescope.core.bounds import OUTSIDE, VALID

pytest.importorskip("torch")


def _run(tmp_path, capsys, *extra):
    out = tmp_path / "p.json"
    code = main(["parity", "--workload", "mlp", "--device", "torch", "--steps", "2", "--dtype",
                 "float32", "--fail-on", "bug", "--json", str(out), *extra])
    return code, json.loads(out.read_text()), capsys.readouterr().out


def test_torch_reorderings_are_valid_and_do_not_fail(tmp_path, capsys):
    code, data, cap = _run(tmp_path, capsys)
    assert not data["exact"]  # it differs ...
    intro = data["introduced"]
    assert intro and all(e["class"] == VALID for e in intro), [
        (e["node"], e["which"], e.get("class")) for e in intro if e.get("class") != VALID]
    assert all("cause" in e for e in intro)  # --fail-on bug implies --explain
    assert all(0 <= e["bound_ratio"] <= 1 and e["n_outside"] == 0 for e in intro)
    assert code == 0  # ... but nothing outside a reordering bound
    rows = cap.splitlines()
    assert any(" grad by #" in r and r.endswith("· valid") for r in rows), cap
    assert any(" value: " in r for r in rows), cap
    assert "; valid reordering" in cap  # the summary line's causes carry the class


def test_pytorchs_adam_puts_eps_elsewhere_and_fails(tmp_path, capsys):
    code, data, cap = _run(tmp_path, capsys, "--torch-optimizer", "torch")
    intro = data["introduced"]
    out = [e for e in intro if e["class"] == OUTSIDE]
    assert out and all(e["which"] == "update" for e in out)
    assert all(e["bound_ratio"] > 1 and e["n_outside"] >= 1 for e in out)
    assert code == 1
    assert "update: unknown · outside" in cap


def test_the_default_still_fails_on_any_difference(tmp_path, capsys):
    out = tmp_path / "p.json"
    code = main(["parity", "--workload", "mlp", "--device", "torch", "--steps", "1", "--dtype",
                 "float32", "--json", str(out)])
    capsys.readouterr()
    data = json.loads(out.read_text())
    assert code == 1 and not data["exact"]
    assert not any("class" in e for e in data["introduced"])  # not classed without --explain


def test_the_report_carries_the_class(tmp_path, capsys):
    out = tmp_path / "r.html"
    main(["report", "--workload", "mlp", "--device", "torch", "--explain", "--steps", "1",
          "--dtype", "float32", "--out", str(out)])
    capsys.readouterr()
    html = out.read_text()
    assert "; valid reordering" in html  # beside each introduced array's cause
