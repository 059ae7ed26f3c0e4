"""Device optimizers: gpu.SGD / gpu.Adam / gpu.SGDMomentum / gpu.AdamW (and their mixed-precision
twins) mirror core.optim operation for operation, a schedule's lr staged with each step.

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

from tapescope.core import optim as core_optim
from tapescope.core.tape import Var
from tapescope.gpu.device import Buffer, Launch

__all__ = ["SGD", "Adam", "AdamW", "AmpAdam", "AmpAdamW", "AmpSGD", "AmpSGDMomentum",
           "SGDMomentum", "from_core"]


class _DeviceOptimizer:
    """Shared parts: parameters with their L2, clipping, the step counter, the bound program."""

    kind = "abstract"

    def __init__(self, lr: float, clip: float | None = None) -> None:
        self.lr = float(lr)
        self.clip = None if clip is None else float(clip)
        self.t = 0
        self.schedule: Any = None  # a core.schedule.Schedule (None: lr every step)
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
        self._bind_live(prog)
        self.ctl: Buffer = prog.device.alloc(2, dt)
        self.ctl.upload(np.array([1, 0], dtype=dt))
        launches = []
        if self.clip is not None and self.live:
            launches.append(ctx.single("clip_norm", self._grad_table(prog), len(self.live),
                                       ctx.real(self.clip), self.ctl))
        self._bind_updates(prog, launches)

    def _bind_live(self, prog: Any) -> None:
        """Check every parameter is one; ``live``: those backward reaches."""
        for i, _ in self.params:
            if prog.nodes[i].op != "param":
                raise ValueError(f"node {i} {prog.nodes[i].op} is not a parameter")
        # skipped: never reached by backward (the tape's grad stays None)
        self.live = [(i, l2) for i, l2 in self.params if prog.grads[i] is not None]

    def _grad_table(self, prog: Any) -> Buffer:
        """The live gradients as (address, n) pairs on the device (kept with the optimizer)."""
        table = np.array([[prog.grad_ptrs[i], prog.nodes[i].size] for i, _ in self.live],
                         dtype=np.int64).reshape(-1)
        tbuf = prog.device.alloc(table.size, np.int64)
        tbuf.upload(table)
        self._keep = tbuf
        return tbuf

    def _bind_updates(self, prog: Any, launches: list[Launch]) -> None:
        """``launches`` (the step's checks) then one update per live parameter, bound to prog."""
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

    def step_lr(self) -> float:
        """This step's lr (``t``, from 1): the schedule's, else ``lr`` (core.optim's rule)."""
        return self.lr_at(self.t)

    def lr_at(self, t: int) -> float:
        """The lr of step ``t`` (from 1)."""
        s = self.schedule
        return self.lr if s is None or s.constant else s.lr(self.lr, max(t, 1))

    def _stage(self, values: list[float]) -> None:
        """This step's scalars, python float64 rounded once to the compute type, into ``k``."""
        dt = self._prog.compute_dtype
        self._prog.device.stage(self.k, np.array(values, dtype=np.float64).astype(dt))


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
    n_scalars = 6

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, clip: float | None = None) -> None:
        super().__init__(lr, clip)
        self.b1, self.b2 = (float(b) for b in betas)
        self.eps = float(eps)
        self.initial_moments: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _moments_dtype(self, prog: Any) -> np.dtype:
        """The moments' type: the episode's (mixed precision: float32, ``_Amp``)."""
        return prog.dtype

    def _setup(self, prog: Any) -> None:
        """The step's scalars and m, v per parameter (AdamW and the Amp variants too)."""
        dt = self._moments_dtype(prog)
        self.k: Buffer = prog.device.alloc(self.n_scalars, prog.compute_dtype)
        self.moments = {i: (prog.device.alloc(prog.nodes[i].size, dt),
                            prog.device.alloc(prog.nodes[i].size, dt)) for i, _ in self.live}
        # moments carried over from a core optimizer that already stepped (from_core)
        for i, (m0, v0) in getattr(self, "initial_moments", {}).items():
            if i in self.moments:
                self.moments[i][0].upload(np.asarray(m0, dtype=dt).reshape(-1))
                self.moments[i][1].upload(np.asarray(v0, dtype=dt).reshape(-1))

    def _update(self, prog: Any, i: int, l2: float) -> Launch:
        """The ``adam`` / ``adamw`` kernel (``kind``) on one parameter."""
        ctx = prog.ctx
        n = prog.nodes[i].size
        m, v = self.moments[i]
        return ctx.launch(self.kind, n, prog.values[i], prog.grads[i], m, v, self.ctl, self.k,
                          np.int64(l2 != 0.0), ctx.real(l2), n)

    def step_scalars(self) -> dict[str, float]:
        """This step's scalars in python float64, written as core.optim.Adam writes them."""
        t = self.t
        lr_t = self.step_lr() * math.sqrt(1.0 - self.b2 ** t) / (1.0 - self.b1 ** t)
        return {"b1": self.b1, "omb1": 1.0 - self.b1, "b2": self.b2, "omb2": 1.0 - self.b2,
                "eps": self.eps, "lr_t": lr_t}

    def _upload_scalars(self) -> None:
        s = self.step_scalars()
        dt = self._prog.compute_dtype
        # staged: from pinned memory on cuda, in stream order before the episode that reads it
        self._prog.device.stage(self.k, np.array(
            [s["b1"], s["omb1"], s["b2"], s["omb2"], s["eps"], s["lr_t"]],
            dtype=np.float64).astype(dt))


