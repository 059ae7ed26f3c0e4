"""torch.compile under capture (issue 43 item 2; app/capture/compiled.py, core/capture/regions.py,
core/capture/pair_regions.py).

The zoo GPT is captured eagerly and compiled (``--compile``: inductor, C++ kernels built with gcc
here; and ``aot_eager``), 2 steps each. The compiled run must compile under the recorder (its
printed losses the same bits as uncaptured, its graphs recorded as data and each call one
region op), the judge must judge each region at its outputs and name its first departing node,
and ``parity --capture EAGER --against COMPILED`` must name the first parted node *inside* the
compiled graph (node, aten target, module) and which run left the reference there. With
``aot_eager`` every node runs PyTorch's eager kernel: each departing node's eager re-run must
give the compiled bits (the localisation and the eager mapping checked against each other).
The graph in the file is data: a node referring forward, or a region op that does not fit its
graph, is refused on load; a planted one-ulp node is the one named.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.aten_ref import reference  # noqa: E402
from tapescope.core.capture.file import (  # noqa: E402
    COMPILED_OP,
    Capture,
    CaptureFileError,
    digest,
    load,
    save,
)
from tapescope.core.capture.judge import _diff, reference_available  # noqa: E402
from tapescope.core.capture.regions import localise, run_region  # noqa: E402

# one worker pays the module fixture (four GPT runs, two of them inductor compiles) once
pytestmark = [pytest.mark.skipif(not reference_available(), reason="no aten reference table"),
              pytest.mark.xdist_group("capture-compile"), pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
ZOO = Path(__file__).resolve().parent / "zoo"
ENV = dict(os.environ, PYTHONPATH=str(ROOT), TAPESCOPE_PROGRESS="0")
GPT = ["gpt.py", "--steps", "2"]


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tapescope.app.cli", *argv], cwd=ZOO, env=ENV,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)


def losses(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if " loss " in ln]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The eager, inductor and aot_eager captures at once (two cores), and the inductor run
    uncaptured once the captured one is done: the captured run compiles under the recorder
    (inductor's C++ kernels built with gcc while it records), and the plain run then finds
    inductor's cache warm where the graphs are the same (on a cold machine the two compiles at
    once cost ~60 CPU s, one after the other ~40; a warm cache, kept across runs, as before)."""
    d = tmp_path_factory.mktemp("compile")
    spec = {"eager": GPT, "inductor": [*GPT, "--compile"],
            "aot_eager": [*GPT, "--compile", "aot_eager"]}
    procs = {name: subprocess.Popen(
        [sys.executable, "-m", "tapescope.app.cli", "capture", "--out", str(d / f"{name}.capture"),
         "--",
         "python", *argv], cwd=ZOO, env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for name, argv in spec.items()}
    out: dict = {}

    def done(name: str, p: subprocess.Popen) -> None:
        so, se = p.communicate(timeout=600)
        assert p.returncode == 0, (name, se[-3000:])
        out[name] = (so, se)

    done("inductor", procs.pop("inductor"))
    procs["plain"] = subprocess.Popen([sys.executable, *GPT, "--compile"], cwd=ZOO, env=ENV,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for name, p in procs.items():
        done(name, p)
    out["files"] = {name: d / f"{name}.capture" for name in spec}
    return out


def regions(cap: Capture) -> list[int]:
    return [i for i, op in enumerate(cap.ops["op"]) if op == COMPILED_OP]


def test_the_compiled_run_compiles_under_capture(runs):
    so, _ = runs["inductor"]
    # the script's own lines: the compiled run's bits, captured or not
    assert losses(so) == losses(runs["plain"][0]) and len(losses(so)) == 2
    assert "2 compiled graphs recorded" in so and "backend inductor" in so
    cap = load(runs["files"]["inductor"])
    assert [g["kind"] for g in cap.graphs] == ["forward", "backward"]
    assert all(g["backend"] == "inductor" for g in cap.graphs)
    # one forward and one backward region per step, in the model's module; the model's eager
    # ops are not there (it did not fall back to eager)
    r = regions(cap)
    assert [(cap.ops["step"][i], cap.ops["phase"][i], cap.ops["module"][i]) for i in r] == [
        (1, "forward", "GPT"), (1, "backward", "GPT"), (2, "forward", "GPT"),
        (2, "backward", "GPT")]
    eager = load(runs["files"]["eager"])
    assert "aten.native_layer_norm.default" in eager.ops["op"]
    assert "aten.native_layer_norm.default" not in cap.ops["op"]
    assert "aten.addmm.default" not in cap.ops["op"]  # inductor's extern mm is inside
    # the graph is data: names, node references, module paths under the model
    fw = cap.graphs[0]["nodes"]
    assert "aten.var_mean.correction" in fw["target"] and "getitem" in fw["target"]
    assert all(re.fullmatch(r"input|constant|getitem|(aten|prims)\.\w+\.\w+", t)
               for t in fw["target"]), set(fw["target"])
    assert "GPT.blocks.0.ln1" in fw["module"]
    # the forward's recorded outputs feed the backward: its saved activations are its inputs
    f1, b1 = r[0], r[1]
    saved = set(cap.ops["outputs"][f1])
    ins = {x["T"] for x in cap.ops["args"][b1][1] if isinstance(x, dict)}
    assert len(saved & ins) >= 10
    # the loss is the forward region's output 0
    assert cap.losses[0] == cap.ops["outputs"][f1][0]


def test_parity_judges_the_region_and_names_its_first_departing_node(runs, tmp_path):
    js = tmp_path / "c.json"
    p = cli("parity", "--capture", str(runs["files"]["inductor"]), "--json", str(js))
    assert p.returncode == 1, p.stderr[-3000:]
    rep = json.loads(js.read_text())
    ent = [e for e in rep["ops"] if e["op"] == COMPILED_OP]
    assert len(ent) == 4
    assert not any(e.get("reason") for e in ent), [e.get("reason") for e in ent]
    for e in ent:  # every output judged (none no-reference)
        assert {o["verdict"] for o in e["outputs"]} <= {"exact", "introduced", "inherited"}
    fw = ent[0]
    assert fw["graph"]["kind"] == "forward" and fw["departures"]
    d = fw["departures"][0]
    assert d["target"].startswith("aten.") and d["name"] and d["n_diff"] >= 1
    assert d["module"].startswith("GPT") and d["kernel"] and d["kernel_nodes"] >= 1
    # the reference's loss is the region's output 0 re-run through the graph
    assert rep["losses"][0]["reference"] is not None
    assert f"first departing node {d['name']} = {d['target']}" in p.stdout
    assert "inside compiled graph #" in p.stdout


@pytest.mark.parametrize("compiled_is", ["B", "A"])
def test_eager_against_compiled_parts_inside_the_graph(runs, tmp_path, compiled_is):
    e, c = runs["files"]["eager"], runs["files"]["inductor"]
    a, b = (e, c) if compiled_is == "B" else (c, e)
    js = tmp_path / "p.json"
    p = cli("parity", "--capture", str(a), "--against", str(b), "--json", str(js))
    assert p.returncode == 1, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    rep = json.loads(js.read_text())
    f = rep["first_parted"]
    ins = f["inside"]
    assert ins["run"] == compiled_is and ins["kind"] == "forward" and f["step"] == 1
    cap = load(c)
    fw = cap.graphs[cap.ops["args"][ins["region"]][0]]["nodes"]
    k = fw["name"].index(ins["node"])  # a node of the recorded graph, by name
    target = fw["target"][k] if fw["target"][k] != "getitem" else \
        fw["target"][fw["args"][k][0]["N"]]
    assert ins["target"] == target and target.startswith("aten.")
    assert ins["module"].startswith("GPT.")
    # the compiled run left the reference there (its node departs on its own values)
    assert f["left"] in (compiled_is, "both") and f[f"verdict_{compiled_is.lower()}"] == \
        "introduced"
    # the eager run's op of the same aten op and module, when it has one, says its part
    eager_tag = "A" if compiled_is == "B" else "B"
    if ins["counterpart"] is not None:
        ev = load(e)
        j = ins["counterpart"]
        assert ev.ops["op"][j] == ins["original"] and ev.ops["module"][j] == ins["module"]
        assert (eager_tag in f["left"] or f["left"] == "both") == (
            f[f"verdict_{eager_tag.lower()}"] in ("introduced", "inherited"))
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("first parted: "))
    assert f"inside {compiled_is}'s compiled graph" in line and f"node {ins['node']}" in line
    assert "left the reference there: " in p.stdout


def test_aot_eager_nodes_rerun_by_eager_give_the_compiled_bits(runs, tmp_path):
    so, _ = runs["aot_eager"]
    assert "note: the script calls torch.compile (backend aot_eager): 2 compiled graphs" in so
    cap = load(runs["files"]["aot_eager"])
    assert cap.meta.get("compile_called") is True and cap.meta.get("compile") == ["aot_eager"]
    assert cap.ops["op"].count(COMPILED_OP) == 4  # forward and backward, 2 steps
    assert "aten.addmm.default" not in cap.ops["op"]  # inside the regions
    js = tmp_path / "a.json"
    p = cli("parity", "--capture", str(runs["files"]["aot_eager"]), "--json", str(js))
    assert p.returncode in (0, 1), p.stderr[-3000:]
    rep = json.loads(js.read_text())
    deps = [d for e in rep["ops"] if e["op"] == COMPILED_OP for d in e.get("departures", [])]
    assert deps, "no departing node: aot_eager's mm and layer norm are not the serial order"
    # aot_eager runs each node with PyTorch's eager kernel: a departing node's eager re-run
    # on the same inputs must give the recorded bits (unless its kernel is one of a fused
    # group: aot_eager fuses nothing, so every departing node's kernel is the node and the
    # views before it)
    for d in deps:
        assert d["eager"]["ran"], d
        assert d["eager"]["same_as_compiled"], d


# ---- no torch run needed: a graph as data --------------------------------------------------
def _graph_capture(tmp_path: Path, planted: bool, graph_args: list | None = None,
                   n_inputs: int = 1) -> Path:
    """A one-region capture: y = (x * 2) + 1, z = exp(y), outputs [y, z]; the recorded y
    one ulp off where ``planted`` (its z then computed from that y, as a fused kernel would)."""
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    y = (x * np.float32(2)) + np.float32(1)
    if planted:
        y = y.copy()
        y[3] = np.nextafter(y[3], np.float32(9))
    z = reference("aten.exp.default", [y], {})[0]
    graph = {"kind": "forward", "backend": "test",
             "nodes": {"name": ["x", "mul", "add", "exp"],
                       "op": ["placeholder", "call_function", "call_function", "call_function"],
                       "target": ["input", "aten.mul.Tensor", "aten.add.Tensor",
                                  "aten.exp.default"],
                       "args": graph_args or [[], [{"N": 0}, 2.0], [{"N": 1}, 1.0], [{"N": 2}]],
                       "kwargs": [{}, {}, {}, {}], "module": ["", "M.a", "M.a", "M.b"],
                       "original": ["", "aten.mul.Tensor", "aten.add.Tensor",
                                    "aten.exp.default"]},
             "outputs": [2, 3]}
    vals = [x, y, z]
    header = {"steps": 1,
              "values": {"dtypes": ["float32"], "dtype": [0, 0, 0], "shape": [[8]] * 3,
                         "sha256": [digest(v, "sha256") for v in vals], "array": [0, 1, 2]},
              "ops": {"names": [COMPILED_OP], "modules": ["M"], "sources": [],
                      "op": [0], "module": [0], "phase": [0], "step": [1], "source": [-1],
                      "args": [[0, [{"T": 0}] * n_inputs, [0, 1]]], "kwargs": [{}],
                      "outputs": [[1, 2]]},
              "losses": [-1], "initial": {}, "graphs": [graph], "settings": {}, "meta": {}}
    f = tmp_path / "g.capture"
    save(f, header, vals)
    return f


def test_a_planted_node_is_the_one_named(tmp_path):
    cap = load(_graph_capture(tmp_path, planted=True))
    got = run_region(cap.graphs[0], [cap.arrays[0]], [0, 1], reference, cap.arrays.__getitem__)
    assert _diff(got[0], cap.arrays[1])["n_diff"] == 1  # the region introduced y
    assert _diff(got[1], cap.arrays[2])["n_diff"] >= 1  # and z, judged from the exact y
    found = localise(cap, 0, reference, _diff)
    # z is exact on the run's own y: only the add departs (mul before it is no output)
    assert [(d["name"], d["target"], d["module"]) for d in found] == [
        ("add", "aten.add.Tensor", "M.a")]
    assert found[0]["n_diff"] == 1 and found[0]["max_ulp"] == 1 and found[0]["first_index"] == 3
    assert found[0]["kernel"] == ["mul aten.mul.Tensor", "add aten.add.Tensor"]
    clean = load(_graph_capture(tmp_path, planted=False))
    assert localise(clean, 0, reference, _diff) == []


@pytest.mark.parametrize("args,n_inputs,want", [
    ([[], [{"N": 2}, 2.0], [{"N": 1}, 1.0], [{"N": 2}]], 1, "node 1"),  # refers forward
    (None, 2, "does not fit its graph"),  # two inputs for one placeholder
])
def test_a_graph_that_is_not_data_is_refused(tmp_path, args, n_inputs, want):
    f = _graph_capture(tmp_path, planted=False, graph_args=args, n_inputs=n_inputs)
    with pytest.raises(CaptureFileError, match=want):
        load(f)
    p = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "parity", "--capture", str(f)],
                       env=ENV, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and want in lines[0], p.stderr


