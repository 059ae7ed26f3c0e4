"""Dynamo exports name nodes n0, node_MatMul_6: the import groups them by the module path the
exporter records in node metadata, as TorchScript's /layer/Op names group."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tapescope.core.onnx.executor import Session
from tapescope.core.onnx.importer import import_to_tape, module_path
from tapescope.core.tape import Tape


def _node(op, ins, outs, name, namespace=None):
    n = helper.make_node(op, ins, outs, name=name)
    if namespace is not None:
        p = n.metadata_props.add()
        p.key, p.value = "namespace", namespace
    return n


def test_dynamo_nodes_group_by_module_path():
    f = TensorProto.FLOAT
    ns = (": __main__.Net/blocks.0: __main__.Block/fc: torch.nn.modules.linear.Linear/"
          "linear: aten.linear.default")
    nodes = [_node("MatMul", ["x", "w"], ["h"], "node_MatMul_6", ns),
             _node("Relu", ["h"], ["y"], "n0")]  # no metadata: its own name
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", f, [2, 3])],
                          [helper.make_tensor_value_info("y", f, [2, 4])],
                          [numpy_helper.from_array(np.ones((3, 4), np.float32), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    assert module_path(m.graph.node[0]) == "blocks.0/fc"
    tape = Tape(np.float32)
    imp = import_to_tape(Session(m, fold=False), tape, {"x": np.ones((2, 3), np.float32)})
    names = [n.name for n in tape.nodes if n.op in ("matmul", "relu")]
    assert names[0].startswith("blocks.0/fc/node_MatMul_6")  # the tape drops the lead /
    assert names[1].startswith("n0")
    assert imp.onnx_nodes[0]["name"] == "node_MatMul_6"
