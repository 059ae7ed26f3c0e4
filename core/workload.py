"""The workload protocol shared by the built-ins (core.workloads), users' own episodes and ONNX
models (core.onnx.workload).

It lives beside core.workloads, not in it, so that core.onnx.workload can subclass it without
running core/workloads/__init__ (whose ``get`` loads core.onnx.workload for ``onnx:`` names):
the two import one way only. ``from tapescope.core.workloads import Workload`` names it too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tapescope.core import optim
from tapescope.core.tape import Tape, TapeError, Var


class Workload:
    """Parameters on a tape plus a deterministic stream of minibatches."""

    name = "workload"

    def __init__(self, dtype=np.float64, math: str = "refmath", seed: int = 0) -> None:
        self.seed = seed
        self.tape = Tape(dtype=dtype, math=math)
        self.rng = np.random.default_rng(seed)
        self.build()
        self.mark = self.tape.mark()
        self.inputs: dict[str, Var] = {}
        self.loss: Var | None = None

    # ---- to override ---------------------------------------------------------------------
    def build(self) -> None:
        """Register the parameters (called once)."""
        raise NotImplementedError

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """The data leaves of step ``step`` by name (deterministic in seed and step).

        Steps are numbered from 1, as every message prints them (the first step trained is
        ``batch(1)``); ``batch(0)`` is the episode recorded before any step, whose structure
        the device captures and the example tapes keep."""
        raise NotImplementedError

    def episode(self, data: dict[str, Var]) -> Var:
        """Record one episode on the tape from the data leaves; return the scalar loss."""
        raise NotImplementedError

    def make_optimizer(self) -> optim.Optimizer:
        """The optimizer this workload trains with, parameters added."""
        opt = optim.Adam(self.tape, lr=1e-2)
        opt.add_all()
        return opt

    # ---- shared --------------------------------------------------------------------------
    @property
    def params(self) -> list[Var]:
        """Parameters in registration order."""
        return self.tape.params()

    def record(self, step: int = 0, batch: dict[str, np.ndarray] | None = None) -> Var:
        """Reset to the mark and record step ``step`` (from 1; 0 before any); the loss Var."""
        self.tape.reset_to(self.mark)
        data = self.batch(step) if batch is None else batch
        self.inputs = {name: self.tape.const(a, name=name) for name, a in data.items()}
        self.loss = self.episode(self.inputs)
        if not self.tape.ok:
            raise TapeError.poisoned(self.tape, f"workload {self.name}: {self.tape.error}")
        return self.loss

    def train(self, steps: int, on_step: Callable[[int, float], None] | None = None,
              opt: optim.Optimizer | None = None) -> list[float]:
        """Record, backward and step ``steps`` times (steps 1..steps); returns the losses."""
        opt = opt or self.make_optimizer()
        losses = []
        for step in range(1, steps + 1):
            loss = self.record(step)
            self.tape.backward(loss)
            opt.step()
            value = float(self.tape.value(loss))
            losses.append(value)
            if on_step:
                on_step(step, value)
        return losses

    def step_rng(self, step: int, *more: int) -> np.random.Generator:
        """The generator of step ``step``'s data, deterministic in (seed, step, *more).

        NOTE: seeded with step - 1, so that step 1 draws what the first minibatch drew when
        ``batch`` counted from 0 (example tapes and every recorded number stay valid); step 0,
        the episode before any step, draws as step 1."""
        return np.random.default_rng((self.seed, max(step, 1) - 1, *more))

    def init(self, *shape: int, fan_in: int | None = None) -> np.ndarray:
        """Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) initial weights from the workload's rng."""
        fan_in = fan_in or shape[0]
        bound = 1.0 / np.sqrt(fan_in)
        return self.rng.uniform(-bound, bound, shape)
