"""The fused optimizer step: every parameter's SGD / Adam update in ONE launch over a table.

Per element the arithmetic is gpu/kernels/optim.cu's (sgd_T / adam_T) operation for operation:
clip scale, then L2, then the update, the per-step scalars read from the optimizer's own device
buffers (ctl, k). Block j updates parameter j; its threads stride the elements. A fused program
(``Program.attach_fusion`` with a ``FusionRuntime``) swaps the optimizer's per-parameter launches
for this one when it is bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tapescope.gpu.device import Launch
from tapescope.gpu.kernel_facts import PLAIN

if TYPE_CHECKING:
    from tapescope.gpu.program import Program

__all__ = ["OPTIMIZER_TEXT", "OPTIMIZER_FACTS", "FusionRuntime", "fused_optimizer_launches"]

# table rows: Adam [w, g, m, v, n, use_l2], SGD [w, g, n, use_l2]; l2s[j] = T(l2) of param j
OPTIMIZER_TEXT = """
extern "C" __global__ void fzPLANID_adam_T(const long long* tab, const acc_t* l2s,
                                           const acc_t* ctl, const acc_t* k, long long count) {
    for (long long j = blockIdx.x; j < count; j += gridDim.x) {
        real_t* w = (real_t*)(unsigned long long)tab[6 * j];
        const real_t* g = (const real_t*)(unsigned long long)tab[6 * j + 1];
        real_t* m = (real_t*)(unsigned long long)tab[6 * j + 2];
        real_t* v = (real_t*)(unsigned long long)tab[6 * j + 3];
        long long n = tab[6 * j + 4], use_l2 = tab[6 * j + 5];
        real_t l2 = l2s[j];
        for (long long i = threadIdx.x; i < n; i += blockDim.x) {
            real_t gi = g[i];
            if (ctl[1] != (real_t)0) gi = MUL(gi, ctl[0]);
            if (use_l2) gi = ADD(gi, MUL(l2, w[i]));
            real_t mi = ADD(MUL(k[0], m[i]), MUL(k[1], gi));
            real_t vi = ADD(MUL(k[2], v[i]), MUL(k[3], MUL(gi, gi)));
            m[i] = mi;
            v[i] = vi;
            w[i] = SUB(w[i], MUL(k[5], DIV(mi, ADD(SQRT(vi), k[4]))));
        }
    }
}

extern "C" __global__ void fzPLANID_sgd_T(const long long* tab, const acc_t* l2s,
                                          const acc_t* ctl, real_t lr, long long count) {
    for (long long j = blockIdx.x; j < count; j += gridDim.x) {
        real_t* w = (real_t*)(unsigned long long)tab[4 * j];
        const real_t* g = (const real_t*)(unsigned long long)tab[4 * j + 1];
        long long n = tab[4 * j + 2], use_l2 = tab[4 * j + 3];
        real_t l2 = l2s[j];
        for (long long i = threadIdx.x; i < n; i += blockDim.x) {
            real_t gi = g[i];
            if (ctl[1] != (real_t)0) gi = MUL(gi, ctl[0]);
            if (use_l2) gi = ADD(gi, MUL(l2, w[i]));
            w[i] = SUB(w[i], MUL(lr, gi));
        }
    }
}
"""

# for the host launcher (gpu.kernel_facts): block j strides parameter j by threadIdx, no barrier
OPTIMIZER_FACTS = {"fzPLANID_adam_T": PLAIN, "fzPLANID_sgd_T": PLAIN}


def fused_optimizer_launches(prog: Program, opt: Any, stock: list[Launch]) -> list[Launch]:
    """The clip launch (if any) plus one table launch replacing ``stock``'s per-param updates."""
    from tapescope.gpu.optim import SGD, Adam

    state, p = prog.fusion_runtime, prog.fusion
    if getattr(opt, "amp", False):
        return list(stock)  # mixed precision keeps its own launches (check, then updates)
    live = list(opt.live)
    if not live:
        return []
    dev, dt = prog.device, prog.compute_dtype  # scalars: float32 in a half episode
    lead = list(stock[: len(stock) - len(live)])  # clip_norm, when clipping
    l2s = np.array([l2 for _, l2 in live], dtype=np.float64).astype(dt)
    if isinstance(opt, Adam):
        rows = [[prog.value_ptrs[i], prog.grad_ptrs[i], opt.moments[i][0].ptr,
                 opt.moments[i][1].ptr, prog.nodes[i].size, int(l2 != 0.0)] for i, l2 in live]
        name = next(k.name for k in p.kernels if k.role == "optimizer" and "_adam_" in k.name)
    elif isinstance(opt, SGD):
        rows = [[prog.value_ptrs[i], prog.grad_ptrs[i], prog.nodes[i].size, int(l2 != 0.0)]
                for i, l2 in live]
        name = next(k.name for k in p.kernels if k.role == "optimizer" and "_sgd_" in k.name)
    else:
        return list(stock)  # an optimizer we do not know keeps its own launches
    tab = dev.alloc(len(rows) * len(rows[0]), np.int64)
    tab.upload(np.array(rows, dtype=np.int64).reshape(-1))
    lbuf = dev.alloc(len(live), dt)
    lbuf.upload(l2s)
    state.keep += [tab, lbuf]
    kern = state.module[name]
    grid = min(len(live), 4096)
    if isinstance(opt, Adam):
        one = kern.record(grid, 128, tab, lbuf, opt.ctl, opt.k, np.int64(len(live)))
    else:
        one = kern.record(grid, 128, tab, lbuf, opt.ctl, dt.type(opt.lr), np.int64(len(live)))
    return lead + [one]


class FusionRuntime:
    """What a fused program keeps alive: the compiled plan, its pointer table and buffers, and the
    fused optimizer launches built per optimizer (``Program.attach_fusion`` holds it)."""

    def __init__(self, module: Any, table: Any, keep: list) -> None:
        self.module = module
        self.table = table
        self.keep = keep
        self.opt: dict[int, tuple] = {}

    def optimizer_launches(self, prog: Program, opt: Any, stock: list[Launch]) -> list[Launch]:
        """One launch for every parameter's update, built once per (optimizer, stock list)."""
        hit = self.opt.get(id(opt))
        if hit is None or hit[0] is not opt or hit[1] is not stock:
            hit = self.opt[id(opt)] = (opt, stock, fused_optimizer_launches(prog, opt, stock))
        return hit[2]
