"""Launch builders of the elementwise family: every op of the op table with a C form (binaries
with broadcasting, unaries), and the leaves (docs/reference-order.md)."""

from __future__ import annotations

import numpy as np

from tapescope.gpu.device import Buffer, Launch
from tapescope.gpu.kernel_table import (
    LEAF,
    BuildCtx,
    OpKernels,
    broadcast_index,
    register_kernels,
    unb_perm,
)
from tapescope.gpu.optable import BINARY_CODES, UNARY_CODES, scalar_of


# ---- elementwise binaries: every op of the table with a two-input C form ----------------------
@register_kernels(*BINARY_CODES)
def _binary(op: str) -> OpKernels:
    code = np.int64(BINARY_CODES[op])

    def maps(ctx: BuildCtx, node) -> tuple[Buffer, Buffer, int]:
        out = ctx.shape(node.id)
        flags = 0
        bufs = []
        for k, j in enumerate(node.inputs):
            s = ctx.shape(j)
            if s != out:
                flags |= 1 << k
                bufs.append(ctx.aux(node.id, f"idx{k}", broadcast_index(s, out)))
            else:
                bufs.append(ctx.aux(node.id, "none", np.zeros(1, np.int64)))
        return bufs[0], bufs[1], flags

    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        a, b = node.inputs
        ia, ib, flags = maps(ctx, node)
        n = node.size
        return [ctx.launch("binary_fwd", n, code, ctx.values[a], ctx.values[b],
                           ctx.values[node.id], ia, ib, flags, n)]

    def bwd(ctx: BuildCtx, node, k: int) -> list[Launch]:
        a, b = node.inputs
        ia, ib, flags = maps(ctx, node)
        tgt, out = node.inputs[k], ctx.shape(node.id)
        if ctx.shape(tgt) != out:
            perm, r = unb_perm(ctx.shape(tgt), out)
            pbuf = ctx.aux(node.id, f"perm{k}", perm)
            flags |= 4
        else:
            pbuf, r = ctx.aux(node.id, "none", np.zeros(1, np.int64)), 1
        m = ctx.nodes[tgt].size
        return [ctx.launch("binary_bwd", m, code, np.int64(k), ctx.values[a], ctx.values[b],
                           ctx.values[node.id], ctx.grads[node.id], ctx.grads[tgt], ia, ib,
                           flags, pbuf, r, m)]

    return OpKernels(fwd, bwd)


# ---- unaries: every op of the table with a one-input C form -----------------------------------
@register_kernels(*UNARY_CODES)
def _unary(op: str) -> OpKernels:
    code = np.int64(UNARY_CODES[op])

    def scalar(ctx: BuildCtx, node) -> np.generic:
        return ctx.real(scalar_of(op, node.attrs))  # the op table's {s}, rounded once to T

    def fwd(ctx: BuildCtx, node) -> list[Launch]:
        (x,) = node.inputs
        return [ctx.launch("unary_fwd", node.size, code, ctx.values[x], ctx.values[node.id],
                           scalar(ctx, node), node.size)]

    def bwd(ctx: BuildCtx, node, k: int) -> list[Launch]:
        (x,) = node.inputs
        return [ctx.launch("unary_bwd", node.size, code, ctx.values[x], ctx.values[node.id],
                           ctx.grads[node.id], ctx.grads[x], scalar(ctx, node), node.size)]

    return OpKernels(fwd, bwd)


@register_kernels("param", "const")
def _leaf(op: str) -> OpKernels:
    return OpKernels(LEAF, LEAF)
