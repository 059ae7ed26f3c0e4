"""Graph model: kinds, scopes, collapse into group boxes, search."""

from __future__ import annotations

import pytest

from tapescope.views.models.graph_model import (
    KIND_CONST,
    KIND_GROUP,
    KIND_LOSS,
    KIND_PARAM,
    GraphModel,
    GraphNode,
)


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


# ---- the column-wise display() holds to the per-node loop it replaced (issue 29) ---------------
def loop_display(m: GraphModel):
    """The former ``display()``: one pass per node, a set of inputs per item (the oracle)."""
    from tapescope.views.models.graph_model import scopes_of, shape_text

    groups: dict[str, list[int]] = {}
    for nd in m.nodes:
        for s in scopes_of(nd.name):
            groups.setdefault(s, []).append(nd.id)
    groups.update({k: sorted(v) for k, v in m.extra_groups.items()})
    owner: dict[int, str] = {}
    for g in sorted(m.collapsed, key=len, reverse=True):
        for i in groups.get(g, ()):
            owner[i] = g
    item_node, item_group, group_item, node_item = [], [], {}, {}
    for nd in m.nodes:
        g = owner.get(nd.id)
        if g is None:
            node_item[nd.id] = len(item_node)
            item_node.append(nd.id)
            item_group.append(None)
        else:
            if g not in group_item:
                group_item[g] = len(item_node)
                item_node.append(-1)
                item_group.append(g)
            node_item[nd.id] = group_item[g]
    ins = [set() for _ in item_node]
    for nd in m.nodes:
        for i in nd.inputs:
            if node_item[i] != node_item[nd.id]:
                ins[node_item[nd.id]].add(node_item[i])
    labels, order_key = [], []
    for it, nid in enumerate(item_node):
        if nid >= 0:
            nd = m.nodes[nid]
            name = nd.name or f"#{nid}"
            labels.append((nd.op, name + f"#{nid}" if name.endswith("/") else name,
                           shape_text(nd.shape)))
            order_key.append(nid)
        else:
            g = item_group[it]
            labels.append(("▸ group", g, f"{len(groups[g])} nodes"))
            order_key.append(min(groups[g]))
    return (groups, item_node, item_group, [tuple(sorted(s)) for s in ins], labels, order_key,
            [node_item[i] for i in range(len(m.nodes))])


@pytest.mark.parametrize("seed", range(4))
def test_display_is_the_per_node_loops_display(seed):
    import numpy as np

    from tapescope.views.models.synthetic import transformer_like

    ops, ins, names = transformer_like(700, seed=seed)
    rng = np.random.default_rng(seed)
    names = [None if rng.random() < 0.05 else nm + "/" if rng.random() < 0.05 else nm
             for nm in names]
    ins = [i + i[:1] if rng.random() < 0.1 else i for i in ins]  # an input twice (x * x)
    m = GraphModel([GraphNode(i, o, tuple(x), nm, (i % 3, 2)[: i % 3]) for i, (o, x, nm) in
                    enumerate(zip(ops, ins, names, strict=True))], loss_id=len(ops) - 1)
    m.set_extra_groups({"fused/k0": [40, 41, 42, 60]})
    scopes = sorted(g for g in m.groups if g not in m.runs)  # (runs: test_fold_levels_*)
    m.collapsed = {g for g in scopes if rng.random() < 0.3} | ({"fused/k0"} if seed % 2 else set())
    groups, item_node, item_group, inputs, labels, order_key, node_item = loop_display(m)
    d = m.display()
    assert {g: v for g, v in m.groups.items() if g not in m.runs} == groups
    assert d.item_node == item_node and d.item_group == item_group
    assert d.inputs == inputs and d.labels == labels and d.order_key == order_key
    assert d.node_item.tolist() == node_item
    m.collapsed = set()
    assert m.display().key == GraphModel(m.nodes, m.loss_id).display().key != d.key
