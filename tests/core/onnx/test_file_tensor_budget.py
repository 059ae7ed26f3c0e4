"""The tensors of a file are charged to --max-bytes before the file is parsed (issue 49, red
team 3: 3M string initializers, a 200 MB file, peaked at 1,168 MiB under a 512 MiB budget in
`tapescope onnx`, parsed and checked before any charge; a 173 MB file of 3M one-string
initializers took 45 s and 3.4 GB here): each initializer and tensor attribute of the graph
costs its objects (core.onnx.limits.TENSOR_OBJECT_BYTES) and its strings, read off the
protobuf wire format, and the run is refused, naming the budget, before anything is built."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest
from onnx import TensorProto, helper

from tapescope.core.onnx import loader
from tapescope.core.onnx.limits import (
    STRING_OBJECT_BYTES,
    TENSOR_OBJECT_BYTES,
    Limits,
    OnnxLimitError,
    precheck_file_tensors,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def many_strings(n: int, where: str = "initializer") -> bytes:
    """A model computing y = x that carries ``n`` one-string tensors of 40 bytes."""
    ts = [helper.make_tensor(f"s{i}", TensorProto.STRING, [1], [b"x" * 40]) for i in range(n)]
    nodes = [helper.make_node("Identity", ["x"], ["y"])]
    inits = []
    if where == "initializer":
        inits = ts
    else:
        nodes += [helper.make_node("Constant", [], [f"c{i}"], value=t) for i, t in enumerate(ts)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("where", ["initializer", "attribute"])
def test_many_string_tensors_are_refused_before_the_file_is_parsed(tmp_path, monkeypatch,
                                                                   capsys, where):
    from tapescope.app.cli import main

    path = tmp_path / "s.onnx"
    path.write_bytes(many_strings(20_000, where))  # ~1.4 MB; ~28 MB as objects
    assert os.path.getsize(path) < 2 << 20

    def parsed(*a):
        raise AssertionError("the file was parsed before its tensors were charged")

    monkeypatch.setattr(loader, "_parse", parsed)
    tracemalloc.start()
    try:
        assert main(["onnx", str(path), "--max-bytes", "8M"]) == 2
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"tapescope onnx: {path}: the file's "), err
    assert "tensors" in err and "over the limit of 8388608 (max bytes; raise it with " \
                                "--max-bytes" in err, err
    assert peak < 8 << 20, peak


def test_under_the_budget_it_runs():
    from tapescope.core.onnx import Session

    data = many_strings(2_000)
    sess = Session(data, limits=Limits(max_bytes=64 << 20))
    assert sess.run({"x": np.ones(2, np.float32)})["y"].tolist() == [1.0, 1.0]


def test_the_charge_counts_tensors_and_strings():
    data = many_strings(100)
    need = 100 * (TENSOR_OBJECT_BYTES + STRING_OBJECT_BYTES + 2 * 40)
    precheck_file_tensors(data, Limits(max_bytes=need))
    with pytest.raises(OnnxLimitError, match=r"the file's 100\+ tensors \(100\+ strings\)"):
        precheck_file_tensors(data, Limits(max_bytes=need - 1))


def test_the_shipped_models_and_garbage_pass_the_precheck():
    """Real models cost their few tensors; bytes that are no protobuf are left to the parser."""
    models = os.path.join(ROOT, "resources", "models")
    for f in sorted(os.listdir(models)):
        if f.endswith(".onnx"):
            with open(os.path.join(models, f), "rb") as fh:
                precheck_file_tensors(fh.read(), Limits(max_bytes=1 << 20))
    for junk in (b"", b"\xff" * 64, b"\x3a\xff\xff\xff\xff\x0f", bytes(range(256)) * 4):
        precheck_file_tensors(junk, Limits(max_bytes=1))
