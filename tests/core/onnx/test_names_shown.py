"""Names from a model reach the terminal, the tape and the GUI escaped and cut (core.names)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tapescope.core import Tape, tapefile
from tapescope.core.names import MAX_NAME, shown

EVIL = "\x1b[31m\nfake line\r" + "A" * 10_000  # colours, a fake line, a carriage return, a wall


def evil_model(path) -> None:
    w = helper.make_tensor(EVIL + "w", TensorProto.FLOAT, [2], [1.0, 2.0])
    nodes = [helper.make_node("Mul", [EVIL, EVIL + "w"], [EVIL + "y"], name=EVIL + "node")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(EVIL, TensorProto.FLOAT,
                                                                     [2])],
                          [helper.make_tensor_value_info(EVIL + "y", TensorProto.FLOAT, [2])],
                          [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_shown_escapes_and_cuts():
    s = shown(EVIL)
    assert s.isprintable() and len(s) <= 80 and s.startswith("\\x1b[31m\\nfake line\\r")
    assert s.endswith("…(10016 characters)")
    assert shown("layer1/conv") == "layer1/conv"  # an ordinary name is unchanged
    assert len(shown("é" * 1000, MAX_NAME)) == MAX_NAME


def test_the_onnx_command_prints_names_escaped_and_cut(tmp_path, capsys):
    from tapescope.app.cli import main

    path = tmp_path / "evil.onnx"
    evil_model(path)
    assert main(["onnx", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["model", "input", "output"]  # no fake line
    assert all(len(line) < 300 for line in lines), [len(x) for x in lines]


def test_a_model_imported_onto_a_tape_gets_names_a_tape_file_keeps(tmp_path):
    from tapescope.core.onnx.importer import import_to_tape

    path = tmp_path / "evil.onnx"
    evil_model(path)
    tape = Tape(dtype=np.float32)
    import_to_tape(str(path), tape, {EVIL: np.ones(2, np.float32)})
    names = [n.name for n in tape.nodes if n.name]
    assert names and all(n.isprintable() and len(n) <= MAX_NAME for n in names), names
    back, _ = tapefile.load(tapefile.save(tape, tmp_path / "evil.tape"))
    assert [n.name for n in back.nodes] == [n.name for n in tape.nodes]


def test_the_gui_view_of_a_model_has_escaped_names(tmp_path):
    from tapescope.app.onnx_view import onnx_tape_view

    path = tmp_path / "evil.onnx"
    evil_model(path)
    view, meta = onnx_tape_view(path)
    assert all(n.name.isprintable() and len(n.name) <= MAX_NAME for n in view.nodes)
    assert all(k.isprintable() for k in meta["inputs"]) and all(
        o.isprintable() for o in meta["outputs"])
