"""A training-mode Dropout runs in the executor with a seed as the tape's import draws it
(issue 45, item 6): a TorchScript export with ``training=TrainingMode.TRAINING``, exported once
here; the executor and the tape agree bit for bit for a seed, ``tapescope onnx --seed`` runs it,
and ``parity --device host`` trains it 2 steps bit for bit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

from tapescope.app.cli import main
from tapescope.core import Tape
from tapescope.core.onnx import OnnxError, Session, import_to_tape

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(path, x): Linear-ReLU-Dropout(0.3)-Linear exported in training mode."""
    d = tmp_path_factory.mktemp("drop")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                            torch.nn.Linear(32, 4)).train()
    x = torch.randn(4, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (x,), str(d / "drop.onnx"), dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING, input_names=["x"],
                          output_names=["y"], do_constant_folding=False)
    np.save(d / "x.npy", x.numpy())
    return d / "drop.onnx", x.numpy()


def tape_run(model, feeds, seed, dtype=np.float32):
    """The tape import's outputs (and masks) with ``step_seed=seed``."""
    imp = import_to_tape(Session(model, fold=False), Tape(dtype), feeds, step_seed=seed)
    return {k: np.asarray(v.value) for k, v in imp.outputs.items()}


def test_the_executor_draws_the_tapes_mask_bit_for_bit(trained):
    path, x = trained
    sess = Session(str(path))
    for seed in ((0, 0), (7, 0), (7, 1)):
        ours = sess.run({"x": x}, seed=seed)["y"]
        tape = tape_run(str(path), {"x": x}, seed)["y"]
        assert ours.dtype == tape.dtype == np.float32
        assert ours.tobytes() == tape.tobytes(), seed
    # a mask indeed: not the identity, and another seed draws another one
    assert not np.array_equal(sess.run({"x": x}, seed=(0, 0))["y"],
                              sess.run({"x": x}, seed=(1, 0))["y"])
    # the same seed, the same bits (with the run plan and without)
    assert np.array_equal(sess.run({"x": x}, seed=(3, 0))["y"],
                          Session(str(path), plan=False).run({"x": x}, seed=(3, 0))["y"])


def test_without_a_seed_the_executor_refuses_in_one_line(trained):
    path, x = trained
    with pytest.raises(OnnxError, match="give a seed") as ei:
        Session(str(path)).run({"x": x})
    assert "Dropout" in str(ei.value) and "\n" not in str(ei.value)


def dropout_model(dt, ratio=0.25, mask=True):
    """x -> Dropout(ratio, training_mode=True) -> (y, mask), in ``dt`` (opset 13)."""
    et = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}[dt]
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"] if mask else ["y"])]
    inits = [helper.make_tensor("r", et, [], [ratio]),
             helper.make_tensor("t", TensorProto.BOOL, [], [True])]
    outs = [helper.make_tensor_value_info("y", et, [3, 50])]
    if mask:
        outs.append(helper.make_tensor_value_info("m", TensorProto.BOOL, [3, 50]))
    g = helper.make_graph(nodes, "d", [helper.make_tensor_value_info("x", et, [3, 50])], outs,
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_the_mask_output_and_the_scale_match_the_tape(dt):
    x = np.random.default_rng(0).standard_normal((3, 50)).astype(dt)
    m = dropout_model(dt)
    y, keep = (Session(m).run({"x": x}, seed=(5, 2))[k] for k in ("y", "m"))
    ty = tape_run(m, {"x": x}, (5, 2), dt)
    assert y.dtype == dt and y.tobytes() == ty["y"].tobytes()
    assert keep.dtype == bool and 0 < keep.sum() < keep.size
    assert np.array_equal(keep, ty["m"].astype(bool))
    # y = x * T(1/(1-ratio)) where kept, +0.0 * x elsewhere: one multiply
    assert np.array_equal(y, x * np.where(keep, dt(1 / 0.75), dt(0)))
    # the draw is default_rng((*seed, node index)).random(shape) >= ratio
    assert np.array_equal(keep, np.random.default_rng((5, 2, 0)).random((3, 50)) >= 0.25)


def test_the_onnx_command_runs_it_with_its_seed(trained, capsys):
    path, x = trained
    xin = str(path.parent / "x.npy")
    for seed in (0, 4):
        want = tape_run(str(path), {"x": x}, (seed, 0))["y"]
        np.save(path.parent / "want.npy", want)
        assert main(["onnx", str(path), "--input", f"x={xin}", "--seed", str(seed),
                     "--expected", str(path.parent / "want.npy"), "--rtol", "0", "--atol",
                     "0"]) == 0
        assert "PASS" in capsys.readouterr().out
    # another seed's mask is another output: it differs
    assert main(["onnx", str(path), "--input", f"x={xin}", "--seed", "1", "--expected",
                 str(path.parent / "want.npy")]) == 1
    assert "DIFFERS" in capsys.readouterr().out


def test_parity_on_host_trains_it_bit_for_bit(trained, capsys):
    path, _ = trained
    rc = main(["parity", "--model", str(path), "--device", "host", "--steps", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "bit-identical" in out and "first divergence: none" in out


def test_a_training_runs_step_0_mask_is_the_onnx_commands(trained):
    # OnnxWorkload(seed=S) records step 0 with step_seed (S, 0), as `tapescope onnx --seed S`
    from tapescope.core.onnx.workload import OnnxWorkload

    path, _ = trained
    wl = OnnxWorkload(str(path), dtype=np.float32, seed=9)
    wl.record(0)
    x = np.asarray(wl.inputs["x"].value)
    masks = [np.asarray(v.value) for k, v in wl.inputs.items() if "mask" in k]
    assert len(masks) == 1  # the tape's scale leaf: T(1/(1-ratio)) where kept, else 0
    s = Session(str(path))
    node = next(n for n in s.model.graph.node if n.op_type == "Dropout")
    keep = s.run({"x": x}, outputs=[node.output[1]], seed=(9, 0))[node.output[1]]
    assert keep.dtype == bool and np.array_equal(masks[0] != 0, keep)
    assert not np.array_equal(keep, s.run({"x": x}, outputs=[node.output[1]],
                                          seed=(9, 1))[node.output[1]])  # step 1's is another