class SGDMomentum(_DeviceOptimizer):
    """torch.optim.SGD's step (core.optim.SGDMomentum): momentum buffers on the device."""

    kind = "sgdm"
    n_scalars = 6

    def __init__(self, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0,
                 clip: float | None = None) -> None:
        super().__init__(lr, clip)
        self.momentum, self.dampening = float(momentum), float(dampening)
        self.nesterov, self.weight_decay = bool(nesterov), float(weight_decay)
        self.initial_moments: dict[int, tuple[np.ndarray, None]] = {}

    def _setup(self, prog: Any) -> None:
        self.k: Buffer = prog.device.alloc(self.n_scalars, prog.compute_dtype)
        self._started = False  # buffers of a core optimizer that already stepped
        dt = prog.compute_dtype if getattr(self, "amp", False) else prog.dtype
        self.moments = {i: (prog.device.alloc(prog.nodes[i].size, dt), None)
                        for i, _ in self.live} if self.momentum else {}
        for i, (b0, _) in self.initial_moments.items():
            if i in self.moments:
                self.moments[i][0].upload(np.asarray(b0, dtype=dt).reshape(-1))
                self._started = True

    def _update(self, prog: Any, i: int, l2: float) -> Launch:
        ctx = prog.ctx
        n = prog.nodes[i].size
        buf = self.moments[i][0] if self.momentum else prog.values[i]  # (unread: no momentum)
        return ctx.launch("sgdm", n, prog.values[i], prog.grads[i], buf, self.ctl, self.k,
                          np.int64(l2 != 0.0), ctx.real(l2), n)

    def _upload_scalars(self) -> None:
        # torch: buf = grad.clone() at a parameter's first step (t counts the steps taken: a
        # step skipped under --amp is taken back, after_step)
        first = self.t == 1 and not self._started
        self._stage([self.step_lr(), self.momentum, 1.0 - self.dampening, self.weight_decay,
                     float(first), float(self.nesterov)])


