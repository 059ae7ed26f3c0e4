"""A model the tape cannot train says which op, which node and the way out, in one line."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tapescope.app.cli import main


def _one(tmp_path, op_type, **attrs):
    f = TensorProto.FLOAT
    g = helper.make_graph([helper.make_node(op_type, ["x"], ["y"], name="the_op", **attrs)], "m",
                          [helper.make_tensor_value_info("x", f, [2, 3])],
                          [helper.make_tensor_value_info("y", f, [2, 3])])
    path = tmp_path / f"{op_type}.onnx"
    from onnx import save

    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return str(path)


@pytest.mark.parametrize("op_type, extra", [("Hardmax", None), ("Mish", "function")])
def test_no_tape_form_names_op_node_and_the_way_out(tmp_path, capsys, op_type, extra):
    path = _one(tmp_path, op_type)
    assert main(["parity", "--model", path, "--device", "host", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    line = err[0]
    assert f"'the_op' ({op_type})" in line and f"op {op_type} has no tape form" in line
    assert "docs/onnx-coverage.md" in line and "docs/adding-an-op.md" in line
    assert extra is None or extra in line
    assert np.all([w not in line for w in ("Traceback", "TypeError")])
