"""Hostile ONNX models: external data never leaves the model's folder, wherever the tensor hides;
every budget (elements per tensor, bytes, Loop iterations, inlined nodes) is checked before
allocating, names the node and says how to raise it; a run can be cancelled between nodes.

The models that would cost gigabytes run in a child process under an address-space cap, so a
regression fails the test instead of taking the machine down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from onnx import ModelProto, TensorProto, helper, numpy_helper

from tapescope.app.cli import main
from tapescope.core.onnx import Limits, OnnxCancelled, OnnxError, Session, default_inputs, load, run
from tests.helpers import hostile_models as hm

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
F = TensorProto.FLOAT


# ---- external data ----------------------------------------------------------------------------

def _external(name: str, location: str, dims=(2,)) -> TensorProto:
    t = helper.make_tensor(name, F, list(dims), [0.0] * int(np.prod(dims)))
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    return t


def _if_reading(t: TensorProto, out="z"):
    """An If whose then-branch is a Constant holding ``t`` (cond is a graph input)."""
    branch = helper.make_graph([helper.make_node("Constant", [], ["c"], value=t)], "then", [],
                               [hm._out("c")])
    return helper.make_node("If", ["cond"], [out], then_branch=branch, else_branch=branch)


def _model_with_function(fn_nodes, name="leak") -> ModelProto:
    fn = helper.make_function("local", name, ["cond"], ["z"], fn_nodes,
                              hm.OPSET + [helper.make_opsetid("local", 1)])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    g = helper.make_graph([helper.make_node(name, ["cond"], ["y"], domain="local")], "g",
                          [cond], [hm._out()])
    return helper.make_model(g, opset_imports=hm.OPSET + [helper.make_opsetid("local", 1)],
                             functions=[fn])


@pytest.fixture
def secret(tmp_path, monkeypatch):
    """A file outside the model's folder (and one in the current directory) worth stealing."""
    (tmp_path / "secret.bin").write_bytes(np.array([7.0, 7.0], np.float32).tobytes())
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    monkeypatch.chdir(tmp_path)  # "secret.bin" also resolves from the current directory
    return model_dir