class AdamW(_DeviceOptimizer):
    """torch.optim.AdamW's step (core.optim.AdamW): m and v on the device."""

    kind = "adamw"

    def __init__(self, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2,
                 clip: float | None = None) -> None:
        super().__init__(lr, clip)
        self.b1, self.b2 = (float(b) for b in betas)
        self.eps, self.weight_decay = float(eps), float(weight_decay)
        self.initial_moments: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    n_scalars = 9
    _moments_dtype = Adam._moments_dtype
    _setup = Adam._setup
    _update = Adam._update

    def step_scalars(self) -> dict[str, float]:
        """This step's scalars in python float64, as core.optim.AdamW writes them."""
        lr, t = self.step_lr(), float(self.t)
        bc1, bc2 = 1 - self.b1 ** t, 1 - self.b2 ** t
        return {"decay": 1 - lr * self.weight_decay, "omb1": 1 - self.b1, "b2": self.b2,
                "omb2": 1 - self.b2, "bc2s": bc2 ** 0.5, "eps": self.eps,
                "nstep": -(lr / bc1)}

    def _upload_scalars(self) -> None:
        s = self.step_scalars()
        # the lerp's branch on the rounded weight, as ATen tests |weight| < 0.5
        small = abs(float(np.float64(s["omb1"]).astype(self._prog.compute_dtype))) < 0.5
        self._stage([s["decay"], s["omb1"], s["b2"], s["omb2"], s["bc2s"], s["eps"],
                     s["nstep"], float(self.weight_decay != 0.0), float(small)])


class _Amp:
    """Mixed precision on the device (core.amp): float32 masters and moments, the unscale and
    overflow check of core.optim's ``_amp_step``, and the scaler's update on the host after
    each step (one flag read back: the next step's seed depends on it)."""

    amp = True

    def _amp_init(self) -> None:
        self.scaler: Any = None  # a core.amp.LossScaler, copied from the core optimizer
        self.initial_masters: dict[int, np.ndarray] = {}
        self.found_inf = False

    def _bind(self, prog: Any) -> None:
        ctx, dt = prog.ctx, prog.compute_dtype
        self._bind_live(prog)
        self.ctl: Buffer = prog.device.alloc(4, dt)
        self.ctl.upload(np.array([1, 0, 0, 1.0 / self.scaler.scale], dtype=dt))
        self.masters = {i: prog.device.alloc(prog.nodes[i].size, dt) for i, _ in self.live}
        for i, buf in self.masters.items():
            buf.upload(np.asarray(self.initial_masters[i], dtype=dt).reshape(-1))
        launches = []
        if self.scaler.skips and self.live:
            launches.append(ctx.single("amp_check", self._grad_table(prog), len(self.live),
                                       self.ctl))
        self._bind_updates(prog, launches)

    def after_step(self, prog: Any) -> None:
        """Read the overflow flag, undo a skipped step's count, update the scale and ship its
        inverse for the next step (the seed: Program.set_seed, by the run)."""
        self.found_inf = False
        if self.scaler.skips:
            prog.device.synchronize()
            self.found_inf = bool(self.ctl.download()[2] != 0)
        if self.found_inf:
            self.t -= 1  # as core.optim: a skipped step does not advance Adam's t
        self.scaler.update(self.found_inf)
        dt = prog.compute_dtype
        prog.device.stage(self.ctl, np.array([1, 0, 0, 1.0 / self.scaler.scale], dtype=dt))


class AmpSGD(_Amp, SGD):
    """SGD on float32 masters (mixed precision)."""

    def __init__(self, lr: float) -> None:
        SGD.__init__(self, lr)
        self._amp_init()

    def _update(self, prog: Any, i: int, l2: float) -> Launch:
        ctx = prog.ctx
        n = prog.nodes[i].size
        return ctx.launch("amp_sgd", n, prog.values[i], self.masters[i], prog.grads[i],
                          self.ctl, ctx.real(self.lr), np.int64(l2 != 0.0), ctx.real(l2), n)


