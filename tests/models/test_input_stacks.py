"""Your data, a batch per step (issue 45 item 5): ``--input NAME=FILE.npy`` with a leading step
axis (step i takes slice i) or ``NAME=DIR`` (one .npy per step, sorted by name), and an LM's
targets as ``--input targets=...``. Hostile cases first: each is one line naming the input and
the file, exit 2, before a step runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from tapescope.app.cli import main
from tapescope.core.onnx.errors import OnnxError
from tapescope.core.onnx.workload import OnnxWorkload


def _model(path, cols: int = 4):
    """x [2, 3] in, tanh(x @ w) [2, cols] out (cols 1: no classes, the loss is the mean)."""
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
        "m", [helper.make_tensor_value_info("x", f, [2, 3])],
        [helper.make_tensor_value_info("y", f, [2, cols])],
        [numpy_helper.from_array(np.full((3, cols), 0.5, np.float32), "w")])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _lm(path, vocab=7):
    """Token ids [2, 3] in, [2, 3, vocab] logits out (an embedding and a head)."""
    g = helper.make_graph(
        [helper.make_node("Gather", ["emb", "ids"], ["e"]),
         helper.make_node("MatMul", ["e", "head"], ["logits"])],
        "lm", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 3, vocab])],
        [numpy_helper.from_array(np.linspace(-1, 1, vocab * 4, dtype=np.float32)
                                 .reshape(vocab, 4), "emb"),
         numpy_helper.from_array(np.linspace(1, -1, 4 * vocab, dtype=np.float32)
                                 .reshape(4, vocab), "head")])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _npy_header(path, descr: str, shape: tuple) -> str:
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    text += " " * (63 - (10 + len(text)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode())
    return str(path)


def _one_line(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for n in needles:
        assert n in err[0], err[0]
    assert "Traceback" not in err[0]
    return err[0]


STACK = np.arange(3 * 2 * 3, dtype=np.float32).reshape(3, 2, 3) / 10


# --- hostile first ---------------------------------------------------------------------

def test_a_stack_shorter_than_steps_is_one_line_before_any_step(tmp_path, capsys):
    m = _model(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", STACK)
    assert main(["parity", "--model", m, "--input", f"x={tmp_path / 'x.npy'}", "--device",
                 "host", "--steps", "5"]) == 2
    _one_line(capsys, "--input x", "3 per-step batches, --steps 5 takes 5", "x.npy")
    # without a step count (the live window), the step past the stack says so
    wl = OnnxWorkload(m, dtype=np.float32, inputs={"x": str(tmp_path / "x.npy")})
    wl.record(3)
    with pytest.raises(OnnxError, match="step 4 needs batch 4, the stack holds 3"):
        wl.record(4)


@pytest.mark.parametrize("shape, needle", [
    ((3, 2, 4), "shape (3, 2, 4), the model takes (2, 3), or a stack of per-step batches "
                "[steps, 2, 3]"),
    ((3, 3, 2), "shape (3, 3, 2)"),
    ((2, 3, 2, 3), "shape (2, 3, 2, 3)"),
    ((0, 2, 3), "a stack of 0 batches")])
def test_a_misshapen_stack_is_one_line(tmp_path, capsys, shape, needle):
    m = _model(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.zeros(shape, np.float32))
    assert main(["parity", "--model", m, "--input", f"x={tmp_path / 'x.npy'}", "--device",
                 "host", "--steps", "1"]) == 2
    _one_line(capsys, "--input x", needle)


def test_a_folder_with_another_file_an_object_array_or_a_huge_header(tmp_path, capsys):
    m = _model(tmp_path / "m.onnx")
    d = tmp_path / "steps"
    d.mkdir()
    for i in range(2):
        np.save(d / f"{i:03d}.npy", STACK[i])
    (d / "notes.txt").write_text("step 3 is late\n")
    args = ["parity", "--model", m, "--input", f"x={d}", "--device", "host", "--steps", "3"]
    assert main(args) == 2
    _one_line(capsys, "--input x", "'notes.txt' is not a .npy file")
    (d / "notes.txt").unlink()
    np.save(d / "002.npy", np.array([[{"a": 1}] * 3] * 2, dtype=object), allow_pickle=True)
    assert main(args) == 2
    _one_line(capsys, "--input x (002.npy)", "Python objects", "never loaded")
    # a header that declares 2**40 elements over no data: refused before it is allocated
    _npy_header(d / "002.npy", "<f4", (1 << 20, 1 << 20))
    assert main(args) == 2
    _one_line(capsys, "--input x (002.npy)", "header declares shape")
    _npy_header(tmp_path / "huge.npy", "<f4", (1 << 30, 2, 3))  # a stack's leading axis too
    assert main(["parity", "--model", m, "--input", f"x={tmp_path / 'huge.npy'}", "--device",
                 "host", "--steps", "1"]) == 2
    _one_line(capsys, "--input x", "header declares shape (1073741824, 2, 3)")
    np.save(d / "002.npy", STACK[2, :1])  # one file of another shape: no stack in a folder
    assert main(args) == 2
    _one_line(capsys, "--input x (002.npy)", "shape (1, 3), the model takes (2, 3) (a folder "
                                             "holds one batch per file)")
    for f in d.iterdir():
        f.unlink()
    assert main(args) == 2
    _one_line(capsys, "--input x", "holds no .npy file")


# --- a batch per step --------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["stack", "folder"])
def test_step_i_takes_batch_i_and_parity_replays_it(tmp_path, kind):
    m = _model(tmp_path / "m.onnx")
    if kind == "stack":
        src = tmp_path / "x.npy"
        np.save(src, STACK.astype(np.float64))  # cast to the model's type
    else:
        src = tmp_path / "x"
        src.mkdir()
        for i, name in enumerate(["a.npy", "b.npy", "c.npy"]):  # sorted by name, not by age
            np.save(src / name, STACK[i])
        (src / "b.npy").touch()
    wl = OnnxWorkload(m, dtype=np.float32, inputs={"x": str(src)}, steps=3)
    for step in (1, 2, 3):
        wl.record(step)
        x = wl.tape.value(wl.inputs["x"])
        assert x.dtype == np.float32 and np.array_equal(x, STACK[step - 1])
    wl.record(0)  # the episode before any step sees the first batch
    assert np.array_equal(wl.tape.value(wl.inputs["x"]), STACK[0])
    out = tmp_path / "p.json"
    assert main(["parity", "--model", m, "--input", f"x={src}", "--device", "host",
                 "--steps", "3", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["exact"]
    # three different batches: three different losses (one array every step would repeat)
    losses = OnnxWorkload(m, dtype=np.float64, inputs={"x": str(src)}).train(3)
    assert len(set(losses)) == 3


def test_one_batch_still_serves_every_step(tmp_path):
    m = _model(tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", STACK[1])
    wl = OnnxWorkload(m, dtype=np.float32, inputs={"x": str(tmp_path / "x.npy")}, steps=9)
    assert wl.given_steps == {}
    wl.record(9)
    assert np.array_equal(wl.tape.value(wl.inputs["x"]), STACK[1])


# --- an LM's targets -----------------------------------------------------------------------

def test_lm_targets_as_an_input_per_step(tmp_path, capsys):
    m = _lm(tmp_path / "lm.onnx")
    ids = np.array([[[0, 1, 2], [3, 4, 5]], [[6, 5, 4], [3, 2, 1]]], np.int64)
    tg = np.array([[[1, 2, 3], [4, 5, 6]], [[0, 0, 1], [1, 2, 2]]], np.int64)
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "t.npy", tg)
    wl = OnnxWorkload(m, dtype=np.float64, inputs={"ids": str(tmp_path / "ids.npy"),
                                                   "targets": str(tmp_path / "t.npy")}, steps=2)
    assert (wl.loss_kind, wl.n_classes, wl.target_shape) == ("cross_entropy", 7, (2, 3))
    for step in (1, 2):
        loss = wl.record(step)
        ce = wl.tape.node(loss.id)
        assert ce.op == "cross_entropy"
        assert np.array_equal(wl.tape.value(ce.inputs[1]), tg[step - 1])  # the given classes
        logits = np.asarray(wl.tape.value(ce.inputs[0]), np.float64).reshape(-1, 7)
        want = -np.mean(logits[np.arange(6), tg[step - 1].ravel()]
                        - np.log(np.exp(logits).sum(1)))
        np.testing.assert_allclose(float(np.asarray(loss.value)), want, rtol=1e-12)
    out = tmp_path / "p.json"
    assert main(["parity", "--model", m, "--input", f"ids={tmp_path / 'ids.npy'}", "--input",
                 f"targets={tmp_path / 't.npy'}", "--device", "host", "--steps", "2", "--json",
                 str(out)]) == 0
    assert json.loads(out.read_text())["exact"]
    capsys.readouterr()
    # hostile: a class past the vocabulary, floats, a stack too short, ids out of the table
    for arr, needle in ((tg + 1, "classes span [1, 7], the logits have 7"),
                        (tg.astype(np.float32), "dtype float32 (floats), the model takes "
                                                "integer classes in [0, 7)"),
                        (tg[:1], "1 per-step batch, --steps 2 takes 2")):
        np.save(tmp_path / "bad.npy", arr)
        assert main(["parity", "--model", m, "--input", f"targets={tmp_path / 'bad.npy'}",
                     "--device", "host", "--steps", "2"]) == 2
        _one_line(capsys, "--input targets", needle)
    bad_ids = ids.copy()
    bad_ids[1, 0, 0] = 7
    np.save(tmp_path / "bad.npy", bad_ids)
    assert main(["parity", "--model", m, "--input", f"ids={tmp_path / 'bad.npy'}", "--device",
                 "host", "--steps", "2"]) == 2
    _one_line(capsys, "--input ids", "step 2's ids span [1, 7], the table they index has 7 rows")
    # a model whose loss is its mean takes no targets
    np.save(tmp_path / "t1.npy", np.zeros((2,), np.int64))
    with pytest.raises(OnnxError, match="which takes no targets"):
        OnnxWorkload(_model(tmp_path / "m.onnx", cols=1),
                     inputs={"targets": str(tmp_path / "t1.npy")})


def test_the_files_together_are_held_to_max_bytes_before_they_are_read(tmp_path, capsys):
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "m",
        [helper.make_tensor_value_info("x", f, [64, 64])],
        [helper.make_tensor_value_info("y", f, [64, 4])],
        [numpy_helper.from_array(np.full((64, 4), 0.5, np.float32), "w")])
    m = tmp_path / "m.onnx"
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(m))
    d = tmp_path / "steps"
    d.mkdir()
    for i in range(5):  # 32 KiB each as float64
        np.save(d / f"{i:03d}.npy", np.full((64, 64), i, np.float64))
    np.save(tmp_path / "stack.npy", np.ones((5, 64, 64)))
    base = ["parity", "--model", str(m), "--device", "host", "--steps", "5"]
    assert main([*base, "--input", f"x={d}", "--max-bytes", "100000"]) == 2
    _one_line(capsys, "--input x (003.npy): 32.0 KiB of data after 96.0 KiB of the files "
                      "before it, over the 97.7 KiB the inputs may take (raise it with "
                      "--max-bytes)")
    assert main([*base, "--input", f"x={tmp_path / 'stack.npy'}", "--max-bytes", "100000"]) == 2
    _one_line(capsys, "--input x: 160.0 KiB of data, over the 97.7 KiB")
    assert main([*base, "--input", f"x={d}", "--max-bytes", "1000000"]) == 0


def test_a_models_own_targets_input_takes_a_stack_too(tmp_path):
    """An export with its loss inside (the zoo's GPT: F.cross_entropy of its logits against
    its ``targets`` argument, a named input of the file) takes its targets per step like any
    input: each step's loss is PyTorch's on that step's slices."""
    torch = pytest.importorskip("torch")
    from tests.models import zoo

    path = zoo.export("gpt", tmp_path / "gpt.onnx", False)
    ids = np.random.default_rng(0).integers(0, 16, (3, 2, 4))
    tg = np.random.default_rng(1).integers(0, 16, (3, 2, 4))
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "tg.npy", tg)
    names = list(OnnxWorkload(path, dtype=np.float64).input_specs)  # TorchScript's names
    wl = OnnxWorkload(path, dtype=np.float64, steps=3,
                      inputs={names[0]: str(tmp_path / "ids.npy"),
                              names[1]: str(tmp_path / "tg.npy")})
    assert wl.loss_kind == "given" and wl.given_steps == {names[0]: 3, names[1]: 3}
    model = zoo.module("gpt").double()
    got = []
    for step in (1, 2, 3):
        want = model(torch.from_numpy(ids[step - 1]), torch.from_numpy(tg[step - 1])).item()
        got.append(float(np.asarray(wl.record(step).value)))
        # (the file's constants are float32: the scale, LayerNorm's eps; measured 1e-10)
        np.testing.assert_allclose(got[-1], want, rtol=1e-8)
    assert len(set(got)) == 3


def test_a_folder_is_read_only_as_far_as_the_steps_go(tmp_path):
    """A dataset's folder of many steps, 2 of them run: the files past step 2 are not read
    (a broken one there is never seen), yet every name is still checked."""
    m = _model(tmp_path / "m.onnx")
    d = tmp_path / "steps"
    d.mkdir()
    for i in range(3):
        np.save(d / f"{i:03d}.npy", STACK[i])
    (d / "003.npy").write_bytes(b"not read")
    wl = OnnxWorkload(m, dtype=np.float32, inputs={"x": str(d)}, steps=2)
    assert wl.given_steps == {"x": 2}
    wl.record(2)
    assert np.array_equal(wl.tape.value(wl.inputs["x"]), STACK[1])
    with pytest.raises(OnnxError, match=r"003\.npy\): not a readable \.npy"):
        OnnxWorkload(m, dtype=np.float32, inputs={"x": str(d)}, steps=4)
    (d / "zz.txt").write_text("")
    with pytest.raises(OnnxError, match="'zz.txt' is not a .npy file"):
        OnnxWorkload(m, dtype=np.float32, inputs={"x": str(d)}, steps=2)
