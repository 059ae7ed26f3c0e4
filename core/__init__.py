"""tapescope core: the define-by-run tape (the CPU semantic reference), ops, optimizers, files."""

from tapescope.core import ops, optim
from tapescope.core.tape import BackwardStep, Contribution, Mark, Node, Tape, TapeError, Var

__all__ = [
    "BackwardStep",
    "Contribution",
    "Mark",
    "Node",
    "Tape",
    "TapeError",
    "Var",
    "ops",
    "optim",
]
