"""The training path (an ONNX model imported onto the tape: `parity --model`, `gui M.onnx
--live`, the torch candidate) keeps the executor's budgets (issue 49, red team 3: a ~170-byte
model made the tape allocate gigabytes before a MemoryError; a 111-byte MatMul of a
(16384, 1) input by its transpose peaked at 7.4 GB): a node's output is checked against
--max-elements, and what the tape would hold (its values and their gradients) against
--max-bytes, before it is recorded; a shape whose dims no array can have (0 x 2**61) is one
clean line, never numpy's bare ValueError."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from onnx import helper

from tapescope.core.onnx.limits import Limits, OnnxLimitError
from tests.helpers.onnx_budgets import F, empty_but_huge, save_tiny_model


def outer_product(path, n=16384) -> str:
    """x (n, 1) @ x.T: an (n, n) MatMul, 2**28 elements for n = 16384 (1 GiB in float32)."""
    x = helper.make_tensor_value_info("x", F, [n, 1])
    return save_tiny_model([helper.make_node("Transpose", ["x"], ["t"]),
                  helper.make_node("MatMul", ["x", "t"], ["m"], name="big"),
                  helper.make_node("ReduceSum", ["m"], ["y"])], [x], [], path)


def _one_line(capsys, cmd):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"tapescope {cmd}: "), err
    assert "Traceback" not in err and "ValueError" not in err, err
    return err


@pytest.mark.parametrize("device", ["host", "torch"])
def test_a_huge_matmul_is_refused_before_the_tape_holds_it(tmp_path, capsys, device):
    from tapescope.app.cli import main

    if device == "torch":
        pytest.importorskip("torch")
    path = outer_product(tmp_path / "mm.onnx")
    tracemalloc.start()
    try:
        rc = main(["parity", "--model", path, "--device", device, "--steps", "1"])
        err = _one_line(capsys, "parity")
        assert rc == 2
        assert "node 1 'big' (MatMul): the output would have 268435456 elements" in err
        assert "--max-elements" in err
        # raising the element limit, the byte budget refuses it, before recording it
        rc = main(["parity", "--model", path, "--device", device, "--steps", "1",
                   "--max-elements", "300M", "--max-bytes", "512M"])
        err = _one_line(capsys, "parity")
        assert rc == 2
        assert "node 1 'big' (MatMul): the tape would hold about 214" in err, err
        assert "(max bytes; raise it with --max-bytes" in err
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak  # nothing of the 1 GiB product was allocated


def test_the_import_charges_the_tape_against_max_bytes():
    """import_to_tape itself: a model within max_elements whose recorded values (and their
    gradients) would pass max_bytes is refused naming the node; with room it imports."""
    from tapescope.core.onnx import Session
    from tapescope.core.onnx.importer import import_to_tape
    from tapescope.core.tape import Tape

    x = helper.make_tensor_value_info("x", F, [256, 1])
    y = helper.make_tensor_value_info("y", F, None)
    y.type.tensor_type.shape.SetInParent()
    g = helper.make_graph([helper.make_node("Transpose", ["x"], ["t"]),
                           helper.make_node("MatMul", ["x", "t"], ["m"], name="outer"),
                           helper.make_node("ReduceSum", ["m"], ["y"])], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.ones((256, 1), np.float32)}
    small = Limits(max_bytes=512 << 10)  # the 256 x 256 float64 product and its gradient: 1 MiB
    with pytest.raises(OnnxLimitError, match=r"node 1 'outer' \(MatMul\): the tape would hold "
                                             r"about \d+ bytes .*max bytes"):
        import_to_tape(Session(m, mode="reference", fold=False, limits=small), Tape(), feeds,
                       limits=small)
    big = Limits(max_bytes=4 << 20)
    out = import_to_tape(Session(m, mode="reference", fold=False, limits=big), Tape(), feeds,
                         limits=big)
    assert np.asarray(out.outputs["y"].value).sum() == 256 * 256


@pytest.mark.parametrize("op", ["Reshape", "ConstantOfShape"])
def test_a_zero_by_2_61_node_is_one_clean_line(tmp_path, capsys, op):
    from tapescope.app.cli import main

    path = empty_but_huge(tmp_path / f"{op}.onnx", op)
    for argv, cmd in ((["onnx", path], "onnx"),
                      (["parity", "--model", path, "--device", "host", "--steps", "1"],
                       "parity")):
        assert main(argv) == 2
        err = _one_line(capsys, cmd)
        assert f"node 0 'big' ({op}):" in err and "(0, 2305843009213693952)" in err, err
        assert "no array can have" in err, err


def test_the_limits_travel_in_the_workload_spec():
    """parity/report/gui hand the workload to a worker as a spec string: the flags go with it."""
    from tapescope.core.onnx.workload import TRAIN_LIMITS, split_options, with_options

    spec = with_options("onnx:/m.onnx", limits={"max_elements": 5, "max_bytes": 7})
    head, opts = split_options(spec)
    assert head == "onnx:/m.onnx"
    assert opts["limits"] == TRAIN_LIMITS.with_(max_elements=5, max_bytes=7)
    assert split_options("onnx:/m.onnx")[1] == {}
    assert TRAIN_LIMITS.max_elements == Limits().max_elements
    assert TRAIN_LIMITS.max_bytes == Limits().max_bytes
