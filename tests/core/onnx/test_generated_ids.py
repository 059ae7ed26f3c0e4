"""``tapescope onnx`` with no --input draws integer ids within the smallest constant table
they index (issue 45, item 3, for the executor: a 2-row token-type table failed with `index out
of range [-2, 2)`), and where it cannot know the table says which --input to give."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tapescope.app.cli import main
from tapescope.core.onnx import Session, default_inputs
from tapescope.core.onnx.executor import index_bounds


def bert_like(table_is_input: bool = False) -> onnx.ModelProto:
    """word[30, 8][input_ids] + tt[2, 8][Cast(Reshape(token_type_ids))] reshaped back."""
    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(r.standard_normal((30, 8)).astype(np.float32), "word"),
             numpy_helper.from_array(np.array([-1], np.int64), "flat"),
             numpy_helper.from_array(np.array([2, 5, 8], np.int64), "shp")]
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [2, 5]),
           helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, [2, 5])]
    if table_is_input:
        ins.append(helper.make_tensor_value_info("tt", TensorProto.FLOAT, [2, 8]))
    else:
        inits.append(numpy_helper.from_array(r.standard_normal((2, 8)).astype(np.float32), "tt"))
    nodes = [helper.make_node("Reshape", ["token_type_ids", "flat"], ["tflat"]),
             helper.make_node("Cast", ["tflat"], ["t32"], to=TensorProto.INT32),
             helper.make_node("Gather", ["word", "input_ids"], ["we"]),
             helper.make_node("Gather", ["tt", "t32"], ["te0"]),
             helper.make_node("Reshape", ["te0", "shp"], ["te"]),
             helper.make_node("Add", ["we", "te"], ["y"])]
    g = helper.make_graph(nodes, "b", ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 8])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_ids_are_drawn_within_the_table_they_index(tmp_path, capsys):
    sess = Session(bert_like())
    assert index_bounds(sess) == {"input_ids": 30, "token_type_ids": 2}
    feeds = default_inputs(sess, 3)
    assert set(np.unique(feeds["token_type_ids"])) == {0, 1}  # both rows, nothing else
    assert feeds["input_ids"].max() < 10 and feeds["input_ids"].min() >= 0
    onnx.save(bert_like(), tmp_path / "b.onnx")
    assert main(["onnx", str(tmp_path / "b.onnx")]) == 0
    assert "(generated)" in capsys.readouterr().out


def test_when_the_table_is_not_known_it_names_the_inputs_to_give(tmp_path, capsys):
    onnx.save(bert_like(table_is_input=True), tmp_path / "b.onnx")
    assert index_bounds(Session(str(tmp_path / "b.onnx"))) == {"input_ids": 30}
    assert main(["onnx", str(tmp_path / "b.onnx"), "--seed", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "index out of range [-2, 2)" in err
    assert "--input input_ids=FILE.npy --input token_type_ids=FILE.npy" in err


@pytest.mark.parametrize("seed", [0, 1])
def test_inputs_without_a_small_table_are_drawn_as_before(seed):
    # a 30-row table does not change the draw: [0, 10) as before, the same numbers
    sess = Session(bert_like())
    rng = np.random.default_rng(seed)
    assert np.array_equal(default_inputs(sess, seed)["input_ids"],
                          rng.integers(0, 10, size=(2, 5)).astype(np.int64))