def test_the_python_api_records_a_model_compiled_in_its_block(tmp_path):
    """``with capture(...)``: torch.compile inside the block is wrapped (and put back after);
    the compiled steps print the bits they print uncaptured."""
    from tapescope.app.capture import capture

    def train(path: Path | None) -> list[float]:
        torch._dynamo.reset()
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        x = torch.randn(3, 4)
        out = []

        def steps() -> None:
            cm = torch.compile(m, backend="aot_eager")
            for _ in range(2):
                loss = cm(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                out.append(loss.item())

        if path is None:
            steps()
        else:
            with capture(path, steps=2):
                steps()
        return out

    orig = torch.compile
    f = tmp_path / "api.capture"
    assert train(f) == train(None)
    assert torch.compile is orig
    cap = load(f)
    assert cap.ops["op"].count(COMPILED_OP) == 4 and len(cap.graphs) == 2
    assert cap.meta["compile"] == ["aot_eager"] and cap.meta["compile_called"] is True


def test_two_runs_of_one_compiled_graph_part_at_its_node(tmp_path):
    """Both runs compiled (the region matched): the first parted output is put in graph order
    and its node named, with the run whose compiled code departs there."""
    from tapescope.core.capture.pair import pair

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = load(_graph_capture(tmp_path / "a", planted=False))
    b = load(_graph_capture(tmp_path / "b", planted=True))
    rep = pair(a, b)
    f = rep["first_parted"]
    assert not rep["agree"] and f["op"] == COMPILED_OP and "inside" not in f
    assert f["outputs"][0]["output"] == 0  # y (node add) before z (node exp)
    nd = f["node"]
    assert (nd["name"], nd["target"], nd["module"]) == ("add", "aten.add.Tensor", "M.a")
    assert nd["departs_a"] is None and nd["departs_b"]["name"] == "add"
    assert f["left"] == "B" and f["verdict_a"] == "exact" and f["verdict_b"] == "introduced"
    p = subprocess.run([sys.executable, "-m", "tapescope.app.cli", "parity", "--capture", a.path,
                        "--against", b.path], env=ENV, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1, p.stderr
    assert "inside the compiled graph: output node add = aten.add.Tensor" in p.stdout
    assert "departs from the reference there on its own values: B (node add)" in p.stdout


def test_eager_runs_only_table_ops_by_name():
    """A node's target is a name from the file: PyTorch's kernel is looked up only for an
    aten/prims op the reference table has, attribute by attribute, never evaluated."""
    from tapescope.app.capture.eager import run

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((3, 2), np.float32)
    (y,) = run("aten.mm.default", [a, b], {})
    assert y.dtype == np.float32 and np.array_equal(y, a @ b)
    (z,) = run("prims.convert_element_type.default", [a, "torch.float64"], {})
    assert z.dtype == np.float64
    for bad in ("os.system.default", "aten.__class__.default", "aten.mm", "aten.mm.default.x",
                "aten._foo_not_an_op.default", "torch.ops.aten.mm.default", "aten.mm.default;x"):
        with pytest.raises(ValueError, match="not an aten op"):
            run(bad, [a, b], {})
