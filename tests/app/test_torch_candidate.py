"""``--device torch``: PyTorch eager as the candidate, judged node by node against the reference.

The claims of issue 23: the run differs (exit 1); what it introduces is where PyTorch's kernels
leave the reference order (BLAS / oneDNN products, reductions, row ops, transcendentals), never
an exact elementwise op's value (add, mul, relu ... are one IEEE operation: PyTorch must be
bit-identical there, so whatever they carry is inherited); every introduced entry has a cause.
The same on the mlp, the transformer and an imported ONNX model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from tapescope.app.cli import main  # noqa: E402
from tapescope.app.runs import PairRunner, SessionConfig  # noqa: E402
from tapescope.core.ops import REGISTRY  # noqa: E402
from tapescope.core.ops.torch_forms import LEAF, TORCH  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "resources", "models")

# one IEEE operation per element (or a copy): PyTorch's value must equal the reference's
EXACT = {"add", "sub", "mul", "div", "neg", "adds", "muls", "relu", "clip01", "keep",
         "transpose", "reshape", "slice", "concat", "gather", "param", "const"}
# where PyTorch takes its own order: products, reductions, row ops; and the transcendentals.
# NOTE: sqrt too: PyTorch 2.13's vectorised CPU sqrt is not correctly rounded (seen on this
# machine: 19 of 2048 float64 elements 1 ulp off np.sqrt; the torch sqrt's square is further
# from x), so sqrt is not held exact here
DEPARTS = {"matmul", "bmm", "conv2d", "sum", "mean", "softmax", "rms_norm", "layer_norm",
           "cross_entropy", "avgpool2d", "maxpool2d", "sqrt"} | {
    n for n, d in REGISTRY.items() if d.transcendental}


def test_every_op_of_the_table_has_one_torch_spelling():
    assert set(TORCH) == set(REGISTRY), (set(REGISTRY) ^ set(TORCH))
    leaves = {n for n, f in TORCH.items() if f is LEAF}
    assert leaves == {n for n, d in REGISTRY.items() if d.kind == "leaf"}


@pytest.mark.parametrize("op", sorted(n for n, d in REGISTRY.items() if d.sample is not None))
def test_each_spelling_computes_the_reference_op(op):
    """Every spelling, on the op table's own sample cases, gives the reference's shape and
    values within a few ulp (the same op: a wrong axis or a dropped eps is far off)."""
    import numpy as np
    import torch

    from tapescope.core import mathlib

    d = REGISTRY[op]
    cases = d.sample(np.random.default_rng(0), np.dtype(np.float64))
    for xs, at in cases:
        want = d.forward(mathlib.get("refmath"), xs, at)
        got = TORCH[op](torch, [torch.from_numpy(np.array(x)) for x in xs], at).numpy()
        assert got.shape == want.shape, (op, at)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{op} {at}")


def _check_introduced(entries, nodes):
    """The issue's claims on one run's introduced entries (``nodes``: the compared nodes)."""
    assert entries, "PyTorch's matmul and reductions must introduce error"
    ops_seen = set()
    for e in entries:
        assert e.get("cause"), f"an introduced entry without a cause: {e}"
        if e["which"] == "value":
            assert e["op"] not in EXACT, f"an exact op introduced error: {e}"
            assert e["op"] in DEPARTS, e
            ops_seen.add(e["op"])
        elif e["which"] == "grad":
            if e["cause"] == "signed-zero":  # autograd keeps -0.0 where the tape sums from +0.0
                assert e["max_ulp"] == 0, e
                continue
            for c in e["by"]:  # the consumers whose backward rules made the gradient
                op = nodes[c].op
                # an exact elementwise consumer makes this gradient by a reduction only: the
                # node is broadcast in it (a bias), its contributions summed over the batch
                assert op in DEPARTS or (op in EXACT and nodes[c].shape != nodes[e["node"]].shape
                                         ) or len(e["by"]) > 1, (e, op)
        else:
            assert e["which"] == "update" and e["op"] == "param", e
    assert ops_seen & {"matmul", "bmm", "conv2d"}, ops_seen


def _pair(workload, dtype="float64"):
    return PairRunner(SessionConfig(workload=workload, device="torch", dtype=dtype,
                                    explain=True))


def test_parity_mlp_device_torch_explain_cli(tmp_path, capsys):
    out = tmp_path / "p.json"
    code = main(["parity", "--workload", "mlp", "--device", "torch", "--steps", "2",
                 "--explain", "--json", str(out)])
    cap = capsys.readouterr().out
    assert code == 1
    data = json.loads(out.read_text())
    assert data["device"] == "torch"
    assert cap.startswith("device: torch ")
    assert " cause" in cap.splitlines()[3]  # the table's cause column
    r = _pair("mlp")
    _check_introduced(data["introduced"], r.nodes)
    # exact ops: equal wherever their inputs are (nothing introduced at any of their values)
    intro_values = {e["node"] for e in data["introduced"] if e["which"] == "value"}
    assert not {n.id for n in r.nodes if n.op in EXACT} & intro_values


def test_transformer_introduces_only_where_torch_leaves_the_reference_order():
    r = _pair("transformer")
    res = r.step()
    assert not res.exact
    _check_introduced(res.introduced, r.nodes)
    seen = {e["op"] for e in res.introduced if e["which"] == "value"}
    assert {"softmax", "bmm", "matmul"} <= seen, seen


def test_onnx_model_introduces_only_where_torch_leaves_the_reference_order():
    from tapescope.core.onnx.workload import model_spec

    r = _pair(model_spec(os.path.join(MODELS, "tiny_convnet.onnx"), False), "float32")
    res = r.step()
    assert not res.exact
    _check_introduced(res.introduced, r.nodes)
    assert "conv2d" in {e["op"] for e in res.introduced if e["which"] == "value"}


def test_exact_elementwise_ops_are_bit_identical_in_torch():
    """The table's exact ops on random inputs: PyTorch's bits are the reference's."""
    import numpy as np
    import torch

    from tapescope.core import mathlib

    rng = np.random.default_rng(3)
    for op in sorted(EXACT - {"param", "const", "gather"}):
        d = REGISTRY[op]
        for dt in (np.float64, np.float32):
            for xs, at in d.sample(rng, np.dtype(dt)):
                want = d.forward(mathlib.get("refmath"), xs, at)
                got = TORCH[op](torch, [torch.from_numpy(np.array(x)) for x in xs], at)
                g8 = np.ascontiguousarray(got.numpy()).view(np.uint8)
                assert np.array_equal(g8, np.ascontiguousarray(want).view(np.uint8)), (op, at)


