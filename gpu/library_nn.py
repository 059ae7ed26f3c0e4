"""Launch builders of the nn ops of imported ONNX models (core/ops/nn.py): conv2d,
conv_transpose2d (conv2d's kernels with the roles swapped), maxpool2d, avgpool2d, gather
(docs/reference-order-nn.md; erf is a unary of the op table: gpu/library_ew.py).
Window geometry becomes host index maps.

Half precision: the scratch the reference keeps in float32 (pool counts, avgpool's g / count,
conv's per-image weight products and input-gradient columns) is the compute type (``ctx.aux``'s
default), written by ``mm_acc`` (the product unrounded); im2col's columns hold copies of stored
values, so they are the storage type; every result is rounded once (docs/reference-order-nn.md,
"Half precision")."""

from __future__ import annotations

import numpy as np

from tapescope.gpu.device import Launch
from tapescope.gpu.kernel_table import BuildCtx, OpKernels, register_kernels
from tapescope.gpu.library_rows import mm_launch

i64 = np.int64


def _outs(hw: tuple, k: tuple, st: tuple, dil: tuple, padw: list, ceil_mode: int) -> tuple:
    from tapescope.core.ops.nn import out_size

    return tuple(out_size(hw[i], k[i], st[i], dil[i], *padw[i], ceil_mode)
                 for i in range(len(hw)))


def window_maps(hw: tuple, k: tuple, st: tuple, dil: tuple, padw: list, ceil_mode: int):
    """taps [P*T] (input pixel or -1), col2im CSR (tap-major) and output-major CSR. Any number
    of spatial axes (``hw``: their extents): pixels and taps are flattened row-major, so the
    kernels, which see only P, T and pixel numbers, serve 2-D and 3-D windows alike."""
    nd = len(hw)
    outs = _outs(hw, k, st, dil, padw, ceil_mode)
    # per axis, the padded-input position of (output o, tap t): [outs..., k...] broadcast
    inside = np.ones((1,) * (2 * nd), bool)
    flat = np.zeros((1,) * (2 * nd), np.int64)
    for ax in range(nd):
        o = np.arange(outs[ax]).reshape((1,) * ax + (-1,) + (1,) * (2 * nd - ax - 1))
        t = np.arange(k[ax]).reshape((1,) * (nd + ax) + (-1,) + (1,) * (nd - ax - 1))
        pos = o * st[ax] + t * dil[ax] - padw[ax][0]
        inside = inside & (pos >= 0) & (pos < hw[ax])
        flat = flat * hw[ax] + pos
    taps = np.where(inside, flat, -1).astype(np.int64).reshape(
        int(np.prod(outs)), int(np.prod(k)))
    p_n, t_n = taps.shape
    h_w = int(np.prod(hw))
    # col2im: per input pixel, the (t, p) pairs ordered by tap first (the reference's loop)
    t_idx, p_idx = np.meshgrid(np.arange(t_n), np.arange(p_n), indexing="ij")
    src = taps.T.reshape(-1)  # tap-major
    keep = src >= 0
    order = np.argsort(src[keep], kind="stable")
    c_lst = (t_idx.reshape(-1)[keep] * p_n + p_idx.reshape(-1)[keep])[order]
    c_off = np.concatenate([[0], np.cumsum(np.bincount(src[keep], minlength=h_w))])
    # max-pool backward: per input pixel, the outputs covering it in row-major output order
    src2 = taps.reshape(-1)
    keep2 = src2 >= 0
    order2 = np.argsort(src2[keep2], kind="stable")
    o_lst = np.repeat(np.arange(p_n), t_n)[keep2][order2]
    o_off = np.concatenate([[0], np.cumsum(np.bincount(src2[keep2], minlength=h_w))])
    return taps, (c_off.astype(np.int64), c_lst.astype(np.int64)), (
        o_off.astype(np.int64), o_lst.astype(np.int64))