class AmpAdam(_Amp, Adam):
    """Adam on float32 masters and moments (mixed precision)."""

    def __init__(self, lr: float, betas: tuple[float, float], eps: float) -> None:
        Adam.__init__(self, lr, betas, eps)
        self._amp_init()

    def _moments_dtype(self, prog: Any) -> np.dtype:
        return prog.compute_dtype  # float32 moments beside the float32 masters

    def _update(self, prog: Any, i: int, l2: float) -> Launch:
        """The ``amp_adam`` / ``amp_adamw`` kernel on one parameter and its master."""
        ctx = prog.ctx
        n = prog.nodes[i].size
        m, v = self.moments[i]
        return ctx.launch(f"amp_{self.kind}", n, prog.values[i], self.masters[i],
                          prog.grads[i], m, v, self.ctl, self.k, np.int64(l2 != 0.0),
                          ctx.real(l2), n)


class AmpSGDMomentum(_Amp, SGDMomentum):
    """torch.optim.SGD's step on float32 masters and buffers (mixed precision)."""

    def __init__(self, lr: float, momentum: float, dampening: float, nesterov: bool,
                 weight_decay: float) -> None:
        SGDMomentum.__init__(self, lr, momentum, dampening, nesterov, weight_decay)
        self._amp_init()

    def _update(self, prog: Any, i: int, l2: float) -> Launch:
        ctx = prog.ctx
        n = prog.nodes[i].size
        buf = self.moments[i][0] if self.momentum else self.masters[i]  # (unread: none)
        return ctx.launch("amp_sgdm", n, prog.values[i], self.masters[i], prog.grads[i], buf,
                          self.ctl, self.k, np.int64(l2 != 0.0), ctx.real(l2), n)


class AmpAdamW(_Amp, AdamW):
    """torch.optim.AdamW's step on float32 masters and moments (mixed precision)."""

    def __init__(self, lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float) -> None:
        AdamW.__init__(self, lr, betas, eps, weight_decay)
        self._amp_init()

    _moments_dtype = AmpAdam._moments_dtype
    _update = AmpAdam._update


def from_core(opt: core_optim.Optimizer) -> _DeviceOptimizer:
    """A device optimizer configured like a core.optim one (same params, L2, clip, betas,
    schedule; under mixed precision its masters, moments and loss scale)."""
    import copy

    amp = getattr(opt, "amp", None) is not None
    sched = getattr(opt, "schedule", None)
    if type(opt) is core_optim.SGD and sched is not None and not sched.constant:
        raise TypeError("the tape's plain SGD keeps its lr in its launches: a schedule needs "
                        "--optimizer sgd (torch.optim.SGD's step) or adam")
    if isinstance(opt, core_optim.AdamW):
        out: _DeviceOptimizer = (
            AmpAdamW(opt.lr, (opt.b1, opt.b2), opt.eps, opt.weight_decay) if amp else
            AdamW(opt.lr, (opt.b1, opt.b2), opt.eps, opt.weight_decay, opt.clip))
    elif isinstance(opt, core_optim.SGDMomentum):
        out = (AmpSGDMomentum(opt.lr, opt.momentum, opt.dampening, opt.nesterov,
                              opt.weight_decay) if amp else
               SGDMomentum(opt.lr, opt.momentum, opt.dampening, opt.nesterov,
                           opt.weight_decay, opt.clip))
    elif isinstance(opt, core_optim.Adam):
        out = (AmpAdam(opt.lr, (opt.b1, opt.b2), opt.eps) if amp else
               Adam(opt.lr, (opt.b1, opt.b2), opt.eps, opt.clip))
    elif isinstance(opt, core_optim.SGD):
        out = AmpSGD(opt.lr) if amp else SGD(opt.lr, opt.clip)
    else:
        raise TypeError(f"no device optimizer mirrors {type(opt).__name__}")
    out.schedule = sched
    if amp:
        out.scaler = copy.deepcopy(opt.amp)  # type: ignore[attr-defined]
    for slot in opt.slots:
        out.add(slot.var.id, slot.l2)
        if getattr(slot, "m", None) is not None and hasattr(out, "initial_moments"):
            out.initial_moments[slot.var.id] = (np.array(slot.m), None if slot.v is None
                                                else np.array(slot.v))
        if amp:
            out.initial_masters[slot.var.id] = np.array(slot.master)  # type: ignore[attr-defined]
    out.t = opt.t
    return out
