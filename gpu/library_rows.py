"""Launch builders of reductions, matmul/bmm, data movement and the row ops of the op table."""

from __future__ import annotations

import numpy as np

from tapescope.core.ops.reduce import count as reduce_count
from tapescope.core.ops.reduce import reduced_axes
from tapescope.core.optable.registry import norm_axis
from tapescope.gpu import rowtable
from tapescope.gpu.device import Launch
from tapescope.gpu.kernel_table import BuildCtx, OpKernels, register_kernels

i64 = np.int64


# ---- sum / mean --------------------------------------------------------------------------------
def _reduce_maps(shape: tuple, attrs) -> tuple[np.ndarray, np.ndarray, int, int]:
    axes = list(reduced_axes(shape, attrs.get("axis")))
    keep = [a for a in range(len(shape)) if a not in axes]
    n = int(np.prod(shape, dtype=np.int64))
    r = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    m = int(np.prod([shape[a] for a in keep], dtype=np.int64))
    perm = np.ascontiguousarray(
        np.arange(n, dtype=np.int64).reshape(shape).transpose(keep + axes)).reshape(-1)
    slot = np.empty(n, dtype=np.int64)
    slot[perm] = np.repeat(np.arange(m, dtype=np.int64), r)
    return perm, slot, r, m


@register_kernels("sum", "mean")
def _reduce(op: str) -> OpKernels:
    mean = i64(op == "mean")

    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        (x,) = node.inputs
        perm, _, r, m = _reduce_maps(ctx.shape(x), node.attrs)
        n = ctx.real(reduce_count(ctx.shape(x), node.attrs))
        return [ctx.launch("reduce_fwd", m, ctx.values[x], ctx.values[node.id],
                           ctx.aux(node.id, "perm", perm), r, m, mean, n)]

    def bwd(ctx: BuildCtx, node, k: int) -> list[Launch]:
        (x,) = node.inputs
        _, slot, _, _ = _reduce_maps(ctx.shape(x), node.attrs)
        n = ctx.real(reduce_count(ctx.shape(x), node.attrs))
        size = ctx.nodes[x].size
        return [ctx.launch("reduce_bwd", size, ctx.grads[node.id], ctx.grads[x],
                           ctx.aux(node.id, "slot", slot), mean, n, size)]

    return OpKernels(fwd, bwd)


