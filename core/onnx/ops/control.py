"""Control flow (If, Loop, Scan), sequences and optionals. Subgraphs run through ``ctx.run_graph``.
"""

from __future__ import annotations

import numpy as np

from tapescope.core.onnx.registry import as_int_list, op


@op("If")
def if_(ctx, cond, then_branch=None, else_branch=None):
    g = then_branch if bool(np.asarray(cond).reshape(-1)[0]) else else_branch
    return tuple(ctx.run_graph(g, [], ctx.scope))


@op("Loop")
def loop(ctx, trip=None, cond=None, *carried, body=None):
    n_carried = len(carried)
    max_trip = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
    keep = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    state = list(carried)
    scans: list[list] = []
    i = 0
    while keep and (max_trip is None or i < max_trip):
        ctx.iterate()
        outs = ctx.run_graph(body, [np.array(i, np.int64), np.array(keep)] + state, ctx.scope)
        keep = bool(np.asarray(outs[0]).reshape(-1)[0])
        state = list(outs[1:1 + n_carried])
        for j, v in enumerate(outs[1 + n_carried:]):
            if len(scans) <= j:
                scans.append([])
            scans[j].append(v)
        i += 1
    for s in scans:
        ctx.check_elements(sum(np.asarray(v).size for v in s), "a stacked scan output")
    n_scan = len(body.outputs) - 1 - n_carried
    stacked = [np.stack(s) if s else np.zeros((0,), np.float32) for s in scans]
    stacked += [np.zeros((0,), np.float32)] * (n_scan - len(stacked))
    return tuple(state + stacked)


@op("Scan")
def scan(ctx, *inputs, body=None, num_scan_inputs=0, scan_input_axes=None,
         scan_input_directions=None, scan_output_axes=None, scan_output_directions=None):
    if ctx.opset < 9:
        raise ValueError("Scan before opset 9 (with sequence_lens) is not supported")
    m = num_scan_inputs
    n = len(inputs) - m
    state = list(inputs[:n])
    xs = list(inputs[n:])
    in_axes = list(scan_input_axes or [0] * m)
    in_dirs = list(scan_input_directions or [0] * m)
    steps = xs[0].shape[in_axes[0] % xs[0].ndim] if m else 0
    outs_seq: list[list] = []
    for t in range(steps):
        ctx.iterate()
        sl = []
        for x, ax, d in zip(xs, in_axes, in_dirs, strict=False):
            ax %= x.ndim
            sl.append(np.take(x, steps - 1 - t if d else t, axis=ax))
        outs = ctx.run_graph(body, state + sl, ctx.scope)
        state = list(outs[:n])
        for j, v in enumerate(outs[n:]):
            if len(outs_seq) <= j:
                outs_seq.append([])
            outs_seq[j].append(v)
    k = len(body.outputs) - n
    out_axes = list(scan_output_axes or [0] * k)
    out_dirs = list(scan_output_directions or [0] * k)
    stacked = []
    for j in range(k):
        seq = outs_seq[j] if j < len(outs_seq) else []
        ctx.check_elements(sum(np.asarray(v).size for v in seq), "a stacked scan output")
        if out_dirs[j]:
            seq = seq[::-1]
        y = np.stack(seq)
        stacked.append(np.moveaxis(y, 0, out_axes[j] % y.ndim))
    return tuple(state + stacked)


# ---- sequences ------------------------------------------------------------------------------

@op("SequenceConstruct")
def seq_construct(ctx, *xs):
    return list(xs)


@op("SequenceEmpty")
def seq_empty(ctx, dtype=None):
    return []


@op("SequenceAt")
def seq_at(ctx, seq, pos):
    return seq[int(np.asarray(pos).reshape(-1)[0])]


@op("SequenceLength")
def seq_length(ctx, seq):
    return np.array(len(seq), np.int64)


@op("SequenceInsert")
def seq_insert(ctx, seq, x, pos=None):
    out = list(seq)
    if pos is None:
        out.append(x)
    else:
        out.insert(int(np.asarray(pos).reshape(-1)[0]), x)
    return out


@op("SequenceErase")
def seq_erase(ctx, seq, pos=None):
    out = list(seq)
    del out[-1 if pos is None else int(np.asarray(pos).reshape(-1)[0])]
    return out


@op("ConcatFromSequence")
def concat_from_seq(ctx, seq, axis=0, new_axis=0):
    return np.stack(seq, axis=axis) if new_axis else np.concatenate(seq, axis=axis)


@op("SplitToSequence")
def split_to_seq(ctx, x, split=None, axis=0, keepdims=1):
    ax = axis % x.ndim
    if split is None:
        parts = np.split(x, x.shape[ax], axis=ax)
        return [np.squeeze(p, ax) for p in parts] if not keepdims else parts
    sizes = as_int_list(split)
    if np.asarray(split).ndim == 0:
        d = x.shape[ax]
        sizes = [sizes[0]] * (d // sizes[0]) + ([d % sizes[0]] if d % sizes[0] else [])
    return np.split(x, np.cumsum(sizes)[:-1], axis=ax)


@op("SequenceMap")
def seq_map(ctx, seq, *others, body=None):
    outs: list[list] = []
    for i in range(len(seq)):
        ctx.iterate()
        extra = [o[i] if isinstance(o, list) else o for o in others]
        res = ctx.run_graph(body, [seq[i]] + extra, ctx.scope)
        for j, v in enumerate(res):
            if len(outs) <= j:
                outs.append([])
            outs[j].append(v)
    return tuple(outs)


# ---- optionals (None is the empty optional) -------------------------------------------------

@op("Optional")
def optional(ctx, x=None, type=None):  # noqa: A002 - ONNX name
    return x


@op("OptionalHasElement")
def optional_has(ctx, x=None):
    return np.array(x is not None)


@op("OptionalGetElement")
def optional_get(ctx, x):
    if x is None:
        raise ValueError("OptionalGetElement on an empty optional")
    return x
