"""Imported models in the window: an untrainable one says which op and what still works; an
imported node shows its ONNX node's attributes in the Inspector, as Netron lists them."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything imports Qt

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from onnx import TensorProto, helper, numpy_helper, save  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TORCH_CNN = os.path.join(ROOT, "resources", "models", "torch_cnn.onnx")


@pytest.fixture
def win(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from tapescope.app.qt.main_window import MainWindow

    w = MainWindow(settings=QSettings(str(tmp_path / "t.ini"), QSettings.IniFormat))
    qtbot.addWidget(w)
    w.show()
    yield w
    w.live.close()


def _untrainable(tmp_path) -> str:
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "conv.weight")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "conv.weight"], ["h"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Flatten", ["h"], ["f"], name="flat"),
         helper.make_node("Hardmax", ["f"], ["y"], name="<b>pick</b>")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    path = str(tmp_path / "hardmax.onnx")
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_an_untrainable_model_names_the_op_and_says_what_still_works(qtbot, win, tmp_path):
    assert win.open_file(_untrainable(tmp_path))
    s = win.session
    assert s.loss_id is None and win.stepper is None
    text = win.status_label.text()
    assert "cannot train" in text and "(Hardmax): op Hardmax has no tape form" in text
    assert "Still works: every node's forward value" in win.status_label.toolTip()
    where = win.stepper_panel.where.text()
    assert "Hardmax" in where and "&lt;b&gt;pick" in where  # the node's name, escaped
    conv = next(n for n in s.tape.nodes if n.op == "Conv")
    assert s.tape.value(conv.id).shape == (1, 4, 4, 4)  # forward values are there


def test_the_inspector_shows_the_onnx_nodes_attributes(qtbot, win):
    assert win.open_file(TORCH_CNN)
    s = win.session
    conv = next(n for n in s.tape.nodes if n.op == "conv2d")
    info = s.details(conv.id).onnx
    assert info["op_type"] == "Conv" and info["name"] == "/stem/stem.0/Conv"
    assert info["attributes"]["kernel_shape"] == [3, 3]
    assert info["attributes"]["pads"] == [1, 1, 1, 1]
    win.select_node(conv.id)
    head = win.inspector.header.text()
    assert "ONNX <b>Conv</b>" in head and "kernel_shape" in head and "3, 3" in head
    bias = next(n for n in s.tape.nodes if n.op == "add" and n.inputs[0] == conv.id)
    assert s.details(bias.id).onnx is info  # the bias add belongs to the same ONNX Conv
    param = s.tape.node(conv.inputs[1])
    assert param.op == "param" and param.name.startswith("stem/stem.0/Conv/")


def test_onnx_html_escapes_names_from_the_file():
    from tapescope.views.inspector import onnx_html

    html = onnx_html({"name": "<script>", "op_type": "Conv", "first": 3, "stop": 5,
                      "attributes": {"strides": [2, 2], "mode": "<i>x</i>", "alpha": 0.5}})
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;i&gt;" in html
    assert "strides</span> <code>2, 2</code>" in html and "0.5" in html
    assert "#3–#4" in html
    assert onnx_html(None) == ""


def test_model_arguments_become_the_workload_spec():
    import os
    from argparse import Namespace

    from tapescope.app.commands.model_args import resolve_workload

    # absolute: the live worker starts in the repository root (tests/models/test_relative_paths)
    m = os.path.abspath("m.onnx")
    assert resolve_workload(Namespace(model="m.onnx", reinit=False, workload=None)) == \
        "onnx:" + m
    assert resolve_workload(Namespace(model="m.onnx", reinit=True, workload=None)) == \
        "onnx+reinit:" + m
    assert resolve_workload(Namespace(model=None, reinit=False, workload=None)) == "mlp"
    with pytest.raises(ValueError, match="not both"):
        resolve_workload(Namespace(model="m.onnx", reinit=False, workload="mlp"))
    with pytest.raises(ValueError, match="--reinit needs --model"):
        resolve_workload(Namespace(model=None, reinit=True, workload=None))


def test_a_live_session_of_a_model_trains_the_model_itself(qtbot, win):
    """`gui M.onnx --live`: the window opens the model as a workload (Live can start it)."""
    from tapescope.app.commands.model_args import resolve_workload

    spec = resolve_workload(_Args(TORCH_CNN), default=None)
    assert win.open_workload(spec)
    s = win.session
    assert s.workload is not None and s.meta["workload"] == f"onnx:{TORCH_CNN}"
    assert s.tape.node(s.loss_id).op == "cross_entropy"
    assert win.live.toolbar_config().workload == f"onnx:{TORCH_CNN}"


def test_live_start_after_file_open_trains_the_opened_model(qtbot, win, tmp_path):
    """File > Open of a trainable model, then Live > Start: the model trains, not the toolbar's
    last workload; an untrainable one keeps the toolbar's."""
    assert win.open_file(TORCH_CNN)
    assert win.live.toolbar_config().workload == f"onnx:{TORCH_CNN}"
    assert win.open_file(_untrainable(tmp_path))
    assert win.live.toolbar_config().workload == win.live.config.workload
    assert not win.live.config.workload.startswith("onnx:")


class _Args:
    def __init__(self, model):
        self.model, self.reinit, self.workload = model, False, None