@register_kernels("maxpool2d", "avgpool2d", "maxpool3d", "avgpool3d")
def _pool(op: str) -> OpKernels:
    def setup(ctx: BuildCtx, node):
        from tapescope.core.ops.nn import pool_geom

        x = node.inputs[0]
        n, c, *sp = ctx.shape(x)
        k, st, padw, cm = pool_geom(node.attrs, len(sp))
        taps, col, out = window_maps(tuple(sp), k, st, (1,) * len(sp), padw, cm)
        maps = {"taps": ctx.aux(node.id, "taps", taps),
                "c_off": ctx.aux(node.id, "c_off", col[0]),
                "c_lst": ctx.aux(node.id, "c_lst", col[1]),
                "o_off": ctx.aux(node.id, "o_off", out[0]),
                "o_lst": ctx.aux(node.id, "o_lst", out[1])}
        return (n * c, int(np.prod(sp)), taps.shape[0], taps.shape[1]), maps, (k, st, padw, cm)

    def counts(ctx: BuildCtx, node, geo) -> object:
        from tapescope.core.ops.nn import pool_counts

        k, st, padw, cm = geo
        hw = ctx.shape(node.inputs[0])[2:]
        cnt = pool_counts(np.empty((1, 1) + hw, ctx.compute_dtype), k, st, padw, (1,) * len(hw), cm,
                          int(node.attrs.get("count_include_pad", 0)))
        return ctx.aux(node.id, "cnt", np.asarray(cnt, ctx.compute_dtype).reshape(-1))

    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        (nc, hw, p, t), m, geo = setup(ctx, node)
        x, y = ctx.values[node.inputs[0]], ctx.values[node.id]
        if op.startswith("maxpool"):
            arg = ctx.aux(node.id, "arg", n=nc * p, dtype=np.int64)
            return [ctx.launch("maxpool_fwd", nc * p, x, y, arg, m["taps"], nc, hw, p, t)]
        return [ctx.launch("avgpool_fwd", nc * p, x, y, counts(ctx, node, geo), m["taps"], nc,
                           hw, p, t)]

    def bwd(ctx: BuildCtx, node, k: int) -> list[Launch]:
        (nc, hw, p, t), m, geo = setup(ctx, node)
        g, gx = ctx.grads[node.id], ctx.grads[node.inputs[0]]
        if op.startswith("maxpool"):
            arg = ctx.aux(node.id, "arg", n=nc * p, dtype=np.int64)
            return [ctx.launch("maxpool_bwd", nc * hw, g, arg, gx, m["o_off"], m["o_lst"], nc,
                               hw, p)]
        gd = ctx.aux(node.id, "gd", n=nc * p)
        n, c = ctx.shape(node.inputs[0])[:2]
        return [ctx.launch("avgpool_scale", nc * p, g, counts(ctx, node, geo), gd, nc, p),
                ctx.launch("col2im", nc * hw, gd, gx, m["c_off"], m["c_lst"], n, c, 1, hw, t,
                           p, i64(0))]

    return OpKernels(fwd, bwd)


