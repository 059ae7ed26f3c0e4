"""Learning-rate schedules: torch.optim.lr_scheduler's StepLR, CosineAnnealingLR and a LinearLR
warmup (SequentialLR at the warmup's end), each lr computed as PyTorch computes it.

PyTorch's ``scheduler.step()`` takes the *recursive* form (``get_lr``: the new lr from the
group's current lr, e.g. cosine's ``(1 + cos(pi e / T)) / (1 + cos(pi (e - 1) / T)) *
(lr - eta_min) + eta_min``), not the closed form (``_get_closed_form_lr``), which it uses only
when a step is given an epoch: SequentialLR does that at its milestone (``_update_lr(0)``: the
main schedule restarts from its closed form at epoch 0, i.e. the base lr). The two forms differ
in the last bits after a few steps, so this module replays the recursion, in Python floats,
expression for expression (docs/reference-order.md, "Optimizers", "Learning-rate schedules").
A schedule is pure: ``lr(base, t)`` is the lr of training step ``t`` (from 1), the value the
scheduler holds after ``t - 1`` of its steps, so every target (core, the device optimizers, the
torch candidate's own ``torch.optim`` run) reads the same float for the same step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Schedule", "SCHEDULES"]

SCHEDULES = ("constant", "step", "cosine")
_MEMO: dict[tuple, list[float]] = {}  # (schedule, base lr) -> the lrs of steps 1.. so far


@dataclass(frozen=True)
class Schedule:
    """``kind`` after ``warmup`` steps of LinearLR(``warmup_start`` -> 1); ``step``: StepLR(
    ``step_size``, ``gamma``); ``cosine``: CosineAnnealingLR(``t_max``, ``eta_min``)."""

    kind: str = "constant"
    warmup: int = 0
    warmup_start: float = 1.0 / 3  # LinearLR's default start_factor
    step_size: int = 1
    gamma: float = 0.1
    t_max: int = 1
    eta_min: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {self.kind!r}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be 0 or more steps, not {self.warmup}")
        if self.warmup and not 0.0 < self.warmup_start <= 1.0:
            raise ValueError(f"warmup start factor must be in (0, 1] (LinearLR's), not "
                             f"{self.warmup_start}")
        if self.kind == "step" and (self.step_size < 1 or not self.gamma > 0.0):
            raise ValueError(f"step schedule: step size >= 1 and gamma > 0, not "
                             f"{self.step_size} and {self.gamma}")
        if self.kind == "cosine" and self.t_max < 1:
            raise ValueError(f"cosine schedule: T_max must be at least 1 step, not {self.t_max}")

    @property
    def constant(self) -> bool:
        """Whether every step's lr is the base lr."""
        return self.kind == "constant" and self.warmup == 0

    def lrs(self, base: float, steps: int) -> list[float]:
        """The lr of steps 1..``steps`` (PyTorch's scheduler values after 0..steps-1 steps)."""
        out: list[float] = []
        lr = self._first(base)
        for t in range(1, steps + 1):
            out.append(lr)
            if t < steps:
                lr = self._next(base, lr, t)
        return out

    def lr(self, base: float, t: int) -> float:
        """The lr of training step ``t`` (from 1); the sequence so far is kept, so a run that
        asks step by step extends it by one step each time."""
        if t < 1:
            raise ValueError(f"schedule: steps count from 1, not {t}")
        key = (self, float(base))
        seq = _MEMO.get(key)
        if seq is None:
            if len(_MEMO) > 64:
                _MEMO.clear()
            seq = _MEMO[key] = [self._first(base)]
        while len(seq) < t:
            seq.append(self._next(base, seq[-1], len(seq)))
        return seq[t - 1]

    # ---- PyTorch's recursion ------------------------------------------------------------------
    def _first(self, base: float) -> float:
        if self.warmup:  # LinearLR's get_lr at last_epoch 0: lr * start_factor
            return base * self.warmup_start
        return base  # StepLR at epoch 0 and CosineAnnealingLR's initial step keep the lr

    def _next(self, base: float, lr: float, e: int) -> float:
        """The group lr after the scheduler's ``e``-th step (last_epoch becomes ``e``)."""
        w = self.warmup
        if w and (e < w or self.kind == "constant"):
            return self._linear(lr, e)
        if w and e == w:  # SequentialLR's milestone: the main schedule's closed form at 0
            if self.kind == "cosine":
                return self.eta_min + (base - self.eta_min) * (1 + math.cos(0.0)) / 2
            return base * self.gamma ** (0 // self.step_size)
        return self._main(base, lr, e - w)

    def _linear(self, lr: float, e: int) -> float:
        sf, ef, total = self.warmup_start, 1.0, self.warmup
        if e > total:
            return lr
        return lr * (1.0 + (ef - sf) / (total * sf + (e - 1) * (ef - sf)))

    def _main(self, base: float, lr: float, e: int) -> float:
        if self.kind == "constant":
            return lr
        if self.kind == "step":
            return lr if e % self.step_size != 0 else lr * self.gamma
        t, eta = self.t_max, self.eta_min
        if (e - 1 - t) % (2 * t) == 0:
            return lr + (base - eta) * (1 - math.cos(math.pi / t)) / 2
        return ((1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t))
                * (lr - eta) + eta)

    def describe(self) -> str:
        """A short label, e.g. ``cosine T_max=8 after 2 warmup steps from 0.333x``."""
        main = {"constant": "constant", "step": f"step every {self.step_size} x{self.gamma:g}",
                "cosine": f"cosine T_max={self.t_max}"}[self.kind]
        if self.warmup:
            main += f" after {self.warmup} warmup steps from {self.warmup_start:g}x"
        return main
