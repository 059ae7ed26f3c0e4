"""``tapescope gui M.onnx --input NAME=F.npy`` (``--shape``, ``--weights``, ``--reinit``): the
model's arguments are checked before any window exists (issue 45: the window was made first,
and after the error line its teardown segfaulted, exit 139), and given with a model file they
name it the model, as ``--live`` and ``--reinit`` do."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from tests.helpers.gui import error_lines, run_gui


@pytest.fixture
def model(tmp_path):
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
        "m", [helper.make_tensor_value_info("x", f, ["batch", 3])],
        [helper.make_tensor_value_info("y", f, ["batch", 4])],
        [numpy_helper.from_array(np.ones((3, 4), np.float32), "w")])
    path = tmp_path / "m.onnx"
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    return path


@pytest.mark.parametrize("args, says", [
    (["--input", "x=NOPE.npy"], "--input x="),  # a missing file: checked before the window
    (["--shape", "x=a,b"], "--shape x=a,b: give positive integers"),
    # the file's contents: the model is opened before the window too
    (["--input", "x=BAD.npy"], "--input x: shape (3, 3), the model takes"),
    (["--input", "nosuch=GOOD.npy"], "the model has no input 'nosuch' (its inputs: x)"),
])
def test_a_bad_model_argument_is_one_line_and_exit_2(tmp_path, model, args, says):
    np.save(tmp_path / "bad.npy", np.ones((3, 3), np.float32))
    args = [a.replace("NOPE", str(tmp_path / "nope")).replace("BAD.npy", str(tmp_path / "bad.npy"))
            .replace("GOOD.npy", str(tmp_path / "x.npy")) for a in args]
    r = run_gui(str(model), *args, config=tmp_path)  # no --screenshot: the window case
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = error_lines(r)
    assert len(lines) == 1 and lines[0].startswith("tapescope gui: ") and says in lines[0], \
        r.stderr
    assert "Traceback" not in r.stderr


def test_input_without_a_model_is_one_line_and_exit_2(tmp_path, model):
    r = run_gui("--input", f"x={tmp_path / 'x.npy'}", config=tmp_path)
    assert r.returncode == 2 and error_lines(r) == ["tapescope gui: --input needs --model M.onnx"]


def test_gui_model_with_input_and_shape_opens_it_as_the_model(tmp_path, model):
    out = tmp_path / "shot.png"
    r = run_gui(str(model), "--input", f"x={tmp_path / 'x.npy'}", "--shape", "x=2,3",
                "--screenshot", str(out), config=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"wrote {out}") and out.stat().st_size > 0
