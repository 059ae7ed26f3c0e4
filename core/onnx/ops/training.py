"""ai.onnx.preview.training: Adagrad, Momentum, Adam (the spec's formulas) and Gradient, which
records the forward subgraph on a tape and runs the tape's backward."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from core.onnx.registry import op

TRAINING = "ai.onnx.preview.training"


def _groups(ins, k):
    """(r, t, [group0 tensors...], ...) for k tensor groups of n tensors each."""
    r, t = np.asarray(ins[0]).reshape(()), np.asarray(ins[1]).reshape(())
    rest = ins[2:]
    n = len(rest) // k
    return r, t, [rest[i * n:(i + 1) * n] for i in range(k)], n


@op("Adagrad", domain=TRAINING)
def adagrad(ctx, *ins, decay_factor=0.0, epsilon=0.0, norm_coefficient=0.0):
    r, t, (xs, gs, hs), n = _groups(ins, 3)
    rr = r / (1 + t * decay_factor)
    outx, outh = [], []
    for x, g, h in zip(xs, gs, hs, strict=True):
        gr = norm_coefficient * x + g
        hn = h + gr * gr
        outx.append((x - rr * gr / (np.sqrt(hn) + epsilon)).astype(x.dtype))
        outh.append(hn.astype(h.dtype))
    return tuple(outx + outh)


@op("Momentum", domain=TRAINING)
def momentum(ctx, *ins, alpha=0.0, beta=0.0, mode="standard", norm_coefficient=0.0):
    r, t, (xs, gs, vs), n = _groups(ins, 3)
    outx, outv = [], []
    for x, g, v in zip(xs, gs, vs, strict=True):
        gr = norm_coefficient * x + g
        vn = alpha * v + (beta if t > 0 else 1) * gr
        xn = x - r * (gr + alpha * vn) if mode == "nesterov" else x - r * vn
        outx.append(xn.astype(x.dtype))
        outv.append(vn.astype(v.dtype))
    return tuple(outx + outv)


@op("Adam", domain=TRAINING)
def adam(ctx, *ins, alpha=0.9, beta=0.999, epsilon=0.0, norm_coefficient=0.0,
         norm_coefficient_post=0.0):
    r, t, (xs, gs, vs, hs), n = _groups(ins, 4)
    ra = r * np.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
    outx, outv, outh = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs, strict=True):
        gr = norm_coefficient * x + g
        vn = alpha * v + (1 - alpha) * gr
        hn = beta * h + (1 - beta) * (gr * gr)
        xn = (1 - norm_coefficient_post) * (x - ra * (vn / (np.sqrt(hn) + epsilon)))
        outx.append(xn.astype(x.dtype))
        outv.append(vn.astype(v.dtype))
        outh.append(hn.astype(h.dtype))
    return tuple(outx + outv + outh)


@op("Gradient", domain=TRAINING)
def gradient(ctx, *ins, xs=(), y="", zs=None):
    """dy/dx for each x in ``xs``: the nodes that compute y are recorded on a tape (x as params)
    and the tape's backward runs from sum(y)."""
    from core import Tape, ops
    from core.onnx.importer import import_to_tape

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


@op("StringNormalizer")
def string_normalizer(ctx, x, case_change_action="NONE", is_case_sensitive=0, locale="",
                      stopwords=None):
    flat = [str(s) for s in np.asarray(x).reshape(-1)]
    stop = set(stopwords or [])
    if is_case_sensitive:
        keep = [s for s in flat if s not in stop]
    else:
        low = {w.lower() for w in stop}
        keep = [s for s in flat if s.lower() not in low]
    if case_change_action == "LOWER":
        keep = [s.lower() for s in keep]
    elif case_change_action == "UPPER":
        keep = [s.upper() for s in keep]
    if not keep:
        keep = [""]
    out = np.array(keep, dtype=object)
    return out.reshape(1, -1) if np.asarray(x).ndim == 2 else out
