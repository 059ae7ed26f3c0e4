"""String tensors from the file are charged to --max-bytes before they become Python objects,
and running out of memory anyway is one line that says which budget to raise or lower."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tapescope.core.onnx import Session
from tapescope.core.onnx.limits import Limits, OnnxLimitError, string_tensor_bytes


def string_model(n: int, where: str = "initializer") -> onnx.ModelProto:
    """A model whose output is a number, and which carries ``n`` strings of 64 bytes."""
    strings = helper.make_tensor("s", TensorProto.STRING, [n], [b"x" * 64] * n)
    nodes = [helper.make_node("Identity", ["x"], ["y"])]
    inits = []
    if where == "initializer":
        inits = [strings]
    else:
        nodes.append(helper.make_node("Constant", [], ["s"], value=strings))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_string_tensor_costs_its_objects_not_its_pointers():
    t = helper.make_tensor("s", TensorProto.STRING, [3], [b"ab", b"", b"xyz"])
    assert string_tensor_bytes(t) == 3 * 256 + 2 * 5
    assert string_tensor_bytes(helper.make_tensor("f", TensorProto.FLOAT, [4], [0.0] * 4)) == 0


@pytest.mark.parametrize("where", ["initializer", "attribute"])
def test_string_tensors_from_the_file_are_charged_before_conversion(where):
    m = string_model(50_000, where)  # ~19 MB as Python strings (~3 MB in the file)
    with pytest.raises(OnnxLimitError, match=r"string tensors of the file .* about 1\d{7} "
                                             r"bytes .*--max-bytes"):
        Session(m, limits=Limits(max_bytes=8 << 20))
    y = Session(m, limits=Limits(max_bytes=64 << 20)).run({"x": np.ones(2, np.float32)})["y"]
    assert y.tolist() == [1.0, 1.0]  # under the budget it runs


def test_a_memory_error_is_one_line_naming_the_budgets(tmp_path, monkeypatch, capsys):
    from onnx import numpy_helper

    from tapescope.app.cli import main

    path = tmp_path / "m.onnx"
    onnx.save(string_model(10), path)

    def no_memory(t):
        raise MemoryError  # what a 2 GiB address-space cap does mid-conversion: no message

    monkeypatch.setattr(numpy_helper, "to_array", no_memory)
    assert main(["onnx", str(path), "--max-bytes", "1G"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad initializer" not in err, err
    assert err.startswith("tapescope onnx: out of memory") and "ulimit -v" in err
    assert "--max-bytes (now 1073741824)" in err
