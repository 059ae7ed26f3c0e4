"""Issue 25, item 13: an ONNX model shown as its ONNX ops. Each ONNX node that became several
tape nodes is one folded box labelled with its op type (BatchNormalization, not
sqrt/sub/div/mul); a click selects its output and the Inspector shows its attributes; a
double-click unfolds it into the tape nodes it became."""

from __future__ import annotations

import gc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PySide6.QtCore import Qt

from tapescope.app.qt.main_window import MainWindow
from tapescope.views.models.graph_model import GraphModel, GraphNode


def bn_model(path) -> str:
    """x (1x2x4x4) → Conv 3x3 → BatchNormalization → Relu → ReduceSum: a ResNet stem in small."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("w", rng.standard_normal((3, 2, 3, 3))), ("scale", rng.uniform(0.5, 2, 3)),
        ("bias", rng.standard_normal(3)), ("mean", rng.standard_normal(3)),
        ("var", rng.uniform(0.5, 2, 3)))]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="/stem/conv", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"],
                         name="/stem/bn", epsilon=1e-5),
        helper.make_node("Relu", ["b"], ["r"], name="/stem/relu"),
        helper.make_node("ReduceSum", ["r"], ["y"], name="/head/sum", keepdims=0),
    ]
    g = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 2, 4, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    np.save(str(path).replace(".onnx", ".input.x.npy"),
            rng.standard_normal((1, 2, 4, 4)).astype(np.float32))
    return str(path)


@pytest.fixture(autouse=True)
def _collect_here():
    """Collect these tests' windows now, while no layout job runs (tests/views/test_scale.py:
    left to a later GC they were finalised during another test's layout, a segfault)."""
    yield
    gc.collect()


@pytest.fixture
def win(qtbot, settings):
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.live.close()


def box_of(view, op: str) -> int:
    return next(i for i, lab in enumerate(view.display.labels) if lab[0] == f"▸ {op}")


def test_batch_norm_is_one_box_with_its_attributes(qtbot, win, tmp_path):
    with qtbot.waitSignal(win.graph.view.layout_ready, timeout=20000):
        assert win.open_file(bn_model(tmp_path / "bn.onnx")), win.last_traceback
    win.wait_until_ready()
    v = win.graph.view
    info = next(i for i in win.session.meta["onnx_nodes"] if i["op_type"] == "BatchNormalization")
    members = list(range(info["first"], info["stop"]))
    assert len(members) >= 3  # it became several tape nodes (sqrt, sub, div, mul, ...)
    bn = box_of(v, "BatchNormalization")
    assert v.display.labels[bn][2] == f"{len(members)} tape nodes"
    assert all(int(v.display.node_item[i]) == bn for i in members)
    ops = {lab[0] for lab in v.display.labels}
    assert not ops & {"sqrt", "div"}, ops  # none of its primitives is on screen
    # a click on the box selects the op's output; the Inspector names the ONNX op and its
    # attributes as the file has them
    v.centerOn(v.canvas.item_rect(bn).center())
    qtbot.mouseClick(v.viewport(), Qt.LeftButton,
                     pos=v.mapFromScene(v.canvas.item_rect(bn).center()))
    assert win.selected == info["stop"] - 1
    text = win.inspector.header.text()
    assert "ONNX <b>BatchNormalization</b>" in text and "epsilon" in text, text[:400]
    assert int(v.display.node_item[win.selected]) == bn  # still folded
    # a double-click unfolds it: its tape nodes are boxes of their own
    with qtbot.waitSignal(v.layout_ready, timeout=10000):
        qtbot.mouseDClick(v.viewport(), Qt.LeftButton,
                          pos=v.mapFromScene(v.canvas.item_rect(bn).center()))
    items = {int(v.display.node_item[i]) for i in members}
    assert len(items) == len(members) and all(v.display.item_node[i] >= 0 for i in items)


def test_group_onnx_makes_only_boxes_that_hold_exactly_the_nodes():
    nodes = [GraphNode(0, "param", (), "a/w"), GraphNode(1, "mul", (0,), "a/"),
             GraphNode(2, "add", (1,), "a/"), GraphNode(3, "relu", (2,), "r/"),
             GraphNode(4, "exp", (3,), "b/"), GraphNode(5, "neg", (4,), "c/")]
    m = GraphModel(nodes, loss_id=5)
    made = m.group_onnx([
        {"op_type": "Gemm", "first": 0, "stop": 3},  # a/: exactly 0..2
        {"op_type": "Relu", "first": 3, "stop": 4},  # one tape node: its own box already
        {"op_type": "Odd", "first": 4, "stop": 6},  # b/ and c/: no one scope holds both
        {"op_type": "Bad", "first": 5, "stop": 99},  # out of range (a hostile file)
    ])
    assert made == ["a"] and m.collapsed == {"a"}
    assert m.pick("a") == 2  # its output
    d = m.display()
    assert d.labels[int(d.node_item[0])] == ("▸ Gemm", "a", "3 tape nodes")