def test_torch_run_follows_its_own_inputs_and_optimizer():
    """Provenance holds per node: the candidate's parameters are its own (updated by its own
    update), so after a step they differ from the reference's, and the next step's values
    are judged on them (still only where torch leaves the reference order)."""
    import numpy as np

    r = _pair("mlp")
    r.step()
    res = r.step()
    p = [n.id for n in r.nodes if n.op == "param"][0]
    got = r.arrays(p)
    assert not np.array_equal(got["ref"]["value"], got["cand"]["value"])
    _check_introduced(res.introduced, r.nodes)


@pytest.fixture
def torch_state():
    """PyTorch's process-wide settings, put back after the test (a torch run sets them)."""
    import torch

    saved = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
             torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    yield torch
    torch.set_num_threads(saved[0])
    torch.use_deterministic_algorithms(saved[1])
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[2:]


def test_torch_settings_reach_torch_and_the_device_line(torch_state):
    torch = torch_state
    r = PairRunner(SessionConfig(workload="mlp", device="torch", torch_threads=1,
                                 deterministic=True, tf32=True))
    line = r.describe_device()
    assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    assert line.startswith("device: torch ") and "1 threads" in line
    assert "deterministic on" in line and "tf32 on" in line
    assert r.cand_spec.label() == "torch cpu float64 1 threads tf32 on deterministic"
    assert not r.step().exact  # deterministic algorithms are not the reference order either


