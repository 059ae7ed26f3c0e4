"""numpy arrays to torch tensors and back for the reference forms' tests (a half type through
float64: exact both ways, for an array already in that half type), and their bytes."""

from __future__ import annotations

import numpy as np


def to_torch(a: np.ndarray, tdt=None):
    """``a`` as a tensor; ``tdt`` (a torch half type): ``a``'s values, held in it."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(a.astype(np.float64) if tdt else a))
    return t.to(tdt) if tdt else t


def from_torch(t, dt) -> np.ndarray:
    """A tensor's values as numpy of ``dt`` (a half type's through float64: exact)."""
    import torch

    return t.double().numpy().astype(dt) if t.dtype in (torch.float16, torch.bfloat16) \
        else t.numpy()


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()