def _write(model, folder) -> str:
    path = os.path.join(folder, "m.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


@pytest.mark.parametrize("location", ["../secret.bin", "secret.bin"])
def test_if_inside_a_local_function_cannot_read_outside_the_model_folder(secret, location):
    path = _write(_model_with_function([_if_reading(_external("t", location))]), secret)
    with pytest.raises(OnnxError) as e:
        run(path, {"cond": np.array(True)})
    assert "external data of tensor 't'" in str(e.value)
    assert "escapes" in str(e.value) or "not found next to the model" in str(e.value)


def test_external_data_nested_in_loop_if_function_is_checked(secret):
    inner_if = _if_reading(_external("deep", "../secret.bin"), out="c_out_f")
    body = helper.make_graph(
        [inner_if, helper.make_node("Identity", ["c"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         hm._out("c_out_f")])
    trip = helper.make_node("Constant", [], ["n"], value=numpy_helper.from_array(
        np.array(1, np.int64)))
    loop = helper.make_node("Loop", ["n", "cond"], ["z"], body=body)
    path = _write(_model_with_function([trip, loop]), secret)
    with pytest.raises(OnnxError, match="tensor 'deep'.*escapes"):
        load(path)


def test_external_data_in_a_function_tensors_attribute_and_training_info(secret):
    m = _model_with_function([helper.make_node("Identity", ["cond"], ["z"])])
    att = helper.make_attribute("extra", [_external("listed", "../secret.bin")])
    m.functions[0].node[0].attribute.append(att)
    with pytest.raises(OnnxError, match="tensor 'listed'.*escapes"):
        load(_write(m, secret), check=False)
    m2 = _model_with_function([helper.make_node("Identity", ["cond"], ["z"])])
    ti = m2.training_info.add()
    ti.initialization.CopyFrom(helper.make_graph([], "init", [], [],
                                                 [_external("trained", "../secret.bin")]))
    with pytest.raises(OnnxError, match="tensor 'trained'.*escapes"):
        load(_write(m2, secret), check=False)


def test_nul_byte_in_a_location_is_a_clean_error(secret):
    g = helper.make_graph([], "g", [], [helper.make_tensor_value_info("w", F, [2])],
                          [_external("w", "w.bin\x00../../etc/passwd")])
    m = helper.make_model(g, opset_imports=hm.OPSET)
    with pytest.raises(OnnxError, match="NUL"):
        load(_write(m, secret))


def test_the_same_external_bytes_cannot_be_read_twice(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.zeros(4, np.float32).tobytes())
    ts = [_external(f"w{i}", "w.bin", (4,)) for i in range(3)]
    outs = [helper.make_tensor_value_info(f"w{i}", F, [4]) for i in range(3)]
    m = helper.make_model(helper.make_graph([], "g", [], outs, ts), opset_imports=hm.OPSET)
    with pytest.raises(OnnxError, match="more bytes than the file holds"):
        load(_write(m, tmp_path))
    # one tensor per range is what writers produce: that loads
    m2 = helper.make_model(helper.make_graph([], "g", [], outs[:1], ts[:1]),
                           opset_imports=hm.OPSET)
    assert run(_write(m2, tmp_path), {})["w0"].tolist() == [0.0] * 4


# ---- budgets, with small limits given through the Python API ---------------------------------

def _path(case, tmp_path):
    return case(str(tmp_path))


def test_max_elements_is_checked_before_the_node_runs_and_names_it(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [1])
    m = hm._model([helper.make_node("ConstantOfShape", ["x"], ["y"], name="fill")], [x],
                  [hm._out()])
    with pytest.raises(OnnxError) as e:
        run(m, {"x": np.array([1001], np.int64)}, limits=Limits(max_elements=1000))
    msg = str(e.value)
    assert "'fill' (ConstantOfShape)" in msg and "1001" in msg and "1000" in msg
    assert "--max-elements" in msg
    y = run(m, {"x": np.array([1000], np.int64)}, limits=Limits(max_elements=1000))["y"]
    assert y.shape == (1000,)


def test_declared_input_dims_are_checked_before_generating_inputs(tmp_path):
    for case, want in ((hm.declared_dim_1e12, "1000000000000"), (hm.declared_dim_negative, "-5")):
        path, _ = _path(case, tmp_path)
        with pytest.raises(OnnxError, match=want):
            default_inputs(Session(path))
    path, _ = hm._declared(str(tmp_path), "small", [50])
    with pytest.raises(OnnxError, match="input 'x'.*50 elements"):
        default_inputs(Session(path, limits=Limits(max_elements=49)))
    assert default_inputs(Session(path, limits=Limits(max_elements=50)))["x"].shape == (50,)


def test_loop_iterations_are_bounded_per_run(tmp_path):
    path, _ = hm._loop_model(str(tmp_path), "l", 10)
    with pytest.raises(OnnxError, match=r"'spin' \(Loop\).*more than 9 .*--max-loop-iterations"):
        run(path, {}, limits=Limits(max_loop_iterations=9))
    assert float(run(path, {}, limits=Limits(max_loop_iterations=10))["y"]) == 10.0
    # nested loops count together: 3 outer x 3 inner = 12 iterations
    path, _ = hm._loop_model(str(tmp_path), "n", 3, None, nested=True)
    with pytest.raises(OnnxError, match="Loop"):
        run(path, {}, limits=Limits(max_loop_iterations=11))
    assert float(run(path, {}, limits=Limits(max_loop_iterations=12))["y"]) == 9.0


def test_inlined_nodes_are_counted_before_inlining(tmp_path):
    path, feeds = hm.nested_functions(str(tmp_path), depth=6)  # 2**5 = 32 nodes inlined
    with pytest.raises(OnnxError, match=r"32 nodes, over the limit of 31.*--max-nodes"):
        Session(path, limits=Limits(max_nodes=31))
    assert run(path, feeds, limits=Limits(max_nodes=32))["y"].tolist() == [1.0, 1.0]


def test_recursive_local_functions_are_refused(tmp_path):
    fn = helper.make_function("local", "f", ["a"], ["b"],
                              [helper.make_node("f", ["a"], ["b"], domain="local")],
                              hm.OPSET + [helper.make_opsetid("local", 1)])
    x = helper.make_tensor_value_info("x", F, [2])
    m = hm._model([helper.make_node("f", ["x"], ["y"], domain="local")], [x], [hm._out()],
                  functions=[fn], opsets=hm.OPSET + [helper.make_opsetid("local", 1)])
    with pytest.raises(OnnxError, match="recursive"):
        Session(m)  # onnx's checker sees it first
    with pytest.raises(OnnxError, match="'f' .*calls itself"):
        Session(m, check=False)  # and without the checker, the node count does


def test_max_bytes_counts_every_value_a_run_holds(tmp_path):
    path, _ = hm.many_small_doublings(str(tmp_path))
    with pytest.raises(OnnxError, match=r"bytes.*--max-bytes"):
        Session(path, limits=Limits(max_bytes=1 << 20))


def test_max_work_counts_nodes_elements_and_multiply_adds_before_running(tmp_path):
    from tapescope.core.onnx.limits import NODE_COST

    a = helper.make_tensor_value_info("a", F, [64, 64])
    m = hm._model([helper.make_node("MatMul", ["a", "a"], ["y"], name="mm")], [a], [hm._out()])
    feeds = {"a": np.ones((64, 64), np.float32)}
    cost = NODE_COST + 64 * 64 + 64 * 64 * 64  # the node, its outputs, its multiply-adds
    with pytest.raises(OnnxError, match=rf"'mm' \(MatMul\).*{cost}.*--max-work"):
        run(m, feeds, limits=Limits(max_work=cost - 1))
    assert run(m, feeds, limits=Limits(max_work=cost))["y"][0, 0] == 64.0


def test_limits_reach_the_tape_importer(tmp_path):
    from tapescope.core import Tape
    from tapescope.core.onnx import import_to_tape

    x = helper.make_tensor_value_info("x", F, [4])
    m = hm._model([helper.make_node("Tile", ["x", "r"], ["y"], name="tile")], [x], [hm._out()],
                  [hm._i64("r", [3])])
    with pytest.raises(OnnxError, match="'tile' \\(Tile\\).*12 elements"):
        import_to_tape(m, Tape(), {"x": np.ones(4, np.float32)}, limits=Limits(max_elements=11))


# ---- cancel -----------------------------------------------------------------------------------

def test_a_set_cancel_event_stops_a_run_between_loop_iterations(tmp_path):
    path, _ = hm.loop_always_true(str(tmp_path))
    stop = threading.Event()
    sess = Session(path, limits=Limits(max_loop_iterations=10**12))
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    with pytest.raises(OnnxCancelled, match="cancelled"):
        sess.run({}, cancel=stop)
    timer.join()
    assert stop.is_set()  # the loop has no other end: only the event stopped it
    assert isinstance(OnnxCancelled("x"), OnnxError)


# ---- the defaults ---------------------------------------------------------------------------

def test_default_bytes_follow_the_machines_memory_within_bounds():
    from tapescope.core.onnx.limits import default_max_bytes, machine_memory

    assert default_max_bytes(4 << 30) == 512 << 20  # a small machine: the floor
    assert default_max_bytes(24 << 30) == 768 << 20  # 1/32 of it
    assert default_max_bytes(1 << 40) == 2 << 30  # a big one: the ceiling
    assert Limits().max_bytes == default_max_bytes(machine_memory())
    assert machine_memory() > 0
    # vgg19, the heaviest official light model, is estimated at 1.78e10 units of work
    assert Limits().max_work > 17_800_000_000


# ---- the CLI flags --------------------------------------------------------------------------

def test_cli_flags_raise_and_lower_the_limits(tmp_path, capsys):
    path, _ = hm._loop_model(str(tmp_path), "l", 10)
    assert main(["onnx", path, "--max-loop-iterations", "9"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--max-loop-iterations" in err
    assert main(["onnx", path, "--max-loop-iterations", "10"]) == 0
    path, _ = hm.tile_huge(str(tmp_path))
    assert main(["onnx", path]) == 2
    err = capsys.readouterr().err
    assert "'tile' (Tile)" in err and "4000000000" in err and "--max-elements" in err
    path, _ = hm._declared(str(tmp_path), "small", [50])
    assert main(["onnx", path, "--max-elements", "49"]) == 2
    assert main(["onnx", path, "--max-elements", "50", "--max-bytes", "1M",
                 "--max-nodes", "5", "--max-work", "100K"]) == 0
    assert main(["onnx", path, "--max-work", "1000"]) == 2
    assert "--max-work" in capsys.readouterr().err


# ---- every hostile model, default limits, in a capped child process --------------------------

EXPECT = {
    "constant_of_shape": "400000000", "constant_of_shape_runtime": "400000000",
    "declared_dim_3e8": "300000000", "declared_dim_1e12": "1000000000000",
    "declared_dim_negative": "-5", "loop_huge_trip": "--max-loop-iterations",
    "loop_always_true": "--max-loop-iterations", "loop_nested": "--max-loop-iterations",
    "nested_functions": "--max-nodes", "broadcast_outer": "10000000000",
    "tile_huge": "4000000000", "range_huge": "10000000000", "pad_huge": "1600",
    "many_small_doublings": "--max-", "erf_chain": "--max-work",
    "loop_heavy_body": "--max-work", "matmul_chain": "--max-work",
    "loop_scan_outputs": "--max-bytes", "loop_sequence_small": "--max-work",
    "loop_sequence_big": "--max-bytes", "cast_to_string": "'to_text' (Cast)",
    "megabyte_outer": "62500000000", "megabyte_of_nodes": "--max-work",
}

CHILD = textwrap.dedent("""
    import json, os, resource, signal, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from tests.helpers import hostile_models as hm
    import tapescope.core.onnx  # imported once, before the forks
    cap = int(sys.argv[2])
    arg = json.loads(sys.argv[3])  # the cases to run, and each one's Limits fields if not default
    results = []
    for name in arg["cases"]:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            signal.alarm(600)  # a hang guard, not a bound: the budgets below are the bounds
            with tempfile.TemporaryDirectory() as d:
                out = hm.run_case(name, d, arg["limits"].get(name))
            os.write(w, json.dumps(out).encode())
            os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        _, status, usage = os.wait4(pid, 0)
        out = json.loads(data) if data else {"case": name, "ended": f"died ({status})",
                                             "seconds": None}
        out["peak_mb"] = usage.ru_maxrss / 1024
        results.append(out)
    print(json.dumps(results))
""")


# The cases that run up to a default budget for seconds of CPU (loop_sequence_small ~20 s of
# work; the three loops 6-8 s each of 100 000 iterations: docs/benchmarks.md, bench_hostile.py)
# take that budget cut 100-fold in the default run, the very budget they end on; every case at
# the defaults is the slow test below (`python -m pytest -m slow`).
_FEWER = {"max_loop_iterations": Limits().max_loop_iterations // 100}
LIGHT = {"loop_sequence_small": {"max_work": Limits().max_work // 100},
         "loop_huge_trip": _FEWER, "loop_always_true": _FEWER, "loop_nested": _FEWER}


def _hostile(cases, limits):
    """Every case in `cases` run in the capped child (`limits`: a case's Limits fields, else
    the defaults), each ending in one OnnxError within its budgets; the results by case."""
    d = Limits()
    mib = d.max_bytes >> 20
    cap = (3 << 30) + 2 * d.max_bytes  # a safety net for regressions; the asserts are the bound
    arg = json.dumps({"cases": sorted(cases), "limits": limits})
    proc = subprocess.run([sys.executable, "-c", CHILD, ROOT, str(cap), arg],
                          capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    report = "\n".join(f"{r['case']:28s} {r.get('bytes', 0):6d} B  {r.get('work', 0):12.3g} "
                       f"work  {r.get('iterations', 0):6d} it  {r['peak_mb']:7.0f} MB  "
                       f"{r['ended'][:100]}" for r in results)
    print(report)
    assert {r["case"] for r in results} == set(EXPECT)  # every case of hm.CASES expects its end
    for r in results:
        lim = Limits(**limits.get(r["case"], {}))
        assert r["bytes"] < 1 << 20, report
        assert r["ended"].startswith("OnnxError"), report
        assert EXPECT[r["case"]] in r["ended"], report
        assert "\n" not in r["ended"], report
        assert r.get("work", 0) <= lim.max_work, report
        assert r.get("iterations", 0) <= lim.max_loop_iterations, report
        assert r.get("held", 0) <= lim.max_bytes, report
        assert r["peak_mb"] < mib + 512, report
    return {r["case"]: r for r in results}, report


def _quadratic_and_chain_stop_on_work(by, report, limits):
    """The quadratic sequence stops on work before its loop bound (its work is counted per
    list entry copied, not per iteration), having run up to that bound; so does the chain of
    42 000 Tanh nodes."""
    lim = Limits(**limits.get("loop_sequence_small", {}))
    assert 0 < by["loop_sequence_small"]["iterations"] < lim.max_loop_iterations, report
    assert by["loop_sequence_small"]["work"] > lim.max_work // 2, report
    assert by["megabyte_of_nodes"]["work"] > Limits().max_work // 2, report


def test_hostile_models_end_in_one_onnx_error_within_their_budgets():
    """Each case ends in one OnnxError having done at most its budgets' work, loop iterations
    and bytes (the budgets' own counts: no clock), and the process stayed within max_bytes
    plus the interpreter; the defaults but for the two LIGHT cases' one budget each."""
    by, report = _hostile(hm.CASES, LIGHT)
    _quadratic_and_chain_stop_on_work(by, report, LIGHT)
    for case in ("loop_huge_trip", "loop_always_true"):  # ran to their (cut) bound, no further
        assert by[case]["iterations"] == _FEWER["max_loop_iterations"], report


@pytest.mark.slow
def test_hostile_models_end_in_one_onnx_error_within_the_default_budgets():
    """The same at the default limits, every case (~40 CPU s). What that work costs in
    seconds: benchmarks/bench_hostile.py."""
    by, report = _hostile(hm.CASES, {})
    _quadratic_and_chain_stop_on_work(by, report, {})


def test_an_empty_declared_input_with_huge_other_dims_is_refused(tmp_path):
    # found by test_mutated_models: numpy cannot make a (0, 2**31-1, 2**31-1) array either
    path, _ = hm._declared(str(tmp_path), "empty", [0, 2**31 - 1, 2**31 - 1])
    with pytest.raises(OnnxError, match="empty, but its other dims are too big"):
        default_inputs(Session(path))