def test_torch_flags_without_device_torch_are_refused(capsys):
    assert main(["parity", "--device", "host", "--torch-threads", "2", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device torch" in err


@pytest.mark.parametrize("flags, says", [(["--fuse"], "--fuse"),
                                          (["--math", "platform"], "--math"),
                                          (["--inject", "9@1"], "--inject")])
def test_device_replay_flags_with_torch_are_one_line(flags, says, capsys):
    assert main(["parity", "--device", "torch", "--steps", "1", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err


def test_torch_with_a_cpu_only_comparison_is_one_line(tmp_path, capsys):
    assert main(["report", "--device", "torch", "--compare", "cpu-platform", "--steps", "1",
                 "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cpu-platform" in err


def test_torch_cuda_without_a_gpu_is_one_line(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: torch:cuda runs (test_torch_cuda_runs)")
    assert main(["parity", "--device", "torch:cuda", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "torch.cuda has no device" in err


@pytest.mark.cuda
def test_torch_cuda_runs(tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("torch.cuda has no device here (a CPU build or no GPU)")
    out = tmp_path / "p.json"
    code = main(["parity", "--workload", "mlp", "--device", "torch:cuda", "--steps", "1",
                 "--explain", "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 1 and data["device"] == "torch:cuda"
    _check_introduced(data["introduced"], _pair("mlp").nodes)


def test_without_torch_one_line_says_how_to_get_it(tmp_path):
    code = ("import sys; sys.modules['torch'] = None\n"
            "from tapescope.app.cli import main\n"
            "sys.exit(main(['parity', '--device', 'torch', '--steps', '1']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert 'pip install -e ".[torch]"' in out.stderr and "Traceback" not in out.stderr


def test_torch_candidate_through_a_worker(tmp_path, capsys, monkeypatch):
    """--worker: the whole pair in the worker process (app.remote), the torch run built there
    by open_runs; its causes come back in the step records."""
    out = tmp_path / "p.json"
    monkeypatch.setenv("PYTHONPATH", ROOT)  # (the worker imports this checkout)
    worker = f"{sys.executable} -m tapescope.app.cli worker"
    code = main(["parity", "--workload", "mlp", "--device", "torch", "--steps", "1",
                 "--explain", "--worker", worker, "--json", str(out)])
    cap = capsys.readouterr().out
    assert code == 1, cap
    assert cap.startswith("device: torch ") and "through the worker" in cap
    data = json.loads(out.read_text())
    assert data["device"] == "torch"
    _check_introduced(data["introduced"], _pair("mlp").nodes)


def test_the_update_tape_in_torch_ops_or_torch_optim():
    """Default: the tape's Adam in torch ops; it leaves the tape's only through torch's sqrt (a
    few ulp on a few elements). --torch-optimizer torch: PyTorch's own Adam, whose formula is
    not the tape's (eps added to sqrt(v)/sqrt(1-b2^t)): every stepped parameter's update is
    introduced, far off, with a cause, and the next step's values inherit it."""
    r = _pair("mlp")
    tape_updates = [e for e in r.step().introduced if e["which"] == "update"]
    assert all(e["max_ulp"] <= 4 and e["n_diff"] <= 8 for e in tape_updates), tape_updates
    r = PairRunner(SessionConfig(workload="mlp", device="torch", explain=True,
                                 torch_optimizer="torch"))
    assert r.cand_spec.label().endswith("torch.optim")
    res = r.step()
    ups = [e for e in res.introduced if e["which"] == "update"]
    params = [n.id for n in r.nodes if n.op == "param"]
    assert sorted(e["node"] for e in ups) == params
    assert all(e["cause"] and e["max_ulp"] > 1000 for e in ups), ups
    nxt = r.step()
    assert not any(e["op"] == "param" and e["which"] == "value" for e in nxt.introduced)
    _check_introduced(nxt.introduced, r.nodes)
