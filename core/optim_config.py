"""The optimizer a command line chose (``--optimizer``, ``--lr``, ``--weight-decay``,
``--momentum``, ``--nesterov``, ``--schedule``, ``--warmup``, ...), applied to a workload's own.

``OptimConfig`` is plain data (it travels to a live worker as JSON text); ``build(default)``
makes the optimizer from the workload's ``make_optimizer()``, keeping its parameters, their
per-parameter L2 and its clipping, and replacing what the flags name:

- ``sgd``: torch.optim.SGD's step (core.optim.SGDMomentum: momentum, dampening 0, nesterov,
  weight_decay, its fused multiply-adds), also with momentum 0.
- ``adam``: the tape's Adam (core.optim.Adam, its order: docs/reference-order.md); Adam's
  weight decay is the workload's per-parameter L2, so ``--weight-decay`` goes with sgd or adamw.
- ``adamw``: torch.optim.AdamW's step (core.optim.AdamW, decoupled weight decay).
- none: the workload's own optimizer, its lr or schedule changed when those are given.
A bad combination is a ValueError of one line naming the flags.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import asdict, dataclass, fields

from tapescope.core import optim
from tapescope.core.schedule import SCHEDULES, Schedule

__all__ = ["OptimConfig", "KINDS"]

KINDS = ("sgd", "adam", "adamw")


@dataclass(frozen=True)
class OptimConfig:
    """The flags' values; None: not given (the workload's or PyTorch's default)."""

    kind: str | None = None
    lr: float | None = None
    weight_decay: float | None = None
    momentum: float | None = None
    nesterov: bool = False
    schedule: str = "constant"
    warmup: int = 0
    warmup_start: float | None = None
    step_size: int | None = None
    gamma: float | None = None
    steps: int | None = None  # the run's length: cosine's T_max is steps - warmup

    def __post_init__(self) -> None:
        k = self.kind
        if k is not None and k not in KINDS:
            raise ValueError(f"--optimizer must be one of {', '.join(KINDS)}, not {k!r}")
        if self.lr is not None and not (self.lr > 0.0 and math.isfinite(self.lr)):
            raise ValueError(f"--lr must be a number more than 0, not {self.lr:g}")
        for flag, v in (("--weight-decay", self.weight_decay), ("--momentum", self.momentum)):
            if v is not None:
                try:
                    optim.check_hyper(**{flag[2:].replace("-", "_"): v})
                except ValueError as e:
                    raise ValueError(f"{flag}: {e}") from None
        if self.momentum is not None and k != "sgd":
            raise ValueError(f"--momentum goes with --optimizer sgd, not "
                             f"{k or 'the workload optimizer'}")
        if self.nesterov and not self.momentum:
            raise ValueError("--nesterov needs --optimizer sgd --momentum M (M > 0)")
        if self.weight_decay is not None and k not in ("sgd", "adamw"):
            raise ValueError("--weight-decay goes with --optimizer adamw or sgd (the tape's "
                             "Adam takes the workload's per-parameter L2)")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"--schedule must be one of {', '.join(SCHEDULES)}, not "
                             f"{self.schedule!r}")
        if (self.step_size is not None or self.gamma is not None) and self.schedule != "step":
            raise ValueError("--step-size and --gamma go with --schedule step")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be 0 or more steps, not {self.warmup}")
        if self.warmup_start is not None and not self.warmup:
            raise ValueError("--warmup-start goes with --warmup N")
        if self.steps is not None and self.warmup and self.warmup >= self.steps:
            raise ValueError(f"--warmup {self.warmup} is not shorter than --steps "
                             f"{self.steps}: the run would end inside the warmup")
        if self.schedule == "cosine" and self.steps is None:
            raise ValueError("--schedule cosine anneals over the run: it needs --steps N")
        self.make_schedule()  # its own checks (ranges), once, here

    @property
    def given(self) -> bool:
        """Whether any flag changes the workload's optimizer."""
        return self != OptimConfig(steps=self.steps)

    def make_schedule(self) -> Schedule | None:
        """The schedule the flags name (None: a constant lr)."""
        if self.schedule == "constant" and not self.warmup:
            return None
        kw: dict = {"kind": self.schedule, "warmup": self.warmup}
        if self.warmup_start is not None:
            kw["warmup_start"] = self.warmup_start
        if self.schedule == "step":
            kw.update(step_size=1 if self.step_size is None else self.step_size,
                      gamma=0.1 if self.gamma is None else self.gamma)
        if self.schedule == "cosine":
            kw["t_max"] = max(1, (self.steps or 1) - self.warmup)
        try:
            return Schedule(**kw)
        except ValueError as e:
            raise ValueError(f"--schedule {self.schedule}: {e}") from None

    def build(self, default: optim.Optimizer) -> optim.Optimizer:
        """The optimizer the flags name, on ``default``'s tape, parameters, L2 and clip."""
        lr = default.lr if self.lr is None else self.lr
        tape, clip = default.tape, default.clip
        if self.kind is None:
            out = copy.copy(default)
            out.lr = lr
            out.slots = list(default.slots)
        elif self.kind == "sgd":
            out = optim.SGDMomentum(tape, lr, momentum=self.momentum or 0.0,
                                    nesterov=self.nesterov, weight_decay=self.weight_decay or 0.0,
                                    clip=clip)
        elif self.kind == "adam":
            out = optim.Adam(tape, lr, clip=clip)
        else:
            out = optim.AdamW(tape, lr, clip=clip, **({} if self.weight_decay is None else
                                                       {"weight_decay": self.weight_decay}))
        if out is not default and self.kind is not None:
            for s in default.slots:
                out.add(s.var, s.l2)
        out.schedule = self.make_schedule() or default.schedule
        return out

    def describe(self, opt: optim.Optimizer) -> str:
        """One line: the optimizer and its settings, e.g. ``adamw lr 0.001 wd 0.01, cosine``."""
        name = {"sgdm": "sgd (torch.optim.SGD's step)", "adamw": "adamw (torch.optim.AdamW's step)",
                "adam": "adam (the tape's)", "sgd": "sgd (the tape's)"}.get(opt.kind, opt.kind)
        parts = [f"{name} lr {opt.lr:g}"]
        for name, attr in (("wd", "weight_decay"), ("momentum", "momentum")):
            if getattr(opt, attr, 0.0):
                parts.append(f"{name} {getattr(opt, attr):g}")
        if getattr(opt, "nesterov", False):
            parts.append("nesterov")
        s = opt.schedule
        return " ".join(parts) + ("" if s is None or s.constant else f", {s.describe()}")

    def text(self) -> str:
        """JSON text (what a live worker is sent)."""
        return json.dumps({k: v for k, v in asdict(self).items()
                           if v != getattr(OptimConfig, k, None)}, sort_keys=True)

    @classmethod
    def parse(cls, text: str | None) -> OptimConfig | None:
        """``text()``'s inverse; None for None or empty; ValueError on anything else."""
        if not text:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            raise ValueError("optimizer settings: not JSON text") from None
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or not set(data) <= names:
            raise ValueError(f"optimizer settings: expected keys among {sorted(names)}")
        return cls(**data)