@register_kernels("conv2d", "conv3d")
def _conv(op: str) -> OpKernels:
    def setup(ctx: BuildCtx, node):
        from tapescope.core.ops.nn import conv_geom

        x, w = node.inputs
        n, c, *sp = ctx.shape(x)
        m, cg, *k = ctx.shape(w)
        st, padw, dil, g = conv_geom(node.attrs, len(sp))
        taps, col, _ = window_maps(tuple(sp), tuple(k), st, dil, padw, 0)
        p, t = taps.shape
        cgk = cg * t
        # [g][n][cg*T + t][p]: copies of x (stored values: the storage type)
        cols = ctx.aux(node.id, "cols", n=g * n * cgk * p, dtype=ctx.dtype)
        maps = (ctx.aux(node.id, "taps", taps), ctx.aux(node.id, "c_off", col[0]),
                ctx.aux(node.id, "c_lst", col[1]))
        return (n, c, int(np.prod(sp)), m, g, t, p, cgk), cols, maps

    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        (n, c, hw, m, g, t, p, cgk), cols, (taps, _, _) = setup(ctx, node)
        xv, wv, y = ctx.values[node.inputs[0]], ctx.values[node.inputs[1]], ctx.values[node.id]
        mg = m // g
        out = [ctx.launch("im2col", n * c * t * p, xv, cols, taps, n, c, g, hw, t, p)]
        for gi in range(g):  # y[n, g*Mg + mm, p] = dot over (c, a, b) of w * cols
            out.append(mm_launch(
                ctx, wv.view(gi * mg * cgk, mg * cgk), cols.view(gi * n * cgk * p, n * cgk * p),
                y.view(gi * mg * p, y.n - gi * mg * p), (n, mg, p, cgk),
                (0, cgk, 1, cgk * p, p, 1), False, syb=m * p))
        return out

    def bwd(ctx: BuildCtx, node, k: int) -> list[Launch]:
        (n, c, hw, m, g, t, p, cgk), cols, (_, c_off, c_lst) = setup(ctx, node)
        x, w = node.inputs
        gy, wv = ctx.grads[node.id], ctx.values[w]
        mg = m // g
        out = []
        if k == 1:  # per_n[n][g*Mg*Cgk + mm*Cgk + t] = dot over p of g * cols; gw = sum over n
            per_n = ctx.aux(node.id, "per_n", n=n * m * cgk)
            for gi in range(g):
                out.append(mm_launch(
                    ctx, gy.view(gi * mg * p, gy.n - gi * mg * p),
                    cols.view(gi * n * cgk * p, n * cgk * p),
                    per_n.view(gi * mg * cgk, per_n.n - gi * mg * cgk), (n, mg, cgk, p),
                    (m * p, p, 1, cgk * p, 1, p), False, syb=m * cgk, kernel="mm_acc"))
            out.append(ctx.launch("batch_sum_add", m * cgk, per_n, ctx.grads[w], n, m * cgk,
                                  m * cgk))
            return out
        # gcols[g][n][t'][p] = dot over mm of w[g*Mg + mm, t'] * g[n, g*Mg + mm, p]; col2im
        gcols = ctx.aux(node.id, "gcols", n=g * n * cgk * p)
        for gi in range(g):
            out.append(mm_launch(
                ctx, wv.view(gi * mg * cgk, mg * cgk), gy.view(gi * mg * p, gy.n - gi * mg * p),
                gcols.view(gi * n * cgk * p, n * cgk * p), (n, cgk, p, mg),
                (0, 1, cgk, m * p, p, 1), False, kernel="mm_acc"))
        out.append(ctx.launch("col2im", n * c * hw, gcols, ctx.grads[x], c_off, c_lst, n, c, g,
                              hw, t, p, i64(1)))
        return out

    return OpKernels(fwd, bwd)


