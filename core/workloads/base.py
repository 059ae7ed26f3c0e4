"""The workload protocol shared by the built-ins and users' own episodes."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core import optim
from core.tape import Tape, TapeError, Var


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
        """The data leaves of minibatch ``step`` by name (deterministic in seed and step)."""
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
        """Reset to the mark and record minibatch ``step``; returns the loss Var."""
        self.tape.reset_to(self.mark)
        data = self.batch(step) if batch is None else batch
        self.inputs = {name: self.tape.const(a, name=name) for name, a in data.items()}
        self.loss = self.episode(self.inputs)
        if not self.tape.ok:
            raise TapeError(f"workload {self.name}: {self.tape.error}")
        return self.loss

    def train(self, steps: int, on_step: Callable[[int, float], None] | None = None,
              opt: optim.Optimizer | None = None) -> list[float]:
        """Record, backward and step ``steps`` times; returns the losses."""
        opt = opt or self.make_optimizer()
        losses = []
        for step in range(steps):
            loss = self.record(step)
            self.tape.backward(loss)
            opt.step()
            value = float(self.tape.value(loss))
            losses.append(value)
            if on_step:
                on_step(step, value)
        return losses

    def init(self, *shape: int, fan_in: int | None = None) -> np.ndarray:
        """Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) initial weights from the workload's rng."""
        fan_in = fan_in or shape[0]
        bound = 1.0 / np.sqrt(fan_in)
        return self.rng.uniform(-bound, bound, shape)
