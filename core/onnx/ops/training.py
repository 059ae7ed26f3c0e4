"""ai.onnx.preview.training: Adagrad, Momentum, Adam (the spec's formulas). Gradient, which
records the forward subgraph on a tape through the importer, is core/onnx/gradient.py: it sits
above the importer, which sits above the executor and this table."""

from __future__ import annotations

import numpy as np

from tapescope.core.onnx.registry import op

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
