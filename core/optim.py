"""Optimizers over tape parameters: SGD and Adam (the tape's own order), SGDMomentum and AdamW
(torch.optim's order, its fused multiply-adds: docs/reference-order.md, "torch.optim's steps"),
per-parameter L2, global-norm clipping, and an lr schedule per step (core.schedule).

Semantics (the opt seed; device optimizers mirror them operation for operation):
- clip (optional): norm = sqrt(acc) with acc = 0.0; for each added param in order, for each
  gradient element in row-major order: acc = acc + g*g. If norm > clip, every gradient is
  multiplied by s = clip / norm (computed once in the tape dtype).
- L2 (per parameter, when l2 != 0): g = g + l2 * w.
- SGD: w = w - lr * g.
- Adam: m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*(g*g);
  w = w - lr_t * (m / (sqrt(v) + eps)) with lr_t = lr * sqrt(1 - b2**t) / (1 - b1**t) computed
  once per step on the host in python float64 (libm pow), then rounded to the tape dtype.
- A parameter whose gradient backward never reached is skipped (not decayed, not in the norm).
Every scalar (lr, 1-b1, ...) is rounded to the tape dtype once, so float32 runs in float32.
Half tapes (float16, bfloat16) keep w, g, m and v in the half type and compute all of the above
in float32 (the scalars rounded to float32): each step widens w, g, m, v exactly, runs the
float32 formulas (clip, L2, the update), and rounds the new m, v and w once each to storage
(docs/reference-order.md, "Half precision").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tapescope.core import native as _native
from tapescope.core import precision
from tapescope.core.amp import LossScaler
from tapescope.core.ops.reference import serial_sum
from tapescope.core.schedule import Schedule
from tapescope.core.tape import Tape, TapeError, Var


@dataclass
class _Slot:
    var: Var
    l2: float
    m: np.ndarray | None = None
    v: np.ndarray | None = None
    master: np.ndarray | None = None  # mixed precision: the float32 weight (core.amp)


@dataclass
class Optimizer:
    """Shared parts: the parameter list, L2 per parameter, clipping, the step counter."""

    tape: Tape
    lr: float
    clip: float | None = None
    t: int = 0
    slots: list[_Slot] = field(default_factory=list)
    amp: LossScaler | None = None  # mixed precision (enable_amp; core.amp)
    found_inf: bool = False  # mixed precision: the last step was skipped
    schedule: Schedule | None = None  # the lr per step (core.schedule); None: lr every step
    kind = "abstract"

    def add(self, param: Var, l2: float = 0.0) -> None:
        """Optimize ``param`` with its own L2 coefficient."""
        if param.tape is not self.tape or param.op != "param":
            raise TapeError(f"{param!r} is not a parameter of this optimizer's tape")
        if any(s.var.id == param.id for s in self.slots):
            raise TapeError(f"{param!r} was added twice")
        self.slots.append(_Slot(param, float(l2)))

    def add_all(self, l2: float = 0.0) -> None:
        """Add every parameter of the tape (registration order)."""
        for p in self.tape.params():
            self.add(p, l2)

    def scalar(self, x: float):
        """``x`` rounded once to the tape's compute dtype (float32 for a half tape)."""
        return self.tape.compute_dtype.type(x)

    def grads(self) -> list[tuple[_Slot, np.ndarray]]:
        """(slot, gradient) for every touched parameter, clipped and with L2 applied (in the
        compute dtype: a half tape's gradients are widened to float32 first)."""
        live = [(s, self.tape.grad(s.var)) for s in self.slots]
        # no copy: the tape's read-only view (every use below makes new arrays; an update
        # that wrote into g would raise, not change the tape's gradient)
        live = [(s, np.asarray(precision.widen(g))) for s, g in live if g is not None]
        if self.clip is not None and live:
            acc = self.scalar(0.0)
            for _, g in live:
                acc = serial_sum(np.concatenate([[acc], (g * g).ravel()]))
            norm = np.sqrt(acc)
            if norm > self.scalar(self.clip):
                s = self.scalar(self.clip) / norm
                live = [(slot, g * s) for slot, g in live]
        out = []
        for slot, g in live:
            if slot.l2 != 0.0:
                g = g + self.scalar(slot.l2) * precision.widen(self.tape.value(slot.var))
            # NOTE: np.asarray: arithmetic on a 0-d array gives a numpy scalar (a 0-d param)
            out.append((slot, np.asarray(g)))
        return out

    def enable_amp(self, scaler: LossScaler, masters: dict[int, np.ndarray] | None = None
                   ) -> None:
        """Mixed precision (core.amp): float32 masters (``masters`` by node id, else the
        tape's values widened), float32 moments, the half tape's parameters the masters
        rounded once; ``step`` unscales, skips an overflowing step and updates ``scaler``."""
        if not self.tape.half:
            raise TapeError(f"mixed precision needs a float16/bfloat16 tape, not {self.tape.dtype}")
        if self.clip is not None:
            raise TapeError("mixed precision with gradient clipping is not supported yet")
        self.amp = scaler
        for s in self.slots:
            w = masters.get(s.var.id) if masters else None
            s.master = np.array(precision.widen(np.asarray(self.tape.value(s.var)))
                                if w is None else w, dtype=np.float32)
            self.tape.assign(s.var, s.master)

    def _amp_step(self) -> None:
        sc = self.amp
        assert sc is not None
        inv = np.float32(1.0 / sc.scale)  # a power of two: exact
        with np.errstate(all="ignore"):
            live = [(s, self.tape.grad(s.var)) for s in self.slots]
            live = [(s, np.asarray(g).astype(np.float32) * inv) for s, g in live
                    if g is not None]
            self.found_inf = sc.skips and any(not np.isfinite(g).all() for _, g in live)
            if not self.found_inf:
                self.t += 1
                for slot, g in live:
                    if slot.l2 != 0.0:
                        g = g + self.scalar(slot.l2) * slot.master
                    slot.master = np.asarray(self.update(slot, slot.master, np.asarray(g)),
                                             dtype=np.float32)
                    self.tape.assign(slot.var, slot.master)
        sc.update(self.found_inf)

    def step(self) -> None:
        """One update of every touched parameter, in place on the tape."""
        if self.amp is not None:
            self._amp_step()
            return
        self.t += 1
        half = self.tape.half
        for slot, g in self.grads():
            w = np.asarray(self.tape.value(slot.var))
            if not half:
                new = self.update(slot, w, g)
                if new is w or new is slot.m or new is slot.v or new is g:
                    self.tape.assign(slot.var, new)
                else:  # a fresh array (Adam's C pass, SGD's w - lr*g): no second copy
                    self.tape._adopt(slot.var, new)
                continue
            # half: the moments widen exactly, the update runs in float32, and m, v and w are
            # each rounded once to storage (assign rounds w)
            dt = self.tape.dtype
            slot.m, slot.v = _cast(slot.m, np.float32), _cast(slot.v, np.float32)
            new = self.update(slot, w.astype(np.float32), g)
            with np.errstate(over="ignore"):  # an overflow to inf is data here
                slot.m, slot.v = _cast(slot.m, dt), _cast(slot.v, dt)
                self.tape.assign(slot.var, new)

    def step_lr(self) -> float:
        """This step's lr (``t``, from 1): the schedule's, else ``lr``."""
        return self.lr_at(self.t)

    def lr_at(self, t: int) -> float:
        """The lr of step ``t`` (from 1): the schedule's, else ``lr``."""
        s = self.schedule
        return self.lr if s is None or s.constant else s.lr(self.lr, max(t, 1))

    @property
    def modeled(self) -> bool:
        """Whether core.provenance's update check models this optimizer (every core.optim one,
        at its step's lr)."""
        return isinstance(self, (SGD, Adam, SGDMomentum, AdamW))

    def update(self, slot: _Slot, w: np.ndarray, g: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class SGD(Optimizer):
    """w = w - lr * g."""

    kind = "sgd"

    def __init__(self, tape: Tape, lr: float, clip: float | None = None) -> None:
        super().__init__(tape, lr, clip)

    def update(self, slot: _Slot, w: np.ndarray, g: np.ndarray) -> np.ndarray:
        return w - self.scalar(self.step_lr()) * g


class Adam(Optimizer):
    """Adam with host-computed bias correction (see module docstring for the exact order)."""

    kind = "adam"

    def __init__(self, tape: Tape, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, clip: float | None = None) -> None:
        super().__init__(tape, lr, clip)
        self.b1, self.b2 = betas
        self.eps = eps
        self._k: tuple | None = None  # (what the step scalars depend on, them rounded)

    def step_scalars(self) -> dict[str, float]:
        """The per-step scalars, as the host computes them for this step ``t``."""
        t = self.t
        lr_t = self.step_lr() * math.sqrt(1.0 - self.b2 ** t) / (1.0 - self.b1 ** t)
        return {"b1": self.b1, "omb1": 1.0 - self.b1, "b2": self.b2, "omb2": 1.0 - self.b2,
                "eps": self.eps, "lr_t": lr_t}

    def _rounded_scalars(self) -> dict:
        # the step scalars rounded to the compute dtype, made once per step for every parameter
        # (issue 29: they were remade per parameter); any change to t or a hyperparameter
        # (a schedule's new lr) makes them anew
        key = (self.t, self.step_lr(), self.b1, self.b2, self.eps, self.tape.compute_dtype)
        cached = self._k
        if cached is None or cached[0] != key:
            cached = self._k = (key, {name: self.scalar(v)
                                      for name, v in self.step_scalars().items()})
        return cached[1]

    def update(self, slot: _Slot, w: np.ndarray, g: np.ndarray) -> np.ndarray:
        k = self._rounded_scalars()
        if slot.m is None:
            slot.m = np.zeros_like(w)
            slot.v = np.zeros_like(w)
        fast = _native.adam(w, g, slot.m, slot.v, k)  # one C pass, the same roundings as below
        if fast is not None:
            return fast
        # in place, but the same roundings in the same order as the docstring's formulas
        m, v = slot.m, slot.v
        m *= k["b1"]
        m += k["omb1"] * g
        gg = g * g
        gg *= k["omb2"]
        v *= k["b2"]
        v += gg
        den = np.sqrt(v)
        den += k["eps"]
        upd = np.divide(m, den, out=den)
        upd *= k["lr_t"]
        return np.subtract(w, upd, out=upd)


def _cast(a: np.ndarray | None, dt) -> np.ndarray | None:
    return None if a is None else a.astype(dt)


def _fma(a, b, c) -> np.ndarray:
    """``a * b + c`` rounded once (C's fma): where PyTorch's CPU kernels contract.

    float32 takes a fast path: the product is exact in float64 and the sum rounds once there;
    rounding that to float32 is the correctly rounded result unless the float64 sum sits exactly
    on a float32 rounding midpoint (a double rounding) or outside float32's normal range, and
    only those elements go through the exact emulation (core.explain_prims.fma, round to odd)."""
    from tapescope.core.explain_prims import fma

    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    if np.result_type(a, b, c) != np.float32:
        return fma(a, b, c)
    with np.errstate(all="ignore"):
        a, b, c = np.broadcast_arrays(a, b, c)
        shape = a.shape
        a, b, c = (np.ravel(x) for x in (a, b, c))
        p, c64 = a.astype(np.float64) * b.astype(np.float64), c.astype(np.float64)
        s = p + c64
        low = s.view(np.uint64) & np.uint64((1 << 29) - 1)  # the bits float32 rounds away
        mag = np.abs(s)
        odd = ~(mag >= 2.0 ** -126) | ~(mag < 2.0 ** 127)
        mid = np.flatnonzero(low == np.uint64(1 << 28))
        if mid.size:  # a midpoint: a double rounding only where the float64 sum was inexact
            pm, cm, sm = p[mid], c64[mid], s[mid]
            bb = sm - pm
            err = (pm - (sm - bb)) + (cm - bb)  # two-sum: the float64 sum's rounding error
            odd[mid[err != 0]] = True
        out = s.astype(np.float32)
        if odd.any():
            out[odd] = fma(a[odd], b[odd], c[odd])
    return out.reshape(shape)


class SGDMomentum(Optimizer):
    """torch.optim.SGD's step (``foreach=False``) with momentum, dampening, nesterov and
    weight_decay, in PyTorch's order and roundings (docs/reference-order.md, "SGD with
    momentum"): g = fma(w, wd, g); buf = g at a parameter's first step, else
    fma(g, 1 - dampening, momentum * buf); g = fma(buf, momentum, g) (nesterov) or buf;
    w = fma(g, -lr, w). ATen's ``add(x, alpha=a)`` is one fused multiply-add (measured)."""

    kind = "sgdm"

    def __init__(self, tape: Tape, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0, clip: float | None = None
                 ) -> None:
        super().__init__(tape, lr, clip)
        check_hyper(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay)
        if nesterov and (momentum == 0.0 or dampening != 0.0):
            raise ValueError("nesterov needs a momentum and zero dampening (torch.optim.SGD's "
                             "rule)")
        self.momentum, self.dampening = float(momentum), float(dampening)
        self.nesterov, self.weight_decay = bool(nesterov), float(weight_decay)

    def update(self, slot: _Slot, w: np.ndarray, g: np.ndarray) -> np.ndarray:
        w, slot.m = sgdm_step(w, g, slot.m, self.scalar, self.step_lr(), self.momentum,
                              self.dampening, self.nesterov, self.weight_decay)
        return w


def sgdm_step(w: np.ndarray, g: np.ndarray, buf: np.ndarray | None, T, lr: float,
              momentum: float, dampening: float, nesterov: bool, weight_decay: float
              ) -> tuple[np.ndarray, np.ndarray | None]:
    """SGDMomentum's lines on one parameter (``T``: rounds a python float to the compute
    type; ``buf`` None: the first step): ``(new w, new buf)``. core.provenance reruns it."""
    if weight_decay != 0.0:
        g = _fma(w, T(weight_decay), g)
    if momentum != 0.0:
        if buf is None:
            buf = np.array(g, copy=True)  # torch: buf = grad.clone() at the first step
        else:
            buf = _fma(g, T(1.0 - dampening), buf * T(momentum))
        g = _fma(buf, T(momentum), g) if nesterov else buf
    return np.asarray(_fma(g, T(-lr), w)), buf


class AdamW(Optimizer):
    """torch.optim.AdamW's step (``foreach=False, fused=False``), in PyTorch's order and
    roundings (docs/reference-order.md, "AdamW"): w = w * (1 - lr wd) (decoupled, first);
    m = lerp(m, g, 1 - b1) (fma(1 - b1, g - m, m), ATen's vector lerp); v = fma((1 - b2) g, g,
    b2 v); w = w + (-(lr / bc1) m) / (sqrt(v) / sqrt(bc2) + eps), with bc1 = 1 - b1^t,
    bc2 = 1 - b2^t and every scalar in python float64, then rounded once (ATen's opmath)."""

    kind = "adamw"

    def __init__(self, tape: Tape, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, clip: float | None = None
                 ) -> None:
        super().__init__(tape, lr, clip)
        check_hyper(lr=lr, eps=eps, weight_decay=weight_decay, beta1=betas[0], beta2=betas[1])
        self.b1, self.b2 = (float(b) for b in betas)
        self.eps, self.weight_decay = float(eps), float(weight_decay)
        # the square root of v: IEEE's (np.sqrt); core.explain.vml_sqrt is PyTorch's CPU one
        self.sqrt = np.sqrt

    def step_scalars(self) -> dict[str, float]:
        """This step's scalars in python float64, as torch.optim.AdamW computes them."""
        lr, t = self.step_lr(), float(self.t)  # torch: step_t.item(), a float
        bc1, bc2 = 1 - self.b1 ** t, 1 - self.b2 ** t
        return {"decay": 1 - lr * self.weight_decay, "omb1": 1 - self.b1, "b2": self.b2,
                "omb2": 1 - self.b2, "bc2s": bc2 ** 0.5, "eps": self.eps,
                "nstep": -(lr / bc1)}

    def update(self, slot: _Slot, w: np.ndarray, g: np.ndarray) -> np.ndarray:
        k = {n: self.scalar(v) for n, v in self.step_scalars().items()}
        w, slot.m, slot.v = adamw_step(w, g, slot.m, slot.v, k, self.weight_decay != 0.0,
                                       self.sqrt)
        return w


def adamw_step(w: np.ndarray, g: np.ndarray, m: np.ndarray | None, v: np.ndarray | None,
               k: dict, decay: bool, sqrt=np.sqrt) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AdamW's lines on one parameter (``k``: ``AdamW.step_scalars`` rounded; m, v None: zeros):
    ``(new w, new m, new v)``. core.provenance reruns it."""
    if m is None:
        m, v = np.zeros_like(w), np.zeros_like(w)
    if decay:
        w = w * k["decay"]
    m = lerp(m, g, k["omb1"])
    v = _fma(k["omb2"] * g, g, v * k["b2"])
    den = sqrt(v) / k["bc2s"] + k["eps"]
    return np.asarray(w + (k["nstep"] * m) / den), m, v


def lerp(a: np.ndarray, b: np.ndarray, wt) -> np.ndarray:
    """ATen's CPU lerp: fma(wt, b - a, a) when |wt| < 0.5, else fma(wt - 1, b - a, b)."""
    if abs(float(wt)) < 0.5:
        return _fma(wt, b - a, a)
    return _fma(wt - type(wt)(1), b - a, b)


def check_hyper(**values: float) -> None:
    """ValueError naming the first hyperparameter out of its range (torch.optim's ranges)."""
    for name, v in values.items():
        v = float(v)
        ok = {"beta1": 0.0 <= v < 1.0, "beta2": 0.0 <= v < 1.0}.get(name, v >= 0.0)
        if not ok or not math.isfinite(v):
            rng = "in [0, 1)" if name.startswith("beta") else "0 or more"
            raise ValueError(f"{name.replace('_', ' ')} must be {rng}, not {v:g}")
