"""Layout of real models (views/models/layout.py, no Qt): weights and constant subtrees sit
just above the layer that reads them, so resnet50 is a tall column, not a 48,000-unit-wide row
of weights."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import onnx

from tapescope.views.models.layout import NODE_W, assign_ranks, layered_layout

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def test_a_constant_subtree_is_pulled_down_to_just_above_its_consumer():
    # 0 x -> 1 relu -> 2 relu -> 3 relu -> 6 add(3, 5); 4 w (source) -> 5 reshape(w)
    inputs = [(), (0,), (1,), (2,), (), (4,), (3, 5)]
    r = assign_ranks(inputs).tolist()
    assert r[6] == 4 and r[5] == 3 and r[4] == 2  # beside the layer, not on ranks 0 and 1
    assert all(r[u] < r[v] for v, ins in enumerate(inputs) for u in ins)


def _widths(inputs):
    rank = assign_ranks(inputs)
    assert all(rank[u] < rank[v] for v, ins in enumerate(inputs) for u in ins)
    return max(Counter(rank.tolist()).values()), layered_layout(inputs).width


def test_resnet50_read_only_and_imported_is_a_column_not_a_fan_of_weights():
    from tapescope.app.onnx_view import onnx_tape_view
    from tapescope.core import Tape
    from tapescope.core.onnx import Session, default_inputs
    from tapescope.core.onnx.importer import import_to_tape

    path = os.path.join(LIGHT, "light_resnet50.onnx")
    view, _ = onnx_tape_view(path)  # ConstantOfShape weights: op nodes with a shape input
    widest, width = _widths([n.inputs for n in view.nodes])
    assert widest <= 16 and width < 30 * NODE_W, (widest, width)  # was 240 nodes, 48,030 units
    sess = Session(path, fold=False)
    tape = Tape(np.float32)
    import_to_tape(sess, tape, default_inputs(sess, 0))
    widest, width = _widths([n.inputs for n in tape.nodes])
    assert widest <= 16 and width < 30 * NODE_W, (widest, width)  # was 215 nodes, 43,852 units
