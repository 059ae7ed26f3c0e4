"""Graph model: kinds, scopes, collapse into group boxes, search."""

from __future__ import annotations

import pytest

from views.graph_model import KIND_CONST, KIND_GROUP, KIND_LOSS, KIND_PARAM, GraphModel, GraphNode


def small_model() -> GraphModel:
    nodes = [
        GraphNode(0, "const", (), "x", (2, 3)),
        GraphNode(1, "param", (), "block0/attn/W", (3, 3)),
        GraphNode(2, "matmul", (0, 1), "block0/attn/q", (2, 3)),
        GraphNode(3, "relu", (2,), "block0/act", (2, 3)),
        GraphNode(4, "mean", (3,), "loss", ()),
    ]
    return GraphModel(nodes, loss_id=4)


def test_kinds_and_scopes():
    m = small_model()
    assert m.kinds.tolist()[:2] == [KIND_CONST, KIND_PARAM] and m.kinds[4] == KIND_LOSS
    assert m.groups == {"block0": [1, 2, 3], "block0/attn": [1, 2]}


def test_collapse_merges_a_scope_into_one_box_with_its_edges():
    m = small_model()
    full = m.display()
    assert len(full) == 5
    m.set_collapsed("block0/attn", True)
    d = m.display()
    assert len(d) == 4
    g = d.item_group.index("block0/attn")
    assert d.kinds[g] == KIND_GROUP and d.labels[g][2] == "2 nodes"
    assert d.node_item[1] == d.node_item[2] == g
    relu = int(d.node_item[3])
    assert d.inputs[relu] == (g,) and d.inputs[g] == (int(d.node_item[0]),)
    assert d.key != full.key
    m.set_collapsed("block0", True)  # the outer scope wins
    d2 = m.display()
    assert len(d2) == 3 and d2.item_group.count("block0") == 1
    with pytest.raises(KeyError, match="nope"):
        m.set_collapsed("nope", True)


def test_search_by_id_op_and_name():
    m = small_model()
    assert m.search("#2") == [2]
    assert m.search("3")[0] == 3
    assert m.search("relu") == [3]
    assert m.search("ATTN") == [1, 2]
    assert m.search("   ") == []
