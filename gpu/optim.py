"""Device optimizers: gpu.SGD / gpu.Adam mirror core.optim operation for operation.

Per-parameter L2, global-norm clipping, skipped parameters (those backward never reaches: known
statically from the captured graph) and Adam's bias correction computed on the host in float64
then rounded to the tape dtype — docs/reference-order.md, Optimizers. The per-step scalars are
staged into a small device buffer before the launches run (`Device.stage`: from pinned memory on
cuda), so the launches themselves never change and an episode is captured as a CUDA graph once.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from core import optim as core_optim
from core.tape import Var
from gpu.device import Buffer, Launch

__all__ = ["SGD", "Adam", "from_core"]


class _DeviceOptimizer:
    """Shared parts: parameters with their L2, clipping, the step counter, the bound program."""

    kind = "abstract"

    def __init__(self, lr: float, clip: float | None = None) -> None:
        self.lr = float(lr)
        self.clip = None if clip is None else float(clip)
        self.t = 0
        self.params: list[tuple[int, float]] = []  # (node id, l2) in the order added
        self._prog: Any = None
        self._launches: list[Launch] = []

    def add(self, param: Var | int, l2: float = 0.0) -> None:
        """Optimize a parameter (Var or node id) with its own L2 coefficient."""
        i = param.id if isinstance(param, Var) else int(param)
        if any(p == i for p, _ in self.params):
            raise ValueError(f"parameter node {i} was added twice")
        if self._prog is not None:
            raise RuntimeError("parameters must be added before the first step")
        self.params.append((i, float(l2)))

    def add_all(self, prog: Any, l2: float = 0.0) -> None:
        """Add every parameter of a captured program (tape order)."""
        for i in prog.param_ids():
            self.add(i, l2)

    # ---- binding to a program (once) ---------------------------------------------------------
    def prepare(self, prog: Any) -> list[Launch]:
        """Advance the step, upload this step's scalars; return the (fixed) launch list."""
        if self._prog is None:
            self._bind(prog)
        elif self._prog is not prog:
            raise RuntimeError("this optimizer is bound to another program")
        self.t += 1
        self._upload_scalars()
        return self._launches

    def _bind(self, prog: Any) -> None:
        ctx, dt = prog.ctx, prog.compute_dtype  # ctl holds scalars: float32 when half
        for i, _ in self.params:
            if prog.nodes[i].op != "param":
                raise ValueError(f"node {i} {prog.nodes[i].op} is not a parameter")
        # skipped: never reached by backward (the tape's grad stays None)
        self.live = [(i, l2) for i, l2 in self.params if prog.grads[i] is not None]
        self.ctl: Buffer = prog.device.alloc(2, dt)
        self.ctl.upload(np.array([1, 0], dtype=dt))
        launches = []
        if self.clip is not None and self.live:
            table = np.array([[prog.grad_ptrs[i], prog.nodes[i].size] for i, _ in self.live],
                             dtype=np.int64).reshape(-1)
            tbuf = prog.device.alloc(table.size, np.int64)
            tbuf.upload(table)
            self._keep = tbuf
            launches.append(ctx.single("clip_norm", tbuf, len(self.live), ctx.real(self.clip),
                                       self.ctl))
        self._setup(prog)
        for i, l2 in self.live:
            launches.append(self._update(prog, i, l2))
        self._launches = launches
        self._prog = prog
        prog._opt_launches = len(launches)

    def _setup(self, prog: Any) -> None:
        pass

    def _update(self, prog: Any, i: int, l2: float) -> Launch:
        raise NotImplementedError

    def _upload_scalars(self) -> None:
        pass


class SGD(_DeviceOptimizer):
    """w = w - lr * g (after clipping and L2)."""

    kind = "sgd"

    def _update(self, prog: Any, i: int, l2: float) -> Launch:
        ctx = prog.ctx
        n = prog.nodes[i].size
        return ctx.launch("sgd", n, prog.values[i], prog.grads[i], self.ctl, ctx.real(self.lr),
                          np.int64(l2 != 0.0), ctx.real(l2), n)


class Adam(_DeviceOptimizer):
    """Adam with host-computed bias correction; m and v live on the device."""

    kind = "adam"

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, clip: float | None = None) -> None:
        super().__init__(lr, clip)
        self.b1, self.b2 = (float(b) for b in betas)
        self.eps = float(eps)
        self.initial_moments: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _setup(self, prog: Any) -> None:
        self.k: Buffer = prog.device.alloc(6, prog.compute_dtype)
        self.moments = {i: (prog.device.alloc(prog.nodes[i].size, prog.dtype),
                            prog.device.alloc(prog.nodes[i].size, prog.dtype))
                        for i, _ in self.live}
        # moments carried over from a core optimizer that already stepped (from_core)
        for i, (m0, v0) in getattr(self, "initial_moments", {}).items():
            if i in self.moments:
                self.moments[i][0].upload(np.asarray(m0, dtype=prog.dtype).reshape(-1))
                self.moments[i][1].upload(np.asarray(v0, dtype=prog.dtype).reshape(-1))

    def _update(self, prog: Any, i: int, l2: float) -> Launch:
        ctx = prog.ctx
        n = prog.nodes[i].size
        m, v = self.moments[i]
        return ctx.launch("adam", n, prog.values[i], prog.grads[i], m, v, self.ctl, self.k,
                          np.int64(l2 != 0.0), ctx.real(l2), n)

    def step_scalars(self) -> dict[str, float]:
        """This step's scalars in python float64, written as core.optim.Adam writes them."""
        t = self.t
        lr_t = self.lr * math.sqrt(1.0 - self.b2 ** t) / (1.0 - self.b1 ** t)
        return {"b1": self.b1, "omb1": 1.0 - self.b1, "b2": self.b2, "omb2": 1.0 - self.b2,
                "eps": self.eps, "lr_t": lr_t}

    def _upload_scalars(self) -> None:
        s = self.step_scalars()
        dt = self._prog.compute_dtype
        # staged: from pinned memory on cuda, in stream order before the episode that reads it
        self._prog.device.stage(self.k, np.array(
            [s["b1"], s["omb1"], s["b2"], s["omb2"], s["eps"], s["lr_t"]],
            dtype=np.float64).astype(dt))


def from_core(opt: core_optim.Optimizer) -> SGD | Adam:
    """A device optimizer configured like a core.optim one (same params, L2, clip, betas)."""
    if isinstance(opt, core_optim.Adam):
        out: SGD | Adam = Adam(opt.lr, (opt.b1, opt.b2), opt.eps, opt.clip)
    elif isinstance(opt, core_optim.SGD):
        out = SGD(opt.lr, opt.clip)
    else:
        raise TypeError(f"no device optimizer mirrors {type(opt).__name__}")
    for slot in opt.slots:
        out.add(slot.var.id, slot.l2)
        if getattr(slot, "m", None) is not None and isinstance(out, Adam):
            out.initial_moments[slot.var.id] = (np.array(slot.m), np.array(slot.v))
    out.t = opt.t
    return out
