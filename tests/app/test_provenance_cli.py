"""Provenance end to end: ``tapescope parity --inject`` through the CLI JSON, the platform-math
property over both workloads, dtypes and fusion, and the report's section."""

from __future__ import annotations

import json

import pytest

from tapescope.app.cli import main
from tapescope.app.runs import PairRunner, SessionConfig
from tapescope.core import workloads
from tapescope.core.ops import REGISTRY


def _nodes(name: str) -> tuple:
    wl = workloads.get(name)
    loss = wl.record(0)
    return wl.tape.nodes[: loss.id + 1]


def _parity(tmp_path, capsys, *argv: str) -> tuple[int, dict | None, str, str]:
    out = tmp_path / "p.json"
    code = main(["parity", "--device", "host", *argv, "--json", str(out)])
    cap = capsys.readouterr()
    data = json.loads(out.read_text()) if out.exists() else None
    return code, data, cap.out, cap.err


@pytest.mark.parametrize("which", ["value", "grad"])
def test_an_injected_fault_is_the_only_introduced_node(tmp_path, capsys, which):
    nodes = _nodes("transformer")
    # the matmul feeding swiglu: (seed 0) its one-ulp fault survives to the parameters
    node = next(n.inputs[0] for n in nodes if n.op == "swiglu")
    spec = f"{node}{':grad' if which == 'grad' else ''}@2"
    code, data, out, _ = _parity(tmp_path, capsys, "--workload", "transformer", "--steps", "3",
                                 "--inject", spec)
    assert code == 1 and data["inject"] == spec
    assert [(e["step"], e["node"], e["which"]) for e in data["introduced"]] == [(2, node, which)]
    e = data["introduced"][0]
    assert (e["op"], e["n_diff"], e["max_ulp"], e["first_index"]) == ("matmul", 1, 1, 0)
    per = {n["id"]: n for n in data["nodes"]}
    assert per[node]["first_step_differing"] == 2
    assert all(n["first_step_differing"] in (None, 2, 3) for n in per.values())
    # everything else that differs only inherited it
    inherited = [i for i, n in per.items() if n["first_step_differing"] and i != node]
    assert inherited, "the fault should have spread"
    if which == "grad":  # down to the parameters' gradients (Adam absorbs it in their values)
        assert any(per[i]["op"] == "param" and per[i]["grad"]["n_diff"] for i in inherited)
    assert f"introduced at step 2: #{node} matmul" in out
    if which == "grad":
        assert e["by"] and all(node in nodes[i].inputs for i in e["by"])


def test_inject_by_name_and_a_clean_run_has_no_introduced(tmp_path, capsys):
    code, data, out, _ = _parity(tmp_path, capsys, "--workload", "mlp", "--steps", "2",
                                 "--inject", "loss@1")
    loss = next(n.id for n in _nodes("mlp") if n.name == "loss")
    assert code == 1
    assert [(e["step"], e["node"], e["which"]) for e in data["introduced"]] == [(1, loss, "value")]
    code, data, out, _ = _parity(tmp_path, capsys, "--workload", "mlp", "--steps", "2")
    assert code == 0 and data["introduced"] == [] and data["inject"] is None
    assert all(n["first_step_differing"] is None for n in data["nodes"])


@pytest.mark.parametrize("spec, extra, want", [
    ("3@1", ["--fuse"], "drop --fuse"),
    ("999@1", [], "no node #999"),
    ("no/such/node@1", [], "named 'no/such/node'"),
    ("3@0", [], "step 0 is not run"),
    ("3@5", [], "step 5 is not run"),
    ("3-at-1", [], "expected NODE@STEP"),
    ("3:hessian@1", [], "expected NODE@STEP"),
    ("x:grad@1", [], "no gradient"),  # the data leaf: backward never reaches it
])
def test_bad_inject_is_one_line_and_exit_2(tmp_path, capsys, spec, extra, want):
    code, data, out, err = _parity(tmp_path, capsys, "--workload", "mlp", "--steps", "2",
                                   "--inject", spec, *extra)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and data is None
    assert len(lines) == 1 and lines[0].startswith("tapescope parity:") and want in lines[0]


def _check_property(res, math: str) -> None:
    for e in res.introduced:
        if math == "refmath":
            raise AssertionError(f"step {res.step}: refmath introduced {e}")
        assert e["which"] in ("value", "grad"), e  # the optimizer calls no libm function
        if e["which"] == "value":
            assert REGISTRY[e["op"]].transcendental, e
        else:  # a gradient is made by its consumers' backward rules: one of them is libm's
            assert any(REGISTRY[res.nodes[i]["op"]].transcendental for i in e["by"]), e


@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("workload", ["mlp", "transformer"])
def test_platform_math_introduces_only_at_transcendental_ops(workload, dtype, fuse):
    """--math platform: every introduced array at every step comes from a transcendental op
    (OpDef.transcendental) and the transformer has at least one per step; the mlp has none of
    those ops and stays bit-identical. refmath: nothing is introduced."""
    for math in ("platform", "refmath"):
        r = PairRunner(SessionConfig(workload=workload, device="host", dtype=dtype, math=math,
                                     fuse=fuse))
        has_libm = any(REGISTRY[n.op].transcendental for n in r.nodes)
        for _ in range(3):
            res = r.step()
            assert res.provenance
            _check_property(res, math)
            if math == "platform" and has_libm:
                assert any(e["which"] == "value" for e in res.introduced), res.step
                if fuse:
                    assert any(k["introduced"] for k in res.kernels)
            if not res.introduced:
                assert not any(k["introduced"] for k in res.kernels)
            flags = [e["introduced"] for e in res.nodes]
            assert {(i, w) for i, f in enumerate(flags) for w, b in f.items() if b} == \
                {(e["node"], e["which"]) for e in res.introduced}
        assert has_libm == (workload == "transformer")


def test_provenance_off_and_on_demand_snapshots():
    cfg = SessionConfig(workload="transformer", device="host", math="platform")
    r = PairRunner(cfg, provenance="off", keep_states=2)
    res = r.step()
    assert not res.provenance and res.introduced == [] and "introduced" not in res.nodes[0]
    res = r.step(provenance=True)
    assert res.provenance and res.introduced
    from tapescope.core.provenance import provenance

    st = r.states[-1]
    assert st.step == 2
    again = provenance(st).to_json()["introduced"]
    assert again == res.introduced  # the snapshot re-judges the same step the same way


def test_report_has_the_introduced_section(tmp_path, capsys):
    out = tmp_path / "r.html"
    code = main(["report", "--workload", "transformer", "--device", "host", "--math",
                 "platform", "--dtype", "float32", "--steps", "2", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 1
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["provenance"]["steps_checked"] == 2
    assert data["introduced"] and {e["step"] for e in data["introduced"]} == {1, 2}
    assert all(REGISTRY[e["op"]].transcendental for e in data["introduced"]
               if e["which"] == "value")
    fi = data["first_introduced"]
    assert fi["step"] == 1 and fi["entries"] == [
        {**e, "name": fi["entries"][k]["name"]} for k, e in
        enumerate(x for x in data["introduced"] if x["step"] == 1)]
    per = {n["id"]: n for n in data["nodes"]}
    assert all(per[e["node"]]["first_step_differing"] == 1 for e in fi["entries"])
    html = out.read_text()
    assert "<section id=introduced>" in html and "Where the error is made" in html
    assert f"introduced at step 1: #{fi['entries'][0]['node']}" in text
