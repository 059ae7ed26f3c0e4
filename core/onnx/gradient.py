"""ai.onnx.preview.training's Gradient: dy/dx by recording the forward subgraph on a tape (the
importer) and running the tape's backward.

It sits above the importer, which sits above the executor and the op table (core.onnx.ops): as
one of the table's families it closed an import ring executor -> ops -> importer -> executor.
core/onnx/__init__ registers it, and every module of core.onnx loads that first.
"""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tapescope.core import ops
from tapescope.core.onnx.importer import import_to_tape
from tapescope.core.onnx.ops.training import TRAINING
from tapescope.core.onnx.registry import op
from tapescope.core.tape import Tape


@op("Gradient", domain=TRAINING)
def gradient(ctx, *ins, xs=(), y="", zs=None):
    """dy/dx for each x in ``xs``: the nodes that compute y are recorded on a tape (x as params)
    and the tape's backward runs from sum(y)."""
    env = ctx.scope
    needed, frontier = [], {y}
    for st in reversed(ctx.graph.steps):
        if st.node is ctx.node:
            continue
        if any(o in frontier for o in st.node.output):
            needed.append(st.node)
            frontier.update(i for i in st.node.input if i)
    needed.reverse()
    leaves = sorted(n for n in frontier if n not in {o for nd in needed for o in nd.output})
    dtype = np.asarray(env[xs[0]]).dtype
    inits = [numpy_helper.from_array(np.asarray(env[n]), n) for n in leaves if n in xs]
    feeds = {n: np.asarray(env[n]) for n in leaves if n not in xs}
    g = helper.make_graph(
        needed, "gradient",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in feeds.items()],
        [helper.make_tensor_value_info(y, helper.np_dtype_to_tensor_dtype(dtype),
                                       np.shape(env[y]) if y in env else ["n"])],
        inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", ctx.opset_default)])
    tape = Tape(np.float64 if dtype == np.float64 else np.float32)
    imp = import_to_tape(model, tape, feeds, wrt=tuple(x for x in xs if x in leaves))
    tape.backward(ops.sum(imp.outputs[y]))
    return tuple(np.asarray(tape.grad(imp.params[x]) if x in imp.params else
                            np.zeros_like(env[x])).astype(dtype) for x in xs)