@register_kernels("conv_transpose2d", "conv_transpose3d")
def _conv_transpose(op: str) -> OpKernels:
    """conv2d's kernels with the roles swapped (core/ops/nn.py ``conv_transpose_2d``): the
    forward is conv2d's backward-data (y the conv's image, x its output gradient, w its weight),
    the input gradient conv2d's forward of g, the weight gradient conv2d's with image g."""
    def setup(ctx: BuildCtx, node):
        from tapescope.core.ops.nn import conv_geom

        x, w = node.inputs
        n, c, *isp = ctx.shape(x)
        _, mg, *k = ctx.shape(w)
        _, m, *osp = ctx.shape(node.id)
        st, padw, dil, g = conv_geom(node.attrs, len(isp))
        taps, col, _ = window_maps(tuple(osp), tuple(k), st, dil, padw, 0)
        p, t = taps.shape
        assert p == int(np.prod(isp)), (p, isp)  # the adjoint's windows are x's pixels
        maps = (ctx.aux(node.id, "taps", taps), ctx.aux(node.id, "c_off", col[0]),
                ctx.aux(node.id, "c_lst", col[1]))
        return (n, c, m, int(np.prod(osp)), g, t, p, mg * t), maps

    def im2col_of_g(ctx: BuildCtx, node, geo, taps) -> tuple:
        n, c, m, hw, g, t, p, cgk = geo
        # [g][n][mg*T + t][p]: copies of the stored gradient (the storage type)
        cols = ctx.aux(node.id, "cols", n=g * n * cgk * p, dtype=ctx.dtype)
        return cols, ctx.launch("im2col", n * m * t * p, ctx.grads[node.id], cols, taps, n, m,
                                g, hw, t, p)

    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        geo, (_, c_off, c_lst) = setup(ctx, node)
        n, c, m, hw, g, t, p, cgk = geo
        xv, wv, y = ctx.values[node.inputs[0]], ctx.values[node.inputs[1]], ctx.values[node.id]
        cgc = c // g
        gcols = ctx.aux(node.id, "gcols", n=g * n * cgk * p)
        out = [ctx.launch("fill", node.size, y, ctx.real(0.0), node.size)]  # col2im adds into y
        for gi in range(g):  # gcols[g][n][t'][p] = dot over c of w[g*Cg + c, t'] * x[n, .., p]
            out.append(mm_launch(
                ctx, wv.view(gi * cgc * cgk, cgc * cgk), xv.view(gi * cgc * p, xv.n - gi * cgc * p),
                gcols.view(gi * n * cgk * p, n * cgk * p), (n, cgk, p, cgc),
                (0, 1, cgk, c * p, p, 1), False, kernel="mm_acc"))
        out.append(ctx.launch("col2im", n * m * hw, gcols, y, c_off, c_lst, n, m, g, hw, t, p,
                              i64(1)))
        return out

    def bwd(ctx: BuildCtx, node, k: int) -> list[Launch]:
        geo, (taps, _, _) = setup(ctx, node)
        n, c, m, hw, g, t, p, cgk = geo
        x, w = node.inputs
        cgc = c // g
        cols, im = im2col_of_g(ctx, node, geo, taps)
        out = [im]
        if k == 0:  # gx[n, g*Cg + c, p] += dot over (m, a, b) of w * cols: conv2d(g, w)
            gx, wv = ctx.grads[x], ctx.values[w]
            for gi in range(g):
                out.append(mm_launch(
                    ctx, wv.view(gi * cgc * cgk, cgc * cgk), cols.view(gi * n * cgk * p,
                                                                    n * cgk * p),
                    gx.view(gi * cgc * p, gx.n - gi * cgc * p), (n, cgc, p, cgk),
                    (0, cgk, 1, cgk * p, p, 1), True, syb=c * p))
            return out
        # per_n[n][g*Cg*cgk + c*cgk + t'] = dot over p of x * cols; gw += sum over n
        xv = ctx.values[x]
        per_n = ctx.aux(node.id, "per_n", n=n * c * cgk)
        for gi in range(g):
            out.append(mm_launch(
                ctx, xv.view(gi * cgc * p, xv.n - gi * cgc * p),
                cols.view(gi * n * cgk * p, n * cgk * p),
                per_n.view(gi * cgc * cgk, per_n.n - gi * cgc * cgk), (n, cgc, cgk, p),
                (c * p, p, 1, cgk * p, 1, p), False, syb=c * cgk, kernel="mm_acc"))
        out.append(ctx.launch("batch_sum_add", c * cgk, per_n, ctx.grads[w], n, c * cgk,
                              c * cgk))
        return out

    return OpKernels(fwd, bwd)


def gather_geom(xshape: tuple, k: int, axis: int) -> tuple[int, int, int, int]:
    """(outer, D, K, inner) of a gather along `axis`."""
    ax = axis % len(xshape)
    return (int(np.prod(xshape[:ax], dtype=np.int64)), xshape[ax], k,
            int(np.prod(xshape[ax + 1:], dtype=np.int64)))


@register_kernels("gather")
def _gather(op: str) -> OpKernels:
    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        x, idx = node.inputs
        o, d, k, inn = gather_geom(ctx.shape(x), ctx.nodes[idx].size, node.attrs.get("axis", 0))
        return [ctx.launch("take", node.size, ctx.values[x], ctx.values[idx],
                           ctx.values[node.id], o, d, k, inn)]

    def bwd(ctx: BuildCtx, node, which: int) -> list[Launch]:
        x, idx = node.inputs
        o, d, k, inn = gather_geom(ctx.shape(x), ctx.nodes[idx].size, node.attrs.get("axis", 0))
        return [ctx.launch("take_bwd", o * d * inn, ctx.grads[node.id], ctx.values[idx],
                           ctx.grads[x], o, d, k, inn)]

    return OpKernels(fwd, bwd)