# ---- matmul / bmm: one strided kernel --------------------------------------------------------
def mm_launch(ctx: BuildCtx, a, b, y, dims: tuple, strides: tuple, acc: bool,
              syb: int | None = None, kernel: str = "mm") -> Launch:
    """y[bi] (+)= a[bi] @ b[bi] for strided operands; y rows contiguous, batch stride syb.
    ``kernel="mm_acc"``: y in the compute type, unrounded (gpu/source.py)."""
    bsz, m, n, k = dims
    tiles = bsz * (-(-m // 4)) * (-(-n // 4))  # one thread per 4x4 output tile (TS_MM)
    return ctx.launch(kernel, tiles, a, b, y, bsz, m, n, k, *strides,
                      m * n if syb is None else syb, i64(acc))


_mm = mm_launch


@register_kernels("matmul")
def _matmul(op: str) -> OpKernels:
    def geom(ctx: BuildCtx, node) -> tuple[int, int, int]:
        a, b = node.inputs
        kk, nn = ctx.shape(b)
        return ctx.nodes[a].size // kk, kk, nn

    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        a, b = node.inputs
        r, k, n = geom(ctx, node)
        return [_mm(ctx, ctx.values[a], ctx.values[b], ctx.values[node.id], (1, r, n, k),
                    (0, k, 1, 0, n, 1), False)]

    def bwd(ctx: BuildCtx, node, which: int) -> list[Launch]:
        a, b = node.inputs
        r, k, n = geom(ctx, node)
        g = ctx.grads[node.id]
        if which == 0:  # ga[r, k] = dot over n of g[r, n] * b[k, n]
            return [_mm(ctx, g, ctx.values[b], ctx.grads[a], (1, r, k, n),
                        (0, n, 1, 0, 1, n), True)]
        # gb[k, n] = dot over rows r of a[r, k] * g[r, n]
        return [_mm(ctx, ctx.values[a], g, ctx.grads[b], (1, k, n, r), (0, 1, k, 0, n, 1), True)]

    return OpKernels(fwd, bwd)


@register_kernels("bmm")
def _bmm(op: str) -> OpKernels:
    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        a, b = node.inputs
        bs, m, k = ctx.shape(a)
        n = ctx.shape(b)[2]
        return [_mm(ctx, ctx.values[a], ctx.values[b], ctx.values[node.id], (bs, m, n, k),
                    (m * k, k, 1, k * n, n, 1), False)]

    def bwd(ctx: BuildCtx, node, which: int) -> list[Launch]:
        a, b = node.inputs
        bs, m, k = ctx.shape(a)
        n = ctx.shape(b)[2]
        g = ctx.grads[node.id]
        if which == 0:  # ga = g @ b^T per batch: dot over n
            return [_mm(ctx, g, ctx.values[b], ctx.grads[a], (bs, m, k, n),
                        (m * n, n, 1, k * n, 1, n), True)]
        # gb = a^T @ g per batch: dot over m
        return [_mm(ctx, ctx.values[a], g, ctx.grads[b], (bs, k, n, m),
                    (m * k, 1, k, m * n, n, 1), True)]

    return OpKernels(fwd, bwd)


# ---- data movement -----------------------------------------------------------------------------
def _inverse(idx: np.ndarray, size: int) -> np.ndarray:
    inv = np.full(size, -1, dtype=np.int64)
    inv[idx] = np.arange(idx.size, dtype=np.int64)
    return inv


def _positions(shape: tuple) -> np.ndarray:
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)


@register_kernels("transpose", "slice")
def _gathered(op: str) -> OpKernels:
    def index(ctx: BuildCtx, node) -> np.ndarray:
        (x,) = node.inputs
        shape, at = ctx.shape(x), node.attrs
        pos = _positions(shape)
        if op == "transpose":
            axes = at.get("axes")
            axes = tuple(range(len(shape)))[::-1] if axes is None else tuple(
                norm_axis(a, len(shape)) for a in axes)
            return np.ascontiguousarray(pos.transpose(axes)).reshape(-1)
        ax = norm_axis(at["axis"], len(shape))
        sl = (slice(None),) * ax + (slice(at["start"], at["stop"]),)
        return np.ascontiguousarray(pos[sl]).reshape(-1)

    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        (x,) = node.inputs
        idx = ctx.aux(node.id, "idx", index(ctx, node))
        return [ctx.launch("gather", node.size, ctx.values[x], ctx.values[node.id], idx,
                           node.size)]

    def bwd(ctx: BuildCtx, node, k: int) -> list[Launch]:
        (x,) = node.inputs
        size = ctx.nodes[x].size
        # slice: positions outside the range read -1 and add +0.0, as the contract says
        inv = ctx.aux(node.id, "inv", _inverse(index(ctx, node), size))
        return [ctx.launch("gather_add", size, ctx.grads[node.id], ctx.grads[x], inv, size)]

    return OpKernels(fwd, bwd)


@register_kernels("reshape")
def _reshape(op: str) -> OpKernels:
    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        return [ctx.launch("copy", node.size, ctx.values[node.inputs[0]], ctx.values[node.id],
                           node.size)]

    def bwd(ctx: BuildCtx, node, k: int) -> list[Launch]:
        return [ctx.launch("add_into", node.size, ctx.grads[node.id],
                           ctx.grads[node.inputs[0]], node.size)]

    return OpKernels(fwd, bwd)


@register_kernels("concat")
def _concat(op: str) -> OpKernels:
    def index(ctx: BuildCtx, node, k: int) -> np.ndarray:
        """The output positions of input k, in O(its size): a concat of 200,000 inputs once
        summed the widths before each input and indexed the whole output per input
        (quadratic: minutes)."""
        out = ctx.shape(node.id)
        ax = norm_axis(node.attrs["axis"], len(out))
        offs = ctx.__dict__.setdefault("_concat_offsets", {})
        if node.id not in offs:  # each input's offset on the axis, computed once per node
            offs[node.id] = np.cumsum([0] + [ctx.shape(j)[ax] for j in node.inputs])
        off, w = int(offs[node.id][k]), ctx.shape(node.inputs[k])[ax]
        pre = int(np.prod(out[:ax], dtype=np.int64))
        post = int(np.prod(out[ax + 1:], dtype=np.int64))
        idx = (np.arange(pre, dtype=np.int64)[:, None, None] * (out[ax] * post)
               + (off + np.arange(w, dtype=np.int64))[None, :, None] * post
               + np.arange(post, dtype=np.int64)[None, None, :])
        return idx.reshape(-1)

    def idx_of(ctx: BuildCtx, node, k: int):
        if (node.id, f"idx{k}") in ctx.aux_buffers:  # made by fwd: not indexed again
            return ctx.aux_buffers[node.id, f"idx{k}"]
        return ctx.aux(node.id, f"idx{k}", index(ctx, node, k))

    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        out = []
        for k, j in enumerate(node.inputs):
            n = ctx.nodes[j].size
            idx = idx_of(ctx, node, k)
            out.append(ctx.launch("scatter", n, ctx.values[j], ctx.values[node.id], idx, n))
        return out

    def bwd(ctx: BuildCtx, node, k: int) -> list[Launch]:
        j = node.inputs[k]
        n = ctx.nodes[j].size
        idx = idx_of(ctx, node, k)
        return [ctx.launch("gather_add", n, ctx.grads[node.id], ctx.grads[j], idx, n)]

    return OpKernels(fwd, bwd)


# ---- row ops: every op of the table with a row form (gpu/rowtable.py renders the kernels) -----
@register_kernels(*rowtable.ROW_OPS)
def _rows(op: str) -> OpKernels:
    f = rowtable.form(op)
    names = rowtable.kernel_names(op)
    first_row = next(k for k, (_, kind) in enumerate(f.ins) if kind == "row")

    def geom(ctx: BuildCtx, node) -> tuple[tuple, int, int, int]:
        s = ctx.shape(node.inputs[first_row])
        ax = norm_axis(node.attrs.get(f.axis, -1), len(s)) if f.axis else len(s) - 1
        outer = int(np.prod(s[:ax], dtype=np.int64))
        inner = int(np.prod(s[ax + 1:], dtype=np.int64))
        return s, outer * inner, s[ax], inner

    def common(ctx: BuildCtx, node, out: list, reduce: bool = False) -> list:
        s, r, L, inner = geom(ctx, node)
        kept = [ctx.aux(node.id, f"keep_{k}", n=max(r, 1)) for k in f.keep]
        tabs = []
        if f.make_tables is not None:
            arrays = f.make_tables(s, node.attrs, ctx.compute_dtype)
            tabs = [ctx.aux(node.id, f"table_{t}", a) for t, a in zip(f.tables, arrays,
                                                                     strict=True)]
        p = s[-2] if f.tables else 1
        return ([ctx.values[j] for j in node.inputs] + out + kept + tabs
                + [r, L, inner, p, i64(reduce), ctx.real(L), ctx.real(r)]
                + [ctx.real(fn(node.attrs)) for _, fn in f.scalars])

    def items(ctx: BuildCtx, node, p) -> int:
        _, r, L, _ = geom(ctx, node)
        return r if p.steps else r * (L // 2 if f.pair else L)

    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        _, r, _, _ = geom(ctx, node)
        if not f.total:
            return [ctx.launch(names["fwd"], items(ctx, node, f.fwd),
                               *common(ctx, node, [ctx.values[node.id]]))]
        rows = ctx.aux(node.id, "rows", n=max(r, 1))  # one value per row, then their mean
        return [ctx.launch(names["fwd"], r, *common(ctx, node, [rows])),
                ctx.single(names["total"], rows, ctx.values[node.id], r, ctx.real(r))]

    def bwd(ctx: BuildCtx, node, k: int) -> list[Launch]:
        p = f.bwd[k]
        assert p is not None
        s, _, L, _ = geom(ctx, node)
        col = f.ins[k][1] == "col"  # serial over rows into each column unless the shapes agree
        args = common(ctx, node, [ctx.values[node.id], ctx.grads[node.id],
                                  ctx.grads[node.inputs[k]]],
                      reduce=col and s != ctx.shape(node.inputs[k]))
        return [ctx.launch(names[f"bwd{k}"], L if col else items(ctx, node, p), *args)]

    return OpKernels(fwd, bwd)
