"""Cast and CastLike on the tape (issue 45 item 2: dynamo's ``optimize=False`` casts, fp16
exports): the tape holds every value in one type, so a cast to it is the value itself and
records nothing; in a model run at another precision than its own (``--dtype``) every float
cast is; a cast that would change the precision of a model run at its own is refused in one
line naming the types and the ``--dtype``. An If whose branch reads a tape value is refused
(it used to fold with a tape value inside and escape as an AttributeError)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tapescope.core.onnx.errors import OnnxError
from tapescope.core.onnx.executor import Session
from tapescope.core.onnx.importer import import_to_tape
from tapescope.core.tape import Tape


def _model(cast_to: int, elem=TensorProto.FLOAT, dt=np.float32):
    """y = CastLike(Relu(Cast(x, to)), x) * CastLike(2, x)."""
    two = numpy_helper.from_array(np.array(2.0, np.float64), "two")
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=cast_to),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("CastLike", ["r", "x"], ["back"]),
             helper.make_node("CastLike", ["two", "x"], ["two_t"]),
             helper.make_node("Mul", ["back", "two_t"], ["y"])]
    g = helper.make_graph(nodes, "cast", [helper.make_tensor_value_info("x", elem, [2, 3])],
                          [helper.make_tensor_value_info("y", elem, [2, 3])], [two])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def test_a_cast_to_the_tapes_type_is_the_value_itself():
    model = _model(TensorProto.FLOAT)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    want = Session(model).run({"x": x})["y"]
    tape = Tape(np.float32)
    y = import_to_tape(Session(model, fold=False), tape, {"x": x}).outputs["y"]
    assert np.asarray(y.value).tobytes() == want.tobytes()
    assert [n.op for n in tape.nodes if n.op not in ("const", "param")] == ["relu", "mul"]


def test_a_precision_change_inside_a_model_at_its_own_precision_is_refused():
    model = _model(TensorProto.DOUBLE)  # float32 -> float64 inside a float32 model
    x = np.ones((2, 3), np.float32)
    with pytest.raises(OnnxError, match=r"^[^\n]*Cast from float32 to float64 inside a float32 "
                                        r"model has no tape form: .*\(--dtype float64 runs the "
                                        r"whole model in float64\)$"):
        import_to_tape(Session(model, fold=False), Tape(np.float32), {"x": x})


def test_at_another_precision_every_float_cast_is_the_value_itself():
    """--dtype float64 on a float32 model: the whole model runs in float64, its casts too."""
    model = _model(TensorProto.FLOAT16)
    x = np.random.default_rng(1).standard_normal((2, 3))
    tape = Tape(np.float64)
    xv = tape.const(x, name="x")  # the workload's way: a tape value, in the tape's type
    y = import_to_tape(Session(model, fold=False), tape, {"x": xv}).outputs["y"]
    np.testing.assert_array_equal(np.asarray(y.value), np.maximum(x, 0) * 2.0)
    assert np.asarray(y.value).dtype == np.float64


def test_a_cast_to_an_integer_type_is_refused():
    model = _model(TensorProto.INT64)
    with pytest.raises(OnnxError, match=r"^[^\n]*Cast of a tape value to int64 has no tape "
                                        r"form \(to a floating type has\)$"):
        import_to_tape(Session(model, fold=False), Tape(np.float32),
                       {"x": np.ones((2, 3), np.float32)})


def test_an_if_whose_branch_reads_a_tape_value_is_refused_in_one_line():
    f = TensorProto.FLOAT
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", f, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", f, [2])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    g = helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=then,
                                            else_branch=other)], "if",
                          [helper.make_tensor_value_info("x", f, [2])],
                          [helper.make_tensor_value_info("y", f, [2])], [cond])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(OnnxError, match=r"^[^\n]*If whose body reads a value on the tape has no "
                                        r"tape form"):
        import_to_tape(Session(model, fold=False), Tape(np.float32),
                       {"x": np.ones(2, np.float32)})
